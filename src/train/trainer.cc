// Trainer: replicas, workers, the step loop, logging, metrics and checkpoints.
#include "terngrad/train/trainer.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <thread>

#include "terngrad/backend/backend.h"
#include "terngrad/comm/communicator.h"
#include "terngrad/comm/gradient_exchange.h"
#include "terngrad/comm/thread_communicator.h"
#if TG_HAVE_CUDA
#include "terngrad/comm/nccl_communicator.h"
#endif
#include "terngrad/core/phase_times.h"
#include "terngrad/core/timeline.h"
#include "terngrad/data/crc32c.h"
#include "terngrad/data/input_pipeline.h"
#include "terngrad/models/registry.h"
#include "terngrad/optim/lr_schedule.h"
#include "terngrad/optim/moving_average.h"
#include "terngrad/optim/optimizer.h"
#include "terngrad/train/batch_source.h"
#include "terngrad/train/batch_upload.h"
#include "terngrad/train/checkpoint.h"
#include "terngrad/train/event_writer.h"
#include "terngrad/train/loss_scaler.h"
#include "terngrad/train/metrics.h"
#include "terngrad/train/replica_threads.h"
#include "terngrad/train/stale_files.h"
#include "terngrad/train/throughput_meter.h"
#include "terngrad/train/train_flags.h"

namespace tg {

namespace fs = std::filesystem;

namespace {
// One device's model copy and everything that runs on it: its workers (virtual nodes) compute one after
// another on the replica's thread, and its exchange meets the other replicas (of this and other processes)
// through the replicas' communicator.
struct Replica {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<ParameterStore> store;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<ExponentialMovingAverage> ema;
  std::vector<int> workers;                    // indices into Impl::workers
  Communicator* group = nullptr;               // over every replica of every process; nullptr when alone
  std::unique_ptr<GradientExchange> exchange;  // of this replica's workers
  bool overlap = false;                        // its exchange runs inside the last worker's backward
  PhaseTimes times;                            // of the last step
  ExchangeStats stats;                         // of the last step
  Buffer overflow_flag;     // i32 (1) on the device: fp16 gradients held Inf/NaN on some worker (all-reduced MAX)
  Buffer overflow_host;     // its staging copy (read once per fp16 step)
  bool overflowed = false;  // the last step's flag, the same on every replica of every process: skipped
};

struct Worker {
  int replica = 0;
  int global_index = 0;  // (process * replicas + replica) * workers per replica + index in the replica
  std::unique_ptr<Net> net;
  std::vector<Tensor> grad_views;  // views of its gradient slab (on its device) for the exchange, in parameter order
  int track = -1;                  // its timeline track
  double forward_backward = 0;     // seconds in the last step, exchange work inside backward excluded
};

// The replica's slab that a checkpoint part holds.
Slab& checkpoint_slab(Replica& r, CheckpointLayout::Part part) {
  switch (part) {
    case CheckpointLayout::kParams:
      return r.store->params();
    case CheckpointLayout::kState:
      return r.store->state();
    case CheckpointLayout::kEma:
      return r.ema->shadow();
    case CheckpointLayout::kSlots:
      return r.optimizer->slots();
  }
  TG_THROW("unknown checkpoint part {}", static_cast<int>(part));
}

using Clock = std::chrono::steady_clock;
double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Hands the exchange, layer by layer, the gradients the last worker's backward has finished (--overlap), and
// lets it encode and decode the buckets whose collectives came back.
class ExchangeFeeder final : public GradientListener {
 public:
  explicit ExchangeFeeder(GradientExchange& exchange) : exchange_(exchange) {}
  void gradients_ready(int first) override {
    const Clock::time_point t0 = Clock::now();
    exchange_.tensors_ready(first);
    exchange_.progress();
    seconds += seconds_between(t0, Clock::now());
  }
  double seconds = 0;  // spent inside backward on the exchange's work

 private:
  GradientExchange& exchange_;
};

// --threads over --cpu_replicas: each CPU replica's team gets an equal share of the cores (at least one).
int cpu_threads_per_replica(int threads, int replicas) {
  const int all = threads > 0 ? threads : std::max(1u, std::thread::hardware_concurrency());
  return std::max(1, all / replicas);
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  return fmt::format("{:.1f} {}", b, units[u]);
}

std::string human_duration(double s) {
  int64_t t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02}m", t / 3600, (t / 60) % 60);
  if (t >= 60) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}
// What run() keeps between steps: where the log lines go and the sums of the current log window.

struct RunLog {
  RunLog(int64_t batch_size, int64_t log_every, size_t n_workers)
      : meter(batch_size, log_every), window_worker_fb(n_workers, 0.0) {}
  std::unique_ptr<MetricsWriter> metrics;  // --metrics_jsonl (process 0)
  std::unique_ptr<EventWriter> events;     // TensorBoard (process 0)
  ThroughputMeter meter;                   // its warm-up is the first log window
  Clock::time_point start = Clock::now();
  PhaseTimes window_times, run_times;  // sums over the log window; over the run after the warm-up
  int64_t run_time_steps = 0;
  std::vector<double> window_worker_fb;  // per worker, forward + backward seconds summed over the window
  int64_t window_host_syncs = 0;         // replica 0's Backend::host_syncs() when the window's steps began
  bool timeline_written = false;
};
}  // namespace

struct Trainer::Impl {
  TrainConfig cfg;
  Communicator* process_comm = nullptr;
  int rank = 0, num_processes = 1;
  int64_t worker_batch = 0, process_batch = 0;
  // The replicas' communicators, one rank per replica (declared first: they outlive the exchanges using them).
  std::vector<std::unique_ptr<ThreadCommunicator>> thread_comms;  // CPU replicas of one process
#if TG_HAVE_CUDA
  std::vector<std::unique_ptr<NcclCommunicator>> nccl_comms;  // GPUs
#endif
  std::vector<Replica> replicas;
  std::vector<Worker> workers;
  std::unique_ptr<Timeline> timeline;       // --timeline
  std::unique_ptr<ReplicaThreads> threads;  // one host thread per replica
  PhaseTimes step_times;                    // of the last step (replica 0's, plus the input wait and other)
  ExchangeStats last_stats;
  std::unique_ptr<LearningRateSchedule> schedule;
  std::unique_ptr<BatchSource> source;
  CompressionPolicy policy;
  std::unique_ptr<BatchUpload> batches;  // staging host batches, device batches, uploads
  int64_t start_step = 0;
  std::vector<int64_t> kept_steps;
  std::string last_digest;
  std::string resumed_path;            // the checkpoint this run resumed from
  std::unique_ptr<LossScaler> scaler;  // --precision fp16: dynamic loss scaling (disabled otherwise)

  // Construction: build() (replicas, workers, exchange, schedule), then resume_or_initialize().
  void build();
  void place_workers(int n_replicas);
  void build_replicas();
  void build_replica(Replica& r, const ModelConfig& mc);
  void connect_replicas();
  void build_timeline();
  void build_exchanges();
  void build_schedule();
  void allocate_host_batch();
  void resume_or_initialize();
  void clean_train_dir();
  uint64_t resume(const std::string& path);
  void check_resumable(const CheckpointMeta& m) const;
  void create_ema(Replica& r);
  void open_batch_source(uint64_t cursor);
  void warm_up_gpus();

  // A step.
  void step(int64_t t, float lr);
  void replica_step(Replica& r, uint32_t step, float lr, int64_t t);
  bool agree_on_overflow(Replica& r);

  // run()'s phases: configuration lines, timed steps, log windows, what follows a step, the end of the run.
  TrainResult already_finished() const;
  RunLog open_run_log();
  void log_configuration() const;
  bool timed_step(int64_t t, float lr, RunLog& log);
  void log_window(int64_t done, float lr, RunLog& log);
  void after_step(int64_t done, RunLog& log);
  void finish_run(int64_t t, RunLog& log, TrainResult& result);

  void write_timeline();
  std::vector<PhaseTimes> gather_times(const PhaseTimes& mine);
  std::string save(int64_t steps_done);
  void check_replicas(int64_t steps_done);
  uint32_t parameter_crc(Replica& r);
  void verify_processes_agree();
  bool stop_requested(const std::atomic<bool>* stop);
  void write_summaries(EventWriter& events, int64_t step, float lr, double examples_per_sec, const PhaseTimes& time);
  std::vector<NamedTensor> host_snapshot(std::vector<Buffer>& storage);
  bool is_chief() const { return rank == 0; }
};

Trainer::Trainer(const TrainConfig& config, Communicator* process_comm) : impl_(std::make_unique<Impl>()) {
  impl_->cfg = config;
  impl_->process_comm = process_comm;
  if (process_comm) {
    impl_->rank = process_comm->rank();
    impl_->num_processes = process_comm->size();
  }
  impl_->cfg.num_processes = impl_->num_processes;
  impl_->cfg.resolve_defaults();
  impl_->cfg.validate(impl_->num_processes);
  impl_->build();
  impl_->resume_or_initialize();
}

Trainer::~Trainer() = default;

int64_t Trainer::host_syncs() const {
  int64_t most = 0;
  for (const Replica& r : impl_->replicas) most = std::max(most, r.backend->host_syncs());
  return most;
}

void Trainer::Impl::build() {
  scaler = std::make_unique<LossScaler>(cfg.compute_dtype() == DType::kF16);
  const int n_workers = cfg.workers_per_process();
  worker_batch = cfg.batch_size / (static_cast<int64_t>(n_workers) * num_processes);
  process_batch = worker_batch * n_workers;
  build_replicas();
  connect_replicas();
  build_timeline();
  build_exchanges();
  build_schedule();
  allocate_host_batch();
}

// Workers are placed round-robin: worker w computes on replica w % R as its (w / R)-th worker.
void Trainer::Impl::place_workers(int n_replicas) {
  const int n_workers = cfg.workers_per_process();
  const int per_replica = n_workers / n_replicas;  // validate(): a multiple
  replicas.resize(static_cast<size_t>(n_replicas));
  workers.resize(static_cast<size_t>(n_workers));
  for (int w = 0; w < n_workers; ++w) {
    Worker& wk = workers[w];
    wk.replica = w % n_replicas;
    wk.global_index = (rank * n_replicas + wk.replica) * per_replica + w / n_replicas;
    replicas[wk.replica].workers.push_back(w);
  }
}

// Replicas: one per device (--num_gpus GPUs, or --cpu_replicas shares of the CPU), each with its own thread.
// Each replica is built on its own thread, so its memory is first touched there and its thread-bound state
// (CUDA device, the CPU team's size) is set where it is used.
void Trainer::Impl::build_replicas() {
  const bool cpu = cfg.device == "cpu";
  const int n_replicas = cpu ? cfg.cpu_replicas : cfg.num_gpus;
  place_workers(n_replicas);
  BackendOptions bo;
  bo.threads = cpu ? cpu_threads_per_replica(cfg.threads, n_replicas) : cfg.threads;
  bo.allow_tf32 = cfg.allow_tf32;
  bo.deterministic = cfg.deterministic;
  const ModelConfig mc = cfg.model_config();
  // Several GPUs in one process: every kernel loaded at CUDA's start, not lazily during a collective (NCCL's
  // documented hazard); effective when this is the process's first CUDA call (as in terngrad-train).
  if (!cpu && n_replicas > 1) setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  threads = std::make_unique<ReplicaThreads>(n_replicas, [&](int d) {
    Replica& r = replicas[d];
    std::string dev = cfg.device;
    if (!cpu && n_replicas > 1) dev = fmt::format("cuda:{}", d);
    r.backend = make_backend(dev, bo);
    r.backend->bind_thread();
    build_replica(r, mc);
  });
}

// On the replica's thread: its workers' nets (in the --precision compute dtype), the parameters they share, the
// optimizer, the views of the workers' gradients the exchange works on (where they are: device memory on a
// GPU), and the device flag of fp16's overflow agreement.
void Trainer::Impl::build_replica(Replica& r, const ModelConfig& mc) {
  const DType compute = cfg.compute_dtype();
  TG_CHECK(r.backend->supports_compute(compute), "--precision {} on --device {}: {}", cfg.precision,
           r.backend->device().str(), r.backend->why_not(compute));
  for (int w : r.workers) {
    Worker& wk = workers[w];
    wk.net = std::make_unique<Net>();
    build_model(cfg.net, mc, *wk.net);
    wk.net->set_compute_dtype(compute);
    wk.net->setup(*r.backend, worker_batch);
  }
  r.overflow_flag = Buffer(r.backend->allocator(), sizeof(int32_t));
  r.overflow_host = Buffer(r.backend->staging_allocator(), sizeof(int32_t));
  r.backend->zero(Tensor(r.overflow_flag.data(), Shape{1}, DType::kI32, r.backend->device()));
  for (int w : r.workers)  // one flag for the replica's workers, zeroed once per step
    workers[w].net->share_overflow_flag(Tensor(r.overflow_flag.data(), Shape{1}, DType::kI32, r.backend->device()));
  const Net& net = *workers[r.workers[0]].net;
  r.store = std::make_unique<ParameterStore>(net.param_specs(), net.state_specs(), *r.backend);
  for (int w : r.workers) workers[w].net->bind(*r.store);
  OptimizerOptions oo;
  oo.kind = parse_enum<OptimizerKind>(cfg.optimizer);
  oo.momentum = cfg.momentum;
  r.optimizer = std::make_unique<Optimizer>(oo, r.store->params(), *r.backend);
  for (int w : r.workers) {
    Slab& g = workers[w].net->grads();
    for (int i = 0; i < g.size(); ++i) workers[w].grad_views.push_back(g.view(i));
  }
}

// Replicas meet through one communicator rank each. CPU: the process communicator (MPI) when there is one
// replica per process, an in-process ThreadCommunicator between the replicas of one process. GPUs: NCCL over
// every GPU of every process (bootstrapped over MPI), on each backend's stream.
void Trainer::Impl::connect_replicas() {
  const int n_replicas = static_cast<int>(replicas.size());
  if (replicas[0].backend->device().is_cpu()) {
    if (n_replicas == 1) {
      replicas[0].group = process_comm;
      return;
    }
    thread_comms = make_thread_communicators(n_replicas);
    for (int d = 0; d < n_replicas; ++d) replicas[d].group = thread_comms[d].get();
    // A replica that fails must not leave the others waiting in a collective.
    threads->set_on_error([this] { thread_comms[0]->abort("a replica's step failed"); });
    return;
  }
  if (n_replicas * num_processes == 1) return;  // one GPU alone
#if TG_HAVE_CUDA
  std::vector<int> devices;
  std::vector<void*> streams;
  for (Replica& r : replicas) {
    devices.push_back(r.backend->device().index);
    streams.push_back(r.backend->native_stream());
  }
  nccl_comms = process_comm ? make_nccl_communicators_across_processes(*process_comm, devices, streams)
                            : make_nccl_communicators(devices, streams);
  for (int d = 0; d < n_replicas; ++d) replicas[d].group = nccl_comms[d].get();
  threads->set_on_error([this] {
    for (auto& c : nccl_comms) c->abort();
  });
#else
  TG_THROW("--device {}: this build has no CUDA backend", cfg.device);
#endif
}

// One exchange per replica: its workers' gradients in, the average over all workers of all replicas out to its
// first worker's gradient (the slab the replica's optimizer reads).
void Trainer::Impl::build_exchanges() {
  CompressionFlags cf;
  cf.grad_bits = cfg.grad_bits;
  cf.clip_factor = cfg.clip_factor;
  cf.size_to_binarize = cfg.size_to_binarize;
  cf.quantize_logits = cfg.quantize_logits;
  std::vector<ParamInfo> infos;
  for (const auto& p : replicas[0].store->param_specs()) infos.push_back({p.name, p.shape.numel()});
  policy = CompressionPolicy(cf, infos);
  for (Replica& r : replicas) {
    std::vector<std::vector<Tensor>> views;
    for (int w : r.workers) views.push_back(workers[w].grad_views);
    ExchangeOptions xo;
    xo.mode = parse_enum<ExchangeMode>(cfg.exchange);
    xo.seed = cfg.seed;
    xo.bucket_mb = cfg.bucket_mb;
    // On a GPU the exchange is enqueued on the backend's stream after backward (NCCL on the same stream would
    // queue the backward's next kernels behind the network; overlapping needs a communication stream).
    // fp16: the step's Inf/NaN flag is agreed on after backward, before any gradient is encoded.
    xo.overlap = cfg.overlap && r.backend->device().is_cpu() && !scaler->enabled();
    r.exchange = std::make_unique<GradientExchange>(*r.backend, policy, std::move(views), std::vector<int>{0}, r.group,
                                                    xo, timeline.get());
    r.overlap = r.exchange->overlapped();
  }
}

// --timeline: one track per worker.
void Trainer::Impl::build_timeline() {
  if (cfg.timeline.empty()) return;
  const TimelineSteps steps = Timeline::parse_steps(cfg.timeline_steps);
  timeline = std::make_unique<Timeline>(cfg.timeline, steps.first, steps.last, rank);
  for (Worker& wk : workers) wk.track = timeline->add_track(fmt::format("worker {}", wk.global_index));
}

void Trainer::Impl::build_schedule() {
  LearningRateOptions lo;
  lo.decay_type = parse_enum<LearningRateDecay>(cfg.learning_rate_decay_type);
  lo.initial_learning_rate = cfg.initial_learning_rate;
  lo.num_epochs_per_decay = cfg.num_epochs_per_decay;
  lo.learning_rate_decay_factor = cfg.learning_rate_decay_factor;
  lo.examples_per_epoch = dataset_info(cfg.dataset).train_examples;
  lo.batch_size = cfg.batch_size;
  lo.max_steps = cfg.max_steps;
  lo.warmup_steps = cfg.warmup_steps;
  lo.optimizer = parse_enum<OptimizerKind>(cfg.optimizer);
  schedule = std::make_unique<LearningRateSchedule>(lo);
}

// The process's batch: images (process_batch, image_size, image_size, channels) f32, labels (process_batch) i32,
// filled on the host in staging memory and uploaded to each replica's device without a stall (BatchUpload).
void Trainer::Impl::allocate_host_batch() {
  std::vector<Backend*> backends;
  std::vector<std::vector<int>> replica_workers;
  for (Replica& r : replicas) {
    backends.push_back(r.backend.get());
    replica_workers.push_back(r.workers);
  }
  const Shape image{cfg.image_size, cfg.image_size, dataset_info(cfg.dataset).channels};
  batches = std::make_unique<BatchUpload>(std::move(backends), std::move(replica_workers), worker_batch, image,
                                          cfg.benchmark_mode);
}

void Trainer::Impl::resume_or_initialize() {
  if (is_chief()) clean_train_dir();
  uint64_t cursor = 0;
  if (const std::optional<std::string> latest = latest_checkpoint(cfg.train_dir)) {
    cursor = resume(*latest);
  } else {
    for (auto& r : replicas) {
      r.store->initialize(cfg.seed);
      create_ema(r);
    }
  }
  verify_processes_agree();
  if (start_step >= cfg.max_steps) return;  // finished already: run() says so, no input needed
  warm_up_gpus();
  open_batch_source(cursor);
}

// Several GPUs in this process (NCCL's documented hazard: a collective must not wait for a GPU that is still loading
// kernels or creating library state): every replica runs one forward and backward on its (zeroed) device batch,
// restores its batch-norm statistics, clears its gradients and waits for its device, before the first collective.
// Nothing a step reads changes (parameters, optimizer state and statistics are as before).
void Trainer::Impl::warm_up_gpus() {
  if (replicas.size() < 2 || replicas[0].backend->device().is_cpu()) return;
  threads->run([&](int d) {
    Replica& r = replicas[d];
    Backend& be = *r.backend;
    const Tensor state = r.store->state().flat_bytes();
    Buffer saved(be.allocator(), state.bytes());
    const Tensor kept(saved.data(), state.shape(), state.dtype(), be.device());
    be.copy(kept, state);
    Worker& wk = workers[r.workers[0]];
    const BatchUpload::Batch in = batches->worker_batch(d, 0, 0);
    wk.net->run_forward(in.images, in.labels, true, 0, philox_key(cfg.seed, static_cast<uint32_t>(wk.global_index)));
    wk.net->backward(nullptr, scaler->scale());
    be.copy(state, kept);
    be.zero(wk.net->grads().flat_bytes());
    be.synchronize();
  });
}

// Only the chief writes checkpoints: at its start every temporary checkpoint file is a killed writer's.
void Trainer::Impl::clean_train_dir() {
  fs::create_directories(cfg.train_dir);
  const StaleFiles stale = remove_stale_temporary_files(cfg.train_dir, true);
  if (stale.files > 0)
    spdlog::info("removed {} temporary checkpoint file{} ({}) left in {} by a killed run", stale.files,
                 stale.files == 1 ? "" : "s", human_bytes(static_cast<double>(stale.bytes)), cfg.train_dir);
}

// Every replica takes the checkpoint's parameters, statistics, moving averages and optimizer slots; returns
// the checkpoint's data cursor.
uint64_t Trainer::Impl::resume(const std::string& path) {
  CheckpointReader reader(path);
  const CheckpointMeta& m = reader.meta();
  check_resumable(m);
  for (auto& r : replicas) {
    create_ema(r);
    for (CheckpointLayout::Part part : CheckpointLayout::kParts)
      read_slab(reader, *r.backend, checkpoint_slab(r, part),
                [&](const std::string& name) { return CheckpointLayout::name(part, name); });
  }
  if (scaler->enabled() && scaler->restore_from(reader) && is_chief())
    spdlog::info("fp16 loss scale {} restored ({} good steps in a row)", scaler->scale(), scaler->good_steps());
  start_step = m.step;
  last_digest = m.parameter_digest;
  resumed_path = path;
  kept_steps = list_checkpoint_steps(cfg.train_dir);
  if (is_chief())
    spdlog::info("resumed from {} at step {} (parameter digest {})", path, start_step, m.parameter_digest);
  return m.data_cursor;
}

// The checkpoint must be of this model and data, and of the same data layout: the data cursor counts this
// process's batches, so resuming is exact only then.
void Trainer::Impl::check_resumable(const CheckpointMeta& m) const {
  TG_CHECK(m.model == cfg.net && m.dataset == cfg.dataset && m.image_size == cfg.image_size &&
               m.num_classes == cfg.num_classes,
           "--train_dir {} holds checkpoints of --net {} on --dataset {} (image size {}, {} classes); this run is "
           "--net {} on --dataset {} (image size {}, {} classes): use another --train_dir",
           cfg.train_dir, m.model, m.dataset, m.image_size, m.num_classes, cfg.net, cfg.dataset, cfg.image_size,
           cfg.num_classes);
  const std::map<std::string, std::string> now = cfg.to_flags();
  for (const std::string& key : resume_flag_names()) {
    auto was = m.flags.find(key);
    if (was == m.flags.end()) continue;
    TG_CHECK(was->second == now.at(key),
             "--{} {} differs from the {} of the checkpoint in --train_dir {}: the resumed run would not see the "
             "data the uninterrupted run sees; use the same value or another --train_dir",
             key, now.at(key), was->second, cfg.train_dir);
  }
}

// The moving average of the replica's parameters and statistics, starting from their present values.
void Trainer::Impl::create_ema(Replica& r) {
  r.ema = std::make_unique<ExponentialMovingAverage>(
      *r.backend, std::vector<const Slab*>{&r.store->params(), &r.store->state()}, cfg.moving_average_decay);
}

void Trainer::Impl::open_batch_source(uint64_t cursor) {
  if (cfg.benchmark_mode) {
    source = std::make_unique<SyntheticBatchSource>(cfg.seed + static_cast<uint64_t>(rank),
                                                    dataset_info(cfg.dataset).num_classes, cursor);
  } else {
    source = make_pipeline_batch_source(cfg, rank, num_processes, process_batch, cursor);
  }
}

void Trainer::Impl::step(int64_t t, float lr) {
  const Clock::time_point step_begin = Clock::now();
  step_times.clear();
  if (timeline) timeline->set_step(t + 1);
  {
    ScopedPhase input(step_times, Phase::kInputWait, timeline.get(), workers[0].track);
    const BatchUpload::Batch host = batches->host_batch(t);
    source->next(host.images, host.labels);
  }
  const uint32_t step32 = static_cast<uint32_t>(t);
  // Every replica at once, each on its thread: upload, forward, backward, exchange, optimizer.
  threads->run([&](int d) { replica_step(replicas[d], step32, lr, t); });
  // fp16: every replica saw the same flag; a skipped step halves the scale (or stops the run below 1).
  if (!scaler->update(replicas[0].overflowed, t + 1) && is_chief())
    spdlog::warn("step {}: fp16 gradients overflowed; update skipped, loss scale now {} ({} skipped so far)", t + 1,
                 scaler->scale(), scaler->skipped_steps());
  step_times += replicas[0].times;
  last_stats = replicas[0].stats;
  const double total = seconds_between(step_begin, Clock::now());
  step_times.add(Phase::kOther, std::max(0.0, total - step_times.total_excluding_in_flight()));
}

// One replica's part of a step, on its thread: its workers' forward and backward one after another (the last
// one's backward feeds the exchange with --overlap), the exchange, then the update of the replica's
// parameters with the average over all workers.
void Trainer::Impl::replica_step(Replica& r, uint32_t step32, float lr, int64_t t) {
  Timeline* tl = timeline.get();
  r.times.clear();
  const int d = static_cast<int>(&r - replicas.data());
  batches->upload(d, t);
  if (cfg.compute_dtype() != DType::kF32)  // the workers' shared Inf/NaN flag, once per step
    r.backend->zero(Tensor(r.overflow_flag.data(), Shape{1}, DType::kI32, r.backend->device()));
  r.exchange->begin(step32);
  ExchangeFeeder feeder(*r.exchange);
  for (size_t k = 0; k < r.workers.size(); ++k) {
    Worker& wk = workers[r.workers[k]];
    const BatchUpload::Batch in = batches->worker_batch(d, static_cast<int>(k), t);
    const Clock::time_point t0 = Clock::now();
    wk.net->run_forward(in.images, in.labels, true, step32,
                        philox_key(cfg.seed, static_cast<uint32_t>(wk.global_index)));
    const Clock::time_point t1 = Clock::now();
    // The last worker's backward completes every bucket of the replica: the exchange starts inside it.
    const bool feeds = r.overlap && k + 1 == r.workers.size();
    const double fed_before = feeder.seconds;
    wk.net->backward(feeds ? &feeder : nullptr, scaler->scale());
    const Clock::time_point t2 = Clock::now();
    wk.forward_backward = seconds_between(t0, t2) - (feeder.seconds - fed_before);
    r.times.add(Phase::kForwardBackward, wk.forward_backward);
    if (tl && tl->recording()) {
      tl->record(wk.track, "forward", t0, t1);
      tl->record(wk.track, "backward", t1, t2);
    }
  }
  // fp16: a step with Inf/NaN gradients anywhere is skipped by every replica; its (zeroed) gradients still go
  // through the exchange, so every collective is posted the same on every rank.
  r.overflowed = scaler->enabled() && agree_on_overflow(r);
  if (r.overflowed)
    for (int w : r.workers) r.backend->zero(workers[w].net->grads().flat_bytes());
  r.stats = r.exchange->finish();
  r.times += r.exchange->times();
  if (r.overflowed) return;
  ScopedPhase update(r.times, Phase::kOptimizerEma, tl, workers[r.workers[0]].track, "optimizer + EMA");
  Worker& first = workers[r.workers[0]];
  // One pass over the parameters: the update and the moving average of the new values; then the moving
  // average of the rest (batch-norm statistics).
  r.optimizer->apply(*r.backend, r.store->params(), first.net->grads(), t, lr, r.ema.get());
  r.ema->update(*r.backend, t, &r.store->params());
}

// Whether any worker of any replica of any process found Inf/NaN in its fp16 gradients this step: the replica's
// flag (its workers' backward share it), all-reduced MAX over the replicas' communicator on the device, then read
// once (the one host synchronisation of an fp16 step).
bool Trainer::Impl::agree_on_overflow(Replica& r) {
  const Tensor dev(r.overflow_flag.data(), Shape{1}, DType::kI32, r.backend->device());
  if (r.group) r.group->allreduce(dev, ReduceOp::kMax);
  const Tensor host(r.overflow_host.data(), Shape{1}, DType::kI32, Device::cpu());
  r.backend->wait_transfer(r.backend->download_async(host, dev));
  return *host.data<int32_t>() != 0;
}

// Every process's phase times (one all-gather; processes call it at the same steps).
std::vector<PhaseTimes> Trainer::Impl::gather_times(const PhaseTimes& mine) {
  std::vector<PhaseTimes> all(static_cast<size_t>(num_processes));
  if (!process_comm) {
    all[0] = mine;
    return all;
  }
  process_comm->allgather(mine.seconds, all.data(), sizeof(mine.seconds));
  return all;
}

// --timeline: every process's events into one file, written by process 0 (all processes call this at the
// same point: when the window ends, or at the end of a run that stopped inside it).
void Trainer::Impl::write_timeline() {
  std::string mine = timeline->events_json();
  std::vector<std::string> fragments;
  if (!process_comm) {
    fragments.push_back(std::move(mine));
  } else {
    const uint64_t size = mine.size();
    std::vector<uint64_t> sizes(static_cast<size_t>(num_processes));
    process_comm->allgather(&size, sizes.data(), sizeof(size));
    const uint64_t longest = *std::max_element(sizes.begin(), sizes.end());
    mine.resize(longest, ' ');
    std::string all(longest * static_cast<size_t>(num_processes), ' ');
    process_comm->allgather(mine.data(), all.data(), longest);
    for (int p = 0; p < num_processes; ++p) fragments.push_back(all.substr(p * longest, sizes[p]));
  }
  if (is_chief()) {
    Timeline::write_trace(cfg.timeline, fragments);
    spdlog::info("timeline of steps {}-{} written to {} (open it in https://ui.perfetto.dev or chrome://tracing)",
                 timeline->first_step(), timeline->last_step(), cfg.timeline);
  }
}

// TensorBoard scalars of a logged step: losses, learning rate, speed, bytes on the wire, and per ternary
// tensor the shared scaler and worker 0's zero fraction.
void Trainer::Impl::write_summaries(EventWriter& events, int64_t step, float lr, double examples_per_sec,
                                    const PhaseTimes& time) {
  const Net& last = *workers.back().net;
  std::vector<std::pair<std::string, float>> v = {
      {"losses/entropy_loss", last.last_cross_entropy()},
      {"losses/reg_loss", last.last_regularization()},
      {"losses/total_loss", last.last_cross_entropy() + last.last_regularization()},
      {"learning_rate", lr},
      {"examples_per_sec", static_cast<float>(examples_per_sec)},
      {"exchange/bytes_per_step", static_cast<float>(last_stats.moved_bytes)},
      {"exchange/fp32_bytes_per_step", static_cast<float>(last_stats.fp32_moved_bytes)},
  };
  if (scaler->enabled()) {
    v.push_back({"loss_scale", scaler->scale()});
    v.push_back({"skipped_steps", static_cast<float>(scaler->skipped_steps())});
  }
  for (const auto& [name, secs] : time.named("time/")) v.push_back({name, static_cast<float>(secs)});
  const auto& scalers = replicas[0].exchange->shared_scalers();
  const auto& zeros = replicas[0].exchange->zero_codes();
  for (const auto& t : policy.tensors()) {
    if (t.scaler_index < 0 || t.scaler_index >= static_cast<int>(scalers.size())) continue;
    v.push_back({"scaler/" + t.name, scalers[t.scaler_index]});
    if (t.scaler_index < static_cast<int>(zeros.size()) && t.numel > 0)
      v.push_back({"zero_fraction/" + t.name, static_cast<float>(double(zeros[t.scaler_index]) / double(t.numel))});
  }
  events.scalars(step, v);
}

uint32_t Trainer::Impl::parameter_crc(Replica& r) {
  Slab& p = r.store->params();
  Buffer host(host_allocator(), p.bytes());
  r.backend->copy(Tensor(host.data(), Shape{static_cast<int64_t>(p.bytes())}, DType::kU8, Device::cpu()),
                  p.flat_bytes());
  return crc32c(host.data(), p.bytes());
}

// Every process must start from the same step and parameters (a train_dir on a node-local disk, or a stale
// network file system, would let one process resume and another start afresh).
void Trainer::Impl::verify_processes_agree() {
  if (!process_comm) return;
  struct Start {
    int64_t step;
    uint32_t crc, pad;
  } mine{start_step, parameter_crc(replicas[0]), 0};
  std::vector<Start> all(static_cast<size_t>(num_processes));
  process_comm->allgather(&mine, all.data(), sizeof(Start));
  for (int p = 1; p < num_processes; ++p)
    TG_CHECK(all[p].step == all[0].step && all[p].crc == all[0].crc,
             "process {} starts at step {} with parameter digest {}, process 0 at step {} with {}: every process "
             "must see the same --train_dir {} (a shared folder)",
             p, all[p].step, digest_hex(all[p].crc), all[0].step, digest_hex(all[0].crc), cfg.train_dir);
}

// A stop request (SIGINT/SIGTERM) reaches processes at slightly different times: they agree on it before
// each step (all-reduce MAX), so all stop after the same step instead of some waiting in a collective.
bool Trainer::Impl::stop_requested(const std::atomic<bool>* stop) {
  int32_t flag = stop && stop->load() ? 1 : 0;
  if (process_comm) process_comm->allreduce(&flag, 1, DType::kI32, ReduceOp::kMax);
  return flag != 0;
}

// --check_replicas_every: every replica of every process must hold the same parameter bits.
void Trainer::Impl::check_replicas(int64_t steps_done) {
  std::vector<uint32_t> local;
  for (auto& r : replicas) local.push_back(parameter_crc(r));
  for (size_t i = 1; i < local.size(); ++i)
    TG_CHECK(local[i] == local[0], "replica check at step {}: replica {} has parameter digest {}, replica 0 {}",
             steps_done, i, digest_hex(local[i]), digest_hex(local[0]));
  if (process_comm) {
    std::vector<uint32_t> all(static_cast<size_t>(num_processes));
    process_comm->allgather(&local[0], all.data(), sizeof(uint32_t));
    for (int p = 1; p < num_processes; ++p)
      TG_CHECK(all[p] == all[0], "replica check at step {}: process {} has parameter digest {}, process 0 {}",
               steps_done, p, digest_hex(all[p]), digest_hex(all[0]));
  }
  spdlog::debug("replica check at step {}: digest {} everywhere", steps_done, digest_hex(local[0]));
}

std::vector<NamedTensor> Trainer::Impl::host_snapshot(std::vector<Buffer>& storage) {
  std::vector<NamedTensor> out;
  Replica& r = replicas[0];
  for (CheckpointLayout::Part part : CheckpointLayout::kParts) {
    const Slab& slab = checkpoint_slab(r, part);
    for (int i = 0; i < slab.size(); ++i) {
      const auto& e = slab.entry(i);
      storage.emplace_back(host_allocator(), static_cast<size_t>(e.shape.numel()) * dtype_size(e.dtype));
      Tensor h(storage.back().data(), e.shape, e.dtype, Device::cpu());
      r.backend->copy(h, slab.view(i));
      out.push_back({CheckpointLayout::name(part, e.name), h});
    }
  }
  if (scaler->enabled()) scaler->append_checkpoint_tensors(out, storage);
  return out;
}

std::string Trainer::Impl::save(int64_t steps_done) {
  for (const Worker& wk : workers) wk.net->losses();  // a non-finite loss stops the run before it is saved
  if (!is_chief()) return "";                         // replicas are identical: process 0 writes
  std::vector<Buffer> storage;
  std::vector<NamedTensor> tensors = host_snapshot(storage);
  const DatasetInfo& data = dataset_info(cfg.dataset);
  CheckpointMeta meta;
  meta.model = cfg.net;
  meta.dataset = cfg.dataset;
  meta.image_size = cfg.image_size;
  meta.channels = data.channels;
  meta.num_classes = cfg.num_classes;
  meta.step = steps_done;
  meta.data_cursor = source->cursor();
  meta.flags = cfg.to_flags();
  const std::string path = checkpoint_path(cfg.train_dir, steps_done);
  const std::string digest = write_checkpoint(path, meta, tensors);
  if (kept_steps.empty() || kept_steps.back() != steps_done) kept_steps.push_back(steps_done);
  std::vector<int64_t> pruned;
  while (static_cast<int>(kept_steps.size()) > cfg.keep_checkpoints) {
    pruned.push_back(kept_steps.front());
    kept_steps.erase(kept_steps.begin());
  }
  // The index first: a crash between the two leaves an index naming files that all exist.
  write_checkpoint_index(cfg.train_dir, kept_steps);
  for (int64_t s : pruned) fs::remove(checkpoint_path(cfg.train_dir, s));
  if (!pruned.empty()) remove_stale_temporary_files(cfg.train_dir, false);
  spdlog::info("saved {} (step {}, parameter digest {})", path, steps_done, digest);
  return digest;
}

TrainResult Trainer::run(const std::atomic<bool>* stop) {
  Impl& m = *impl_;
  const TrainConfig& cfg = m.cfg;
  if (m.start_step >= cfg.max_steps) return m.already_finished();
  // One process stops waiting for input at once; several agree on stopping between steps (stop_requested).
  if (m.num_processes == 1) m.source->set_stop_flag(stop);
  RunLog log = m.open_run_log();
  TrainResult result;
  result.start_step = m.start_step;
  int64_t t = m.start_step;
  for (; t < cfg.max_steps; ++t) {
    const float lr = (*m.schedule)(t);
    if (m.stop_requested(stop) || !m.timed_step(t, lr, log)) {
      result.interrupted = true;
      break;
    }
    result.bytes_moved += m.last_stats.moved_bytes;
    result.fp32_bytes_moved += m.last_stats.fp32_moved_bytes;
    if ((t + 1) % cfg.log_every == 0 || t + 1 == cfg.max_steps) m.log_window(t + 1, lr, log);
    m.after_step(t + 1, log);
  }
  m.finish_run(t, log, result);
  return result;
}

// A re-run of a finished training: nothing to do, say what is there.
TrainResult Trainer::Impl::already_finished() const {
  TrainResult result;
  result.start_step = start_step;
  result.already_finished = true;
  result.steps_done = start_step;
  result.parameter_digest = last_digest;
  if (is_chief())
    spdlog::info("training already finished at step {} (checkpoint {}, parameter digest {}); --max_steps is {}",
                 start_step, resumed_path, last_digest, cfg.max_steps);
  return result;
}

// The chief's outputs of a run (metrics, TensorBoard events) and its configuration lines.
RunLog Trainer::Impl::open_run_log() {
  RunLog log(cfg.batch_size, cfg.log_every, workers.size());
  log.window_host_syncs = replicas[0].backend->host_syncs();
  if (!is_chief()) return log;
  if (!cfg.metrics_jsonl.empty()) log.metrics = std::make_unique<MetricsWriter>(cfg.metrics_jsonl);
  log.events = std::make_unique<EventWriter>(cfg.train_dir);
  log_configuration();
  log.start = Clock::now();
  return log;
}

void Trainer::Impl::log_configuration() const {
  std::string flags;
  for (const auto& [k, v] : cfg.to_flags()) flags += fmt::format(" --{}={}", k, v);
  spdlog::info("effective configuration:{}", flags);
  spdlog::info("{} | net {} ({} parameters), {} workers x {} examples, {}", replicas[0].backend->name(), cfg.net,
               replicas[0].store->num_parameters(), workers.size() * num_processes, worker_batch, policy.summary());
  const GradientExchange& x = *replicas[0].exchange;
  spdlog::info("{} replica{} per process | exchange {}, {} bucket{}{} | learning rate {}", replicas.size(),
               replicas.size() == 1 ? "" : "s", enum_name(x.mode()), x.num_buckets(), x.num_buckets() == 1 ? "" : "s",
               replicas[0].overlap ? " overlapped with backward" : "", schedule->describe());
}

// Step t, timed into the log window; false when the input was interrupted before any of the step's work (the
// state is still that of step t).
bool Trainer::Impl::timed_step(int64_t t, float lr, RunLog& log) {
  const Clock::time_point t0 = Clock::now();
  try {
    step(t, lr);
  } catch (const InputInterrupted&) {
    return false;
  }
  log.meter.add_step(seconds_between(t0, Clock::now()));
  log.window_times += step_times;
  for (size_t w = 0; w < workers.size(); ++w) log.window_worker_fb[w] += workers[w].forward_backward;
  if (log.meter.warm()) {
    log.run_times += step_times;
    ++log.run_time_steps;
  }
  return true;
}

// The log line, TensorBoard scalars and metrics line of the window ending at step `done` (every process calls
// it: the phase times are gathered).
void Trainer::Impl::log_window(int64_t done, float lr, RunLog& log) {
  const ThroughputMeter::Window w = log.meter.close_window();
  const double elapsed = seconds_between(log.start, Clock::now());
  const double eta = elapsed / (done - start_step) * (cfg.max_steps - done);
  const PhaseTimes mean = log.window_times.scaled(1.0 / w.steps);
  // The window's steps' host synchronisations (this log step's reads below are not a step's).
  const double syncs_per_step =
      static_cast<double>(replicas[0].backend->host_syncs() - log.window_host_syncs) / w.steps;
  const std::vector<PhaseTimes> per_process = gather_times(mean);  // every process: same steps
  if (is_chief()) {
    const Net& last = *workers.back().net;
    const float loss = last.last_cross_entropy() + last.last_regularization();
    const ExchangeStats& xs = last_stats;
    spdlog::info(
        "step {}, entropy_loss = {:.2f}, reg_loss = {:.2f}, total_loss = {:.2f} ({:.1f} examples/sec; {:.3f} "
        "sec/batch) lr = {:.6g}, exchanged {}/step (fp32 {}) [{}/{} {:.0f}%, ETA {}] {}",
        done, last.last_cross_entropy(), last.last_regularization(), loss, w.examples_per_sec, w.sec_per_step, lr,
        human_bytes(xs.moved_bytes), human_bytes(xs.fp32_moved_bytes), done, cfg.max_steps,
        100.0 * done / cfg.max_steps, human_duration(eta), mean.compact());
    if (scaler->enabled())
      spdlog::info("step {}: fp16 loss scale {}, {} skipped steps", done, scaler->scale(), scaler->skipped_steps());
    if (log.events) write_summaries(*log.events, done, lr, w.examples_per_sec, mean);
    if (log.metrics) {
      StepMetrics sm;
      sm.step = done;
      sm.entropy_loss = last.last_cross_entropy();
      sm.reg_loss = last.last_regularization();
      sm.total_loss = loss;
      sm.learning_rate = lr;
      sm.examples_per_sec = w.examples_per_sec;
      sm.sec_per_batch = w.sec_per_step;
      sm.bytes_exchanged = xs.moved_bytes;
      sm.fp32_bytes = xs.fp32_moved_bytes;
      sm.payload_bytes = xs.payload_bytes;
      sm.wire_bytes = xs.process_wire_bytes;
      sm.time = mean;
      sm.loss_scale = scaler->scale();
      sm.skipped_steps = scaler->skipped_steps();
      sm.host_syncs = syncs_per_step;
      if (num_processes > 1) sm.process_time = per_process;
      for (double fb : log.window_worker_fb) sm.worker_forward_backward.push_back(fb / w.steps);
      log.metrics->step(sm);
    }
  }
  log.window_times.clear();
  std::fill(log.window_worker_fb.begin(), log.window_worker_fb.end(), 0.0);
  log.window_host_syncs = replicas[0].backend->host_syncs();
}

// After step `done`: the timeline when its window ends, the replica check and the periodic checkpoint.
void Trainer::Impl::after_step(int64_t done, RunLog& log) {
  if (timeline && !log.timeline_written && done == timeline->last_step()) {
    write_timeline();
    log.timeline_written = true;
  }
  if (cfg.check_replicas_every > 0 && done % cfg.check_replicas_every == 0) check_replicas(done);
  if (done % cfg.save_iter == 0 && done < cfg.max_steps) last_digest = save(done);
}

// The end of a run stopped after step t (done or interrupted): the last checkpoint and the result.
void Trainer::Impl::finish_run(int64_t t, RunLog& log, TrainResult& result) {
  result.steps_done = t;
  // A run that ended inside the window still leaves the steps it traced.
  if (timeline && !log.timeline_written && t >= timeline->first_step()) write_timeline();
  if (t > start_step || kept_steps.empty() || result.interrupted) last_digest = save(t);
  if (result.interrupted && is_chief()) spdlog::warn("stopped at step {} on request; checkpoint saved", t);
  if (source->skipped_records() > 0)  // the one report of the total
    spdlog::warn("--skip_corrupt_records: skipped {} corrupt records (process {})", source->skipped_records(), rank);
  const Net& last = *workers.back().net;
  if (t > start_step) result.final_loss = last.last_cross_entropy() + last.last_regularization();
  result.median_examples_per_sec = log.meter.median_examples_per_sec();
  result.time_per_step = log.run_time_steps > 0 ? log.run_times.scaled(1.0 / log.run_time_steps) : log.window_times;
  result.parameter_digest = last_digest;
  if (log.metrics) log.metrics->summary(result);
}

PhaseTimes Trainer::run_steps(int64_t steps) {
  Impl& m = *impl_;
  PhaseTimes sum;
  for (int64_t k = 0; k < steps; ++k, ++m.start_step) {
    m.step(m.start_step, (*m.schedule)(m.start_step));
    sum += m.step_times;
  }
  return steps > 0 ? sum.scaled(1.0 / steps) : sum;
}

}  // namespace tg

// Trainer: building the replicas, their workers, groups and exchanges; one training step.
#include <fmt/ranges.h>

#include "src/train/trainer_impl.h"
#include "terngrad/backend/calling_thread.h"
#include "terngrad/comm/mpi_communicator.h"
#include "terngrad/core/host_processes.h"
#include "terngrad/core/machine_load.h"
#include "terngrad/exchange/scheme_registry.h"

namespace tg {

namespace {
// --threads over --cpu_replicas: each CPU replica's team gets an equal share of the cores (at least one).
int cpu_threads_per_replica(int threads, int replicas) {
  const int all = threads > 0 ? threads : available_cores();
  return std::max(1, all / replicas);
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
}  // namespace

Trainer::Trainer(const TrainConfig& config, Communicator* process_comm) : impl_(std::make_unique<Impl>()) {
  impl_->cfg = config;
  impl_->process_comm = process_comm;
  if (process_comm) {
    impl_->rank = process_comm->rank();
    impl_->num_processes = process_comm->size();
  }
  impl_->cfg.num_processes = impl_->num_processes;
  impl_->adopt_checkpoint_flags();
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

const DeviceMemoryPlan& Trainer::memory_plan() const { return impl_->replicas[0].memory; }

size_t Trainer::device_bytes_in_use() const { return impl_->replicas[0].backend->allocator().bytes_in_use(); }

void Trainer::Impl::build() {
  cfg.check_evaluation_data();  // an evaluation's data, like the training's, before anything is created
  cfg.check_data_classes();
  data = cfg.data_info();
  fence = std::make_unique<GenerationFence>(cfg.train_dir, cfg.generation);
  checkpoints = std::make_unique<CheckpointSeries>(cfg.train_dir, cfg.keep_checkpoints);
  scaler = std::make_unique<LossScaler>(cfg.compute_dtype() == DType::kF16);
  const int n_workers = cfg.workers_per_process();
  worker_batch = cfg.total_batch() / (static_cast<int64_t>(n_workers) * num_processes);
  process_batch = worker_batch * n_workers;
  TopologyOptions to;
  to.ranks_per_node = cfg.ranks_per_node;
  topology = std::make_unique<Topology>(
      Topology::build(process_comm, cfg.device == "cpu" ? cfg.cpu_replicas : cfg.num_gpus, to));
  build_replicas();
  connect_replicas();
  watch_progress();
  build_timeline();
  build_exchanges();
  build_schedule();
  allocate_host_batch();
}

// A CPU run on a machine where other work keeps cores busy: one line with the load and the --threads to try (a
// compute team of more threads than the free cores runs several times slower: core/machine_load.h). At the start of
// training (after every check: a refused start prints its one line only), measured over 0.1 s.
void Trainer::Impl::warn_if_machine_is_busy() const {
  if (cfg.device != "cpu" || !is_chief()) return;
  const int processes = host_local_size();
  const std::optional<Crowding> c = crowding(cfg.threads, processes, 0.1);
  if (!c) return;
  spdlog::warn(
      "this machine is busy: other work kept {:.1f} of its {} cores busy as the run started (load average {:.2f}); "
      "{} process(es) x {} threads of this run compete with it for the cores (a compute team waiting for a "
      "descheduled thread can run several times slower): try --threads {}{}",
      c->load.busy, c->load.cores, c->load.load1, processes, c->threads, c->fit,
      std::getenv("TG_WAIT_POLICY_SET") != nullptr
          ? " (this run's OpenMP threads wait passively: OMP_WAIT_POLICY=passive, set as it started on this busy "
            "machine)"
          : "");
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
  BackendOptions bo = cfg;
  if (cpu) bo.threads = cpu_threads_per_replica(cfg.threads, n_replicas);
  const ModelConfig mc = cfg.model_config();
  // Several GPUs in one process: every kernel loaded at CUDA's start, not lazily during a collective (NCCL's
  // documented hazard); effective when this is the process's first CUDA call (as in terngrad-train).
  if (!cpu && n_replicas > 1) setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  // --device cuda: this process's GPUs follow its place among the processes of its host (several processes
  // of one GPU each per host, as mpirun -H a:8,b:8 starts them). The main thread works on the first of them
  // (calling_thread.h): no process makes a context on a GPU it does not use.
  const int first_gpu = cpu ? 0 : host_local_rank() * n_replicas;
  auto device_of = [&](int d) {
    return !cpu && cfg.device == "cuda" && first_gpu + n_replicas > 1 ? fmt::format("cuda:{}", first_gpu + d)
                                                                      : cfg.device;
  };
  bind_calling_thread_to(device_of(0));
  threads = std::make_unique<ReplicaThreads>(n_replicas, [&](int d) {
    Replica& r = replicas[d];
    r.backend = make_backend(device_of(d), bo);
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
  check_memory_fits(r);
  // The workers compute one after another on this thread and stream: their step buffers share one arena.
  r.arena = std::make_shared<StepArena>(r.backend->allocator());
  for (int w : r.workers) {
    Worker& wk = workers[w];
    wk.net = std::make_unique<Net>();
    build_model(cfg.net, mc, *wk.net);
    wk.net->set_compute_dtype(compute);
    wk.net->set_memory_plan(parse_enum<MemoryPlan>(cfg.memory_plan), parse_enum<Recompute>(cfg.recompute));
    wk.net->share_arena(r.arena);
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
  static_cast<OptimizerFlags&>(oo) = cfg;
  r.optimizer = std::make_unique<Optimizer>(oo, r.store->params(), *r.backend);
  for (int w : r.workers) {
    Slab& g = workers[w].net->grads();
    for (int i = 0; i < g.size(); ++i) workers[w].grad_views.push_back(g.view(i));
  }
}

TrainingLayout Trainer::Impl::layout() const {
  TrainingLayout l = TrainingLayout::of(cfg, num_processes);
  l.num_nodes = topology->num_nodes();
  l.ranks_per_node = topology->ranks_per_node();
  return l;
}

// Before the replica allocates anything: its plan against what its device has (CPU: this process's share of the
// host's memory, split between its replicas); a run that cannot fit stops here, naming the largest batch that would.
void Trainer::Impl::check_memory_fits(Replica& r) {
  const TrainingLayout l = layout();
  r.memory = plan_device_memory(cfg, *r.backend, l);
  const bool cpu = r.backend->device().is_cpu();
  size_t available = available_memory(*r.backend, host_local_size());
  if (!cpu) r.free_before_build = available;
  if (cpu && available != SIZE_MAX) available /= replicas.size();
  if (r.memory.total() <= available) return;
  const int64_t workers = static_cast<int64_t>(cfg.workers_per_process()) * num_processes;
  auto largest = [&](const TrainConfig& c) {
    const int64_t b = largest_fitting_worker_batch(c, *r.backend, l, available, l.worker_batch);
    return b > 0 ? fmt::format("--batch_size {}", b * workers) : std::string("no batch");
  };
  std::string hint = fmt::format("the largest that fits is {}", largest(cfg));
  if (cfg.memory_plan == "liveness" && cfg.recompute != "blocks") {
    TrainConfig blocks = cfg;
    blocks.recompute = "blocks";
    hint += fmt::format(", with --recompute blocks {}", largest(blocks));
  }
  std::string where = cpu ? "this host's available memory" : "the device's free memory";
  if (cpu && (host_local_size() > 1 || replicas.size() > 1))
    where += fmt::format(" shared by {} process(es) of {} replica(s)", host_local_size(), replicas.size());
  TG_THROW("{} needs {} per {} ({}), {} is available ({}): {}",
           cfg.total_batch() == cfg.batch_size
               ? fmt::format("--batch_size {}", cfg.batch_size)
               : fmt::format("a total batch of {} (--elastic_batch per_worker)", cfg.total_batch()),
           human_bytes(double(r.memory.total())), cpu ? "replica" : "GPU", r.memory.describe(),
           human_bytes(double(available)), where, hint);
}

// Each replica's groups from the job's shape (Topology: nodes of local ranks, one cross-node group per local rank): CPU
// replicas meet through thread groups inside a process and MPI between processes (a composite of both when a process
// holds several replicas); GPUs through NCCL over every GPU of every process (bootstrapped over MPI), with
// ncclCommSplit for the node and cross-node groups, on each backend's stream.
void Trainer::Impl::connect_replicas() {
  const int n_replicas = static_cast<int>(replicas.size());
  for (int d = 0; d < n_replicas; ++d) replicas[d].rank = topology->rank_of(rank, d);
  if (replicas[0].backend->device().is_cpu()) {
    groups = connect_cpu_replicas(*topology, process_comm);
  } else {
#if TG_HAVE_CUDA
    std::vector<int> devices;
    std::vector<void*> streams;
    for (Replica& r : replicas) {
      devices.push_back(r.backend->device().index);
      streams.push_back(r.backend->native_stream());
    }
    groups = connect_gpu_replicas(*topology, process_comm, devices, streams);
#else
    TG_THROW("--device {}: this build has no CUDA backend", cfg.device);
#endif
  }
  for (int d = 0; d < n_replicas; ++d) replicas[d].comms = groups->replica(d);
  // A replica that fails must not leave the others waiting in a collective.
  threads->set_on_error([this] { groups->abort("a replica's step failed"); });
}

// --collective_timeout: a watchdog over every collective of this process (the replicas' groups and the process
// communicator) and the steps; a stall aborts the groups (progress_watchdog.h). Armed while run() trains.
void Trainer::Impl::watch_progress() {
  if (cfg.collective_timeout <= 0 || (num_processes == 1 && replicas.size() == 1)) return;
  // Several processes: before the abort, the survivors tell each other they are alive (every one's watchdog fires
  // within its period of the others'), so the line names the process(es) that never answered: the launcher's (and a
  // person's) lead to the machine that was lost.
  const double window = std::clamp(cfg.collective_timeout / 2, 2.0, 5.0);
  watchdog = std::make_unique<ProgressWatchdog>(cfg.collective_timeout, [this, window](const std::string& why) {
    if (num_processes == 1) return groups->abort(why);
    const std::vector<int> silent = MpiCommunicator::unanswered_processes(window);
    groups->abort(silent.empty() ? fmt::format("{}; every process answered within {:.0f} s", why, window)
                                 : fmt::format("{}; process(es) {} of {} did not answer within {:.0f} s", why,
                                               fmt::join(silent, ","), num_processes, window));
  });
  for (Replica& r : replicas)
    for (Communicator* c : {r.comms.world, r.comms.local, r.comms.cross})
      if (c) c->set_watchdog(watchdog.get());
  if (process_comm) process_comm->set_watchdog(watchdog.get());
}

// One exchange per replica: its workers' gradients in, the average over all workers of all replicas out to its
// first worker's gradient (the slab the replica's optimizer reads). The scheme follows from --grad_bits,
// --exchange and the topology (exchange/scheme_registry.h).
void Trainer::Impl::build_exchanges() {
  const CompressionFlags& cf = cfg;  // TrainConfig holds the compression flags as its base
  std::vector<ParamInfo> infos;
  for (const auto& p : replicas[0].store->param_specs()) infos.push_back({p.name, p.shape.numel()});
  policy = CompressionPolicy(cf, infos);
  const bool fp32_too = cfg.fp32_warmup_steps > 0 || cfg.quantization_error_every > 0;
  if (fp32_too) {
    CompressionFlags wf = cf;
    wf.grad_bits = 32;
    wf.scaler_bucket = 0;
    fp32_policy = CompressionPolicy(wf, infos);
  }
  StepExchange::Settings settings;
  settings.fp32_warmup_steps = cfg.fp32_warmup_steps;
  settings.probe_every = cfg.quantization_error_every;
  settings.dump_dir = cfg.exchange_dump;
  settings.dump_step = cfg.exchange_dump_step;
  settings.error_feedback = cfg.error_feedback;
  for (Replica& r : replicas) {
    std::vector<std::vector<Tensor>> views;
    for (int w : r.workers) views.push_back(workers[w].grad_views);
    auto make = [&](const CompressionPolicy& pol) {
      // The exchange flags (a scheme ignores the options it does not have), then what this replica allows.
      ExchangeOptions xo(cfg, cfg.seed);
      if (&pol == &fp32_policy) xo.mode = fp32_form(xo.mode);
      // Overlap: a communication thread on the CPU, the backend's side stream on a GPU (gradient_exchange.h).
      // fp16: the step's Inf/NaN flag is agreed on after backward, before any gradient is encoded.
      xo.overlap = cfg.overlap && !scaler->enabled();
      const ExchangeComms comms{r.comms.world, r.comms.local, r.comms.cross};
      return std::make_unique<GradientExchange>(*r.backend, pol, views, std::vector<int>{0}, comms, xo, timeline.get());
    };
    std::unique_ptr<GradientExchange> exchange = make(policy), fp32;
    if (fp32_too) fp32 = make(fp32_policy);
    Worker& first = workers[r.workers[0]];
    // A scheme that reads every gradient anyway (TernGrad's scalers' pass) adds the weight decay in that pass:
    // backward's axpy and its pass go (during an fp32 warm-up backward adds it: StepExchange). f32 steps only (a
    // loss-scaled step's gradients are checked for overflow before the exchange).
    bool decays = false;
    if (exchange->scheme().applies_weight_decay() && cfg.compute_dtype() == DType::kF32 && !scaler->enabled()) {
      exchange->apply_weight_decay(first.net->weight_decay_terms());
      decays = true;
    }
    // A scheme with a coded update: the optimizer decodes the average in its own pass (Optimizer::apply's coded
    // averages), so the averaged gradient is never written to memory and read back.
    if (cfg.decode_in_update && exchange->scheme().coded_update()) exchange->defer_decode();
    std::unique_ptr<QuantizationProbe> probe;
    if (cfg.quantization_error_every > 0)
      probe = std::make_unique<QuantizationProbe>(*r.backend, policy, first.grad_views, first.net->grads().flat_bytes(),
                                                  decays ? &exchange->weight_decay() : nullptr);
    r.exchanges = std::make_unique<StepExchange>(settings, *r.backend, std::move(exchange), std::move(fp32),
                                                 std::move(probe), decays, std::move(views), r.rank);
  }
}

// --timeline: one track per worker (with --timeline_layers its net's layers too).
void Trainer::Impl::build_timeline() {
  if (cfg.timeline.empty()) return;
  const TimelineSteps steps = Timeline::parse_steps(cfg.timeline_steps);
  timeline = std::make_unique<Timeline>(cfg.timeline, steps.first, steps.last, rank);
  for (Worker& wk : workers) {
    wk.track = timeline->add_track(fmt::format("worker {}", wk.global_index));
    if (cfg.timeline_layers) wk.net->set_layer_timeline(timeline.get(), wk.track);
  }
}

void Trainer::Impl::build_schedule() {
  LearningRateOptions lo;
  static_cast<LearningRateFlags&>(lo) = cfg;
  lo.examples_per_epoch = data.train_examples;
  lo.batch_size = cfg.batch_size;
  lo.max_steps = cfg.schedule_steps > 0 ? cfg.schedule_steps : cfg.max_steps;
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
  const Shape image{cfg.image_size, cfg.image_size, data.channels};
  batches = std::make_unique<BatchUpload>(std::move(backends), std::move(replica_workers), worker_batch, image,
                                          cfg.benchmark_mode);
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

void Trainer::Impl::open_batch_source(uint64_t cursor) {
  if (cfg.benchmark_mode) {
    source = std::make_unique<SyntheticBatchSource>(cfg.seed, cfg.num_classes, cursor,
                                                    static_cast<uint64_t>(rank) * static_cast<uint64_t>(process_batch));
  } else {
    source = make_pipeline_batch_source(cfg, rank, num_processes, process_batch, cursor);
  }
}

void Trainer::Impl::step(int64_t t, float lr) {
  const Clock::time_point step_begin = Clock::now();
  if (watchdog) watchdog->step(t + 1);
  step_times.clear();
  if (timeline) timeline->set_step(t + 1);
  {
    ScopedPhase input(step_times, Phase::kInputWait, timeline.get(), workers[0].track);
    const BatchUpload::Batch host = batches->host_batch(t);
    try {
      source->next(host.images, host.labels);
    } catch (const InputInterrupted&) {
      throw;
    } catch (const Error& e) {
      // The data failed (a corrupt record, an unreadable file): the t steps done are kept first. One process only:
      // a checkpoint is collective, and the others wait in this step's exchange.
      if (num_processes > 1 || t <= start_step || t == last_saved_step) throw;
      last_digest = save(t);
      TG_THROW("{}; the checkpoint of step {} was saved first: the same command resumes from it", e.what(), t);
    }
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
  // The step's exchange: the fp32 one during --fp32_warmup_steps, which leaves the weight decay to backward; a probe
  // or a dump step exchanges after backward (StepExchange).
  StepExchange& xs = *r.exchanges;
  const StepExchange::Step plan = xs.plan(t);
  GradientExchange& x = xs.of(plan);
  const bool overlap = xs.overlaps(plan);
  xs.begin(plan, step32);
  ExchangeFeeder feeder(x);
  for (size_t k = 0; k < r.workers.size(); ++k) {
    Worker& wk = workers[r.workers[k]];
    wk.net->set_backward_applies_weight_decay(xs.backward_adds_weight_decay(plan));
    const BatchUpload::Batch in = batches->worker_batch(d, static_cast<int>(k), t);
    const Clock::time_point t0 = Clock::now();
    wk.net->run_forward(in.images, in.labels, true, step32,
                        philox_key(cfg.seed, static_cast<uint32_t>(wk.global_index)));
    const Clock::time_point t1 = Clock::now();
    // The last worker's backward completes every bucket of the replica: the exchange starts inside it.
    const bool feeds = overlap && k + 1 == r.workers.size();
    const double fed_before = feeder.seconds;
    wk.net->backward(feeds ? &feeder : nullptr, scaler->scale());
    if (watchdog) watchdog->progress();
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
  r.stats = xs.finish(plan, step32, t);
  r.times += x.times();
  if (r.overflowed) return;
  ScopedPhase update(r.times, Phase::kOptimizerEma, tl, workers[r.workers[0]].track, "optimizer + EMA");
  Worker& first = workers[r.workers[0]];
  // One pass over the parameters: the update and the moving average of the new values; then the moving
  // average of the rest (batch-norm statistics).
  r.optimizer->apply(*r.backend, r.store->params(), first.net->grads(), t, lr, r.ema.get(), x.coded_averages());
  r.ema->update(*r.backend, t, &r.store->params());
}

// Whether any worker of any replica of any process found Inf/NaN in its fp16 gradients this step: the replica's
// flag (its workers' backward share it), all-reduced MAX over the replicas' world group on the device, then read
// once (the one host synchronisation of an fp16 step).
bool Trainer::Impl::agree_on_overflow(Replica& r) {
  const Tensor dev(r.overflow_flag.data(), Shape{1}, DType::kI32, r.backend->device());
  if (r.comms.world) r.comms.world->allreduce(dev, ReduceOp::kMax);
  const Tensor host(r.overflow_host.data(), Shape{1}, DType::kI32, Device::cpu());
  r.backend->wait_transfer(r.backend->download_async(host, dev));
  return *host.data<int32_t>() != 0;
}

PhaseTimes Trainer::run_steps(int64_t steps) {
  Impl& m = *impl_;
  PhaseTimes sum;
  for (int64_t k = 0; k < steps; ++k, ++m.start_step) {
    m.step(m.start_step, m.learning_rate(m.start_step));
    sum += m.step_times;
  }
  return steps > 0 ? sum.scaled(1.0 / steps) : sum;
}

}  // namespace tg

// ReplicaSet: building the replicas, their workers, groups, watchdog and step exchanges; the replicas' digests and
// agreement check.
#include "src/train/replica_set.h"

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "terngrad/backend/calling_thread.h"
#include "terngrad/comm/loopback_device.h"
#include "terngrad/comm/mpi_communicator.h"
#include "terngrad/core/cpu_cores.h"
#include "terngrad/core/host_processes.h"
#include "terngrad/core/human_units.h"
#include "terngrad/data/crc32c.h"
#include "terngrad/exchange/scheme_registry.h"

namespace tg {

namespace {
// --threads over --cpu_replicas: each CPU replica's team gets an equal share of the cores (at least one).
int cpu_threads_per_replica(int threads, int replicas) {
  const int all = threads > 0 ? threads : available_cores();
  return std::max(1, all / replicas);
}
}  // namespace

ReplicaSet::ReplicaSet(const TrainConfig& cfg, Communicator* process_comm) : cfg_(cfg), process_comm_(process_comm) {
  if (process_comm_) {
    rank_ = process_comm_->rank();
    num_processes_ = process_comm_->size();
  }
  const int n_workers = cfg_.workers_per_process();
  worker_batch_ = cfg_.total_batch() / (static_cast<int64_t>(n_workers) * num_processes_);
  process_batch_ = worker_batch_ * n_workers;
  TopologyOptions to;
  to.ranks_per_node = cfg_.ranks_per_node;
  topology_ = std::make_unique<Topology>(
      Topology::build(process_comm_, cfg_.device == "cpu" ? cfg_.cpu_replicas : cfg_.num_gpus, to));
  build_replicas();
  connect_replicas();
  watch_progress();
}

ReplicaSet::~ReplicaSet() {
  if (process_comm_) process_comm_->set_watchdog(nullptr);  // it outlives the set, the watchdog does not
}

// Workers are placed round-robin: worker w computes on replica w % R as its (w / R)-th worker.
void ReplicaSet::place_workers(int n_replicas) {
  const int n_workers = cfg_.workers_per_process();
  const int per_replica = n_workers / n_replicas;  // validate(): a multiple
  replicas_.resize(static_cast<size_t>(n_replicas));
  workers_.resize(static_cast<size_t>(n_workers));
  for (int w = 0; w < n_workers; ++w) {
    Worker& wk = workers_[w];
    wk.replica = w % n_replicas;
    wk.global_index = (rank_ * n_replicas + wk.replica) * per_replica + w / n_replicas;
    replicas_[wk.replica].workers.push_back(w);
  }
}

// Replicas: one per device (--num_gpus GPUs, or --cpu_replicas shares of the CPU), each with its own thread.
// Each replica is built on its own thread, so its memory is first touched there and its thread-bound state
// (CUDA device, the CPU team's size) is set where it is used.
void ReplicaSet::build_replicas() {
  const bool cpu = cfg_.device == "cpu";
  const int n_replicas = cpu ? cfg_.cpu_replicas : cfg_.num_gpus;
  place_workers(n_replicas);
  BackendOptions bo = cfg_;
  if (cpu) bo.threads = cpu_threads_per_replica(cfg_.threads, n_replicas);
  const ModelConfig mc = cfg_.model_config();
  // Several GPUs in one process: every kernel loaded at CUDA's start, not lazily during a collective (NCCL's
  // documented hazard); effective when this is the process's first CUDA call (as in terngrad-train).
  if (!cpu && n_replicas > 1) setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  // --device cuda: this process's GPUs follow its place among the processes of its host (several processes
  // of one GPU each per host, as mpirun -H a:8,b:8 starts them). The main thread works on the first of them
  // (calling_thread.h): no process makes a context on a GPU it does not use.
  const int first_gpu = cpu ? 0 : host_local_rank() * n_replicas;
  auto device_of = [&](int d) {
    return !cpu && cfg_.device == "cuda" && first_gpu + n_replicas > 1 ? fmt::format("cuda:{}", first_gpu + d)
                                                                       : cfg_.device;
  };
  bind_calling_thread_to(device_of(0));
  threads_ = std::make_unique<ReplicaThreads>(n_replicas, [&](int d) {
    Replica& r = replicas_[d];
    r.backend = make_backend(device_of(d), bo);
    r.backend->bind_thread();
    build_replica(r, mc);
  });
}

// On the replica's thread: its workers' nets (in the --precision compute dtype), the parameters they share, the
// optimizer, the views of the workers' gradients the exchange works on (where they are: device memory on a
// GPU), and the device flag of fp16's overflow agreement.
void ReplicaSet::build_replica(Replica& r, const ModelConfig& mc) {
  const DType compute = cfg_.compute_dtype();
  TG_CHECK(r.backend->supports_compute(compute), "--precision {} on --device {}: {}", cfg_.precision,
           r.backend->device().str(), r.backend->why_not(compute));
  check_memory_fits(r);
  // The workers compute one after another on this thread and stream: their step buffers share one arena.
  r.arena = std::make_shared<StepArena>(r.backend->allocator());
  for (int w : r.workers) {
    Worker& wk = workers_[w];
    wk.net = std::make_unique<Net>();
    build_model(cfg_.net, mc, *wk.net);
    wk.net->set_compute_dtype(compute);
    wk.net->set_memory_plan(parse_enum<MemoryPlan>(cfg_.memory_plan), parse_enum<Recompute>(cfg_.recompute));
    wk.net->share_arena(r.arena);
    wk.net->setup(*r.backend, worker_batch_);
  }
  r.overflow_flag = Buffer(r.backend->allocator(), sizeof(int32_t));
  r.overflow_host = Buffer(r.backend->staging_allocator(), sizeof(int32_t));
  r.backend->zero(Tensor(r.overflow_flag.data(), Shape{1}, DType::kI32, r.backend->device()));
  for (int w : r.workers)  // one flag for the replica's workers, zeroed once per step
    workers_[w].net->share_overflow_flag(Tensor(r.overflow_flag.data(), Shape{1}, DType::kI32, r.backend->device()));
  const Net& net = *workers_[r.workers[0]].net;
  r.store = std::make_unique<ParameterStore>(net.param_specs(), net.state_specs(), *r.backend);
  for (int w : r.workers) workers_[w].net->bind(*r.store);
  OptimizerOptions oo;
  static_cast<OptimizerFlags&>(oo) = cfg_;
  r.optimizer = std::make_unique<Optimizer>(oo, r.store->params(), *r.backend);
  for (int w : r.workers) {
    Slab& g = workers_[w].net->grads();
    for (int i = 0; i < g.size(); ++i) workers_[w].grad_views.push_back(g.view(i));
  }
}

TrainingLayout ReplicaSet::layout() const {
  TrainingLayout l = TrainingLayout::of(cfg_, num_processes_);
  l.num_nodes = topology_->num_nodes();
  l.ranks_per_node = topology_->ranks_per_node();
  return l;
}

// Before the replica allocates anything: its plan against what its device has (CPU: this process's share of the
// host's memory, split between its replicas); a run that cannot fit stops here, naming the largest batch that would.
void ReplicaSet::check_memory_fits(Replica& r) {
  const TrainingLayout l = layout();
  r.memory = plan_device_memory(cfg_, *r.backend, l);
  const bool cpu = r.backend->device().is_cpu();
  size_t available = available_memory(*r.backend, host_local_size());
  if (!cpu) r.free_before_build = available;
  // The host's memory, or one GPU's that --device cuda:<k> --num_gpus R replicas share: each replica its share.
  const bool shared = cpu || cfg_.device != "cuda";
  if (shared && available != SIZE_MAX) available /= replicas_.size();
  if (r.memory.total() <= available) return;
  const int64_t all_workers = static_cast<int64_t>(cfg_.workers_per_process()) * num_processes_;
  auto largest = [&](const TrainConfig& c) {
    const int64_t b = largest_fitting_worker_batch(c, *r.backend, l, available, l.worker_batch);
    return b > 0 ? fmt::format("--batch_size {}", b * all_workers) : std::string("no batch");
  };
  std::string hint = fmt::format("the largest that fits is {}", largest(cfg_));
  if (cfg_.memory_plan == "liveness" && cfg_.recompute != "blocks") {
    TrainConfig blocks = cfg_;
    blocks.recompute = "blocks";
    hint += fmt::format(", with --recompute blocks {}", largest(blocks));
  }
  std::string where = cpu ? "this host's available memory" : "the device's free memory";
  if (cpu && (host_local_size() > 1 || replicas_.size() > 1))
    where += fmt::format(" shared by {} process(es) of {} replica(s)", host_local_size(), replicas_.size());
  else if (shared && replicas_.size() > 1)
    where += fmt::format(" shared by {} replicas", replicas_.size());
  TG_THROW("{} needs {} per {} ({}), {} is available ({}): {}",
           cfg_.total_batch() == cfg_.batch_size
               ? fmt::format("--batch_size {}", cfg_.batch_size)
               : fmt::format("a total batch of {} (--elastic_batch per_worker)", cfg_.total_batch()),
           human_bytes(double(r.memory.total())), cpu ? "replica" : "GPU", r.memory.describe(),
           human_bytes(double(available)), where, hint);
}

// Each replica's groups from the job's shape (Topology: nodes of local ranks, one cross-node group per local rank): CPU
// replicas meet through thread groups inside a process and MPI between processes (a composite of both when a process
// holds several replicas); GPUs through NCCL over every GPU of every process (bootstrapped over MPI), with
// ncclCommSplit for the node and cross-node groups, on each backend's stream.
void ReplicaSet::connect_replicas() {
  const int n_replicas = static_cast<int>(replicas_.size());
  for (int d = 0; d < n_replicas; ++d) replicas_[d].rank = topology_->rank_of(rank_, d);
  if (replicas_[0].backend->device().is_cpu()) {
    // TG_CPU_REPLICA_GROUPS=loopback: one process's CPU replicas meet through the loopback groups on host memory (the
    // code replicas sharing a GPU run) instead of thread groups; the tests compare the two (docs/testing.md).
    const char* groups = std::getenv("TG_CPU_REPLICA_GROUPS");
    const bool loopback = groups != nullptr && std::string(groups) == "loopback";
    TG_CHECK(groups == nullptr || loopback || std::string(groups) == "threads",
             "TG_CPU_REPLICA_GROUPS='{}' is not one of threads, loopback", groups ? groups : "");
    if (loopback && num_processes_ == 1) {
      std::vector<std::unique_ptr<LoopbackDevice>> devices;
      for (size_t r = 0; r < replicas_.size(); ++r) devices.push_back(make_host_loopback_device());
      groups_ = connect_loopback_replicas(*topology_, std::move(devices));
    } else {
      groups_ = connect_cpu_replicas(*topology_, process_comm_);
    }
  } else {
#if TG_HAVE_CUDA
    std::vector<int> devices;
    std::vector<void*> streams;
    for (Replica& r : replicas_) {
      devices.push_back(r.backend->device().index);
      streams.push_back(r.backend->native_stream());
    }
    groups_ = connect_gpu_replicas(*topology_, process_comm_, devices, streams);
#else
    TG_THROW("--device {}: this build has no CUDA backend", cfg_.device);
#endif
  }
  for (int d = 0; d < n_replicas; ++d) replicas_[d].comms = groups_->replica(d);
  // A replica that fails must not leave the others waiting in a collective.
  threads_->set_on_error([this] { groups_->abort("a replica's step failed"); });
}

// --collective_timeout: a watchdog over every collective of this process (the replicas' groups and the process
// communicator) and the steps; a stall aborts the groups (progress_watchdog.h). Armed while run() trains.
void ReplicaSet::watch_progress() {
  if (cfg_.collective_timeout <= 0 || (num_processes_ == 1 && replicas_.size() == 1)) return;
  // Several processes: before the abort, the survivors tell each other they are alive (every one's watchdog fires
  // within its period of the others'), so the line names the process(es) that never answered: the launcher's (and a
  // person's) lead to the machine that was lost.
  const double window = std::clamp(cfg_.collective_timeout / 2, 2.0, 5.0);
  watchdog_ = std::make_unique<ProgressWatchdog>(cfg_.collective_timeout, [this, window](const std::string& why) {
    if (num_processes_ == 1) return groups_->abort(why);
    const std::vector<int> silent = MpiCommunicator::unanswered_processes(window);
    groups_->abort(silent.empty() ? fmt::format("{}; every process answered within {:.0f} s", why, window)
                                  : fmt::format("{}; process(es) {} of {} did not answer within {:.0f} s", why,
                                                fmt::join(silent, ","), num_processes_, window));
  });
  for (Replica& r : replicas_)
    for (Communicator* c : {r.comms.world, r.comms.local, r.comms.cross})
      if (c) c->set_watchdog(watchdog_.get());
  if (process_comm_) process_comm_->set_watchdog(watchdog_.get());
}

// One exchange per replica: its workers' gradients in, the average over all workers of all replicas out to its
// first worker's gradient (the slab the replica's optimizer reads). The scheme follows from --grad_bits,
// --exchange and the topology (exchange/scheme_registry.h).
void ReplicaSet::build_exchanges(Timeline* timeline, bool loss_scaled) {
  const CompressionFlags& cf = cfg_;  // TrainConfig holds the compression flags as its base
  std::vector<ParamInfo> infos;
  for (const auto& p : replicas_[0].store->param_specs()) infos.push_back({p.name, p.shape.numel()});
  policy_ = CompressionPolicy(cf, infos);
  const bool fp32_too = cfg_.fp32_warmup_steps > 0 || cfg_.quantization_error_every > 0;
  if (fp32_too) {
    CompressionFlags wf = cf;
    wf.grad_bits = 32;
    wf.scaler_bucket = 0;
    fp32_policy_ = CompressionPolicy(wf, infos);
  }
  StepExchange::Settings settings;
  settings.fp32_warmup_steps = cfg_.fp32_warmup_steps;
  settings.probe_every = cfg_.quantization_error_every;
  settings.dump_dir = cfg_.exchange_dump;
  settings.dump_step = cfg_.exchange_dump_step;
  settings.error_feedback = cfg_.error_feedback;
  for (Replica& r : replicas_) {
    std::vector<std::vector<Tensor>> views;
    for (int w : r.workers) views.push_back(workers_[w].grad_views);
    auto make = [&](const CompressionPolicy& pol) {
      // The exchange flags (a scheme ignores the options it does not have), then what this replica allows.
      ExchangeOptions xo(cfg_, cfg_.seed);
      if (&pol == &fp32_policy_) xo.exchange = fp32_form(xo.exchange);
      // Overlap: a communication thread on the CPU, the backend's side stream on a GPU (gradient_exchange.h).
      // fp16: the step's Inf/NaN flag is agreed on after backward, before any gradient is encoded.
      xo.overlap = cfg_.overlap && !loss_scaled;
      const ExchangeComms comms{r.comms.world, r.comms.local, r.comms.cross};
      return std::make_unique<GradientExchange>(*r.backend, pol, views, std::vector<int>{0}, comms, xo, timeline);
    };
    std::unique_ptr<GradientExchange> exchange = make(policy_), fp32;
    if (fp32_too) fp32 = make(fp32_policy_);
    Worker& first = workers_[r.workers[0]];
    // A scheme that reads every gradient anyway (TernGrad's scalers' pass) adds the weight decay in that pass:
    // backward's axpy and its pass go (during an fp32 warm-up backward adds it: StepExchange). f32 steps only (a
    // loss-scaled step's gradients are checked for overflow before the exchange).
    bool decays = false;
    if (exchange->scheme().applies_weight_decay() && cfg_.compute_dtype() == DType::kF32 && !loss_scaled) {
      exchange->apply_weight_decay(first.net->weight_decay_terms());
      decays = true;
    }
    // A scheme with a coded update: the optimizer decodes the average in its own pass (Optimizer::apply's coded
    // averages), so the averaged gradient is never written to memory and read back.
    if (cfg_.decode_in_update && exchange->scheme().coded_update()) exchange->defer_decode();
    std::unique_ptr<QuantizationProbe> probe;
    if (cfg_.quantization_error_every > 0)
      probe =
          std::make_unique<QuantizationProbe>(*r.backend, policy_, first.grad_views, first.net->grads().flat_bytes(),
                                              decays ? &exchange->weight_decay() : nullptr);
    r.exchanges = std::make_unique<StepExchange>(settings, *r.backend, std::move(exchange), std::move(fp32),
                                                 std::move(probe), decays, std::move(views), r.rank);
  }
}

// Several GPUs in this process (NCCL's documented hazard: a collective must not wait for a GPU that is still loading
// kernels or creating library state): every replica runs one forward and backward on its (zeroed) device batch,
// restores its batch-norm statistics, clears its gradients and waits for its device, before the first collective.
// Nothing a step reads changes (parameters, optimizer state and statistics are as before).
void ReplicaSet::warm_up_gpus(BatchUpload& batches, float loss_scale) {
  if (replicas_.size() < 2 || replicas_[0].backend->device().is_cpu()) return;
  threads_->run([&](int d) {
    Replica& r = replicas_[d];
    Backend& be = *r.backend;
    const Tensor state = r.store->state().flat_bytes();
    Buffer saved(be.allocator(), state.bytes());
    const Tensor kept(saved.data(), state.shape(), state.dtype(), be.device());
    be.copy(kept, state);
    Worker& wk = workers_[r.workers[0]];
    const BatchUpload::Batch in = batches.worker_batch(d, 0, 0);
    wk.net->run_forward(in.images, in.labels, true, 0, philox_key(cfg_.seed, static_cast<uint32_t>(wk.global_index)));
    wk.net->backward(nullptr, loss_scale);
    be.copy(state, kept);
    be.zero(wk.net->grads().flat_bytes());
    be.synchronize();
  });
}

void ReplicaSet::create_ema(Replica& r) const {
  r.ema = std::make_unique<ExponentialMovingAverage>(
      *r.backend, std::vector<const Slab*>{&r.store->params(), &r.store->state()}, cfg_.moving_average_decay);
}

uint32_t ReplicaSet::parameter_crc(Replica& r) {
  Slab& p = r.store->params();
  Buffer host(host_allocator(), p.bytes());
  r.backend->copy(Tensor(host.data(), Shape{static_cast<int64_t>(p.bytes())}, DType::kU8, Device::cpu()),
                  p.flat_bytes());
  return crc32c(host.data(), p.bytes());
}

std::string ReplicaSet::parameter_digest(Replica& r) {
  Slab& p = r.store->params();
  Buffer host(host_allocator(), p.bytes());
  r.backend->copy(Tensor(host.data(), Shape{static_cast<int64_t>(p.bytes())}, DType::kU8, Device::cpu()),
                  p.flat_bytes());
  uint32_t crc = 0;
  for (const Slab::Entry& e : p.entries())
    crc = crc32c_extend(crc, static_cast<const char*>(host.data()) + e.offset,
                        static_cast<size_t>(e.shape.numel()) * dtype_size(e.dtype));
  return digest_hex(crc);
}

void ReplicaSet::check_replicas(int64_t steps_done) {
  std::vector<uint32_t> local;
  for (auto& r : replicas_) local.push_back(parameter_crc(r));
  for (size_t i = 1; i < local.size(); ++i)
    TG_CHECK(local[i] == local[0], "replica check at step {}: replica {} has parameter digest {}, replica 0 {}",
             steps_done, i, digest_hex(local[i]), digest_hex(local[0]));
  if (process_comm_) {
    std::vector<uint32_t> all(static_cast<size_t>(num_processes_));
    process_comm_->allgather(&local[0], all.data(), sizeof(uint32_t));
    for (int p = 1; p < num_processes_; ++p)
      TG_CHECK(all[p] == all[0], "replica check at step {}: process {} has parameter digest {}, process 0 {}",
               steps_done, p, digest_hex(all[p]), digest_hex(all[0]));
  }
  spdlog::debug("replica check at step {}: digest {} everywhere", steps_done, digest_hex(local[0]));
}

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

}  // namespace tg

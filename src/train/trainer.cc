// Trainer: its construction (the flags a checkpoint fixes, the replicas, the timeline, the exchanges, the schedule,
// the host batch, the start) and one training step.
#include "src/train/trainer_impl.h"
#include "terngrad/core/host_processes.h"
#include "terngrad/core/machine_load.h"

namespace tg {

namespace {
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
  Impl& m = *impl_;
  m.cfg = config;
  m.cfg.num_processes = process_comm ? process_comm->size() : 1;
  RunCheckpoints::adopt_flags(m.cfg, process_comm ? process_comm->rank() : 0);
  m.cfg.resolve_defaults();
  m.cfg.validate(m.cfg.num_processes);
  m.cfg.check_evaluation_data();  // an evaluation's data, like the training's, before anything is created
  m.cfg.check_data_classes();
  m.data = m.cfg.data_info();
  m.fence = std::make_unique<GenerationFence>(m.cfg.train_dir, m.cfg.generation);
  m.scaler = std::make_unique<LossScaler>(m.cfg.compute_dtype() == DType::kF16);
  m.set = std::make_unique<ReplicaSet>(m.cfg, process_comm);
  m.checkpoints = std::make_unique<RunCheckpoints>(m.cfg, *m.set, *m.scaler, m.data.channels);
  m.build();
  m.start();
}

Trainer::~Trainer() = default;

int64_t Trainer::host_syncs() const {
  int64_t most = 0;
  for (const Replica& r : impl_->set->replicas()) most = std::max(most, r.backend->host_syncs());
  return most;
}

const DeviceMemoryPlan& Trainer::memory_plan() const { return impl_->set->first().memory; }

size_t Trainer::device_bytes_in_use() const { return impl_->set->first().backend->allocator().bytes_in_use(); }

// After the replicas: the timeline's tracks, the exchanges that record into it, the schedule and the host batch.
void Trainer::Impl::build() {
  build_timeline();
  set->build_exchanges(timeline.get(), scaler->enabled());
  build_schedule();
  allocate_host_batch();
}

// Resume, other weights or fresh parameters (RunCheckpoints); then, unless the run is finished already (run() says
// so, no input needed), the GPUs' warm-up and the input from the data cursor.
void Trainer::Impl::start() {
  const uint64_t cursor = checkpoints->start(*schedule);
  next_step = checkpoints->start_step();
  if (checkpoints->start_step() >= cfg.max_steps) return;
  set->warm_up_gpus(*batches, scaler->scale());
  open_batch_source(cursor);
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

// --timeline: one track per worker (with --timeline_layers its net's layers too).
void Trainer::Impl::build_timeline() {
  if (cfg.timeline.empty()) return;
  const TimelineSteps steps = Timeline::parse_steps(cfg.timeline_steps);
  timeline = std::make_unique<Timeline>(cfg.timeline, steps.first, steps.last, set->rank());
  for (Worker& wk : set->workers()) {
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
  for (Replica& r : set->replicas()) {
    backends.push_back(r.backend.get());
    replica_workers.push_back(r.workers);
  }
  const Shape image{cfg.image_size, cfg.image_size, data.channels};
  batches = std::make_unique<BatchUpload>(std::move(backends), std::move(replica_workers), set->worker_batch(), image,
                                          cfg.benchmark_mode);
}

void Trainer::Impl::open_batch_source(uint64_t cursor) {
  if (cfg.benchmark_mode) {
    source = std::make_unique<SyntheticBatchSource>(
        cfg.seed, cfg.num_classes, cursor,
        static_cast<uint64_t>(set->rank()) * static_cast<uint64_t>(set->process_batch()));
  } else {
    source = make_pipeline_batch_source(cfg, set->rank(), set->num_processes(), set->process_batch(), cursor);
  }
}

void Trainer::Impl::step(int64_t t, float lr) {
  const Clock::time_point step_begin = Clock::now();
  ProgressWatchdog* watchdog = set->watchdog();
  if (watchdog) watchdog->step(t + 1);
  step_times.clear();
  if (timeline) timeline->set_step(t + 1);
  {
    ScopedPhase input(step_times, Phase::kInputWait, timeline.get(), set->workers()[0].track);
    const BatchUpload::Batch host = batches->host_batch(t);
    try {
      source->next(host.images, host.labels);
    } catch (const InputInterrupted&) {
      throw;
    } catch (const Error& e) {
      // The data failed (a corrupt record, an unreadable file): the t steps done are kept first. One process only:
      // a checkpoint is collective, and the others wait in this step's exchange.
      if (set->num_processes() > 1 || t <= checkpoints->start_step() || t == checkpoints->last_saved_step()) throw;
      save(t);
      TG_THROW("{}; the checkpoint of step {} was saved first: the same command resumes from it", e.what(), t);
    }
  }
  const uint32_t step32 = static_cast<uint32_t>(t);
  // Every replica at once, each on its thread: upload, forward, backward, exchange, optimizer.
  set->threads().run([&](int d) { replica_step(set->replicas()[d], step32, lr, t); });
  // fp16: every replica saw the same flag; a skipped step halves the scale (or stops the run below 1).
  if (!scaler->update(set->first().overflowed, t + 1) && is_chief())
    spdlog::warn("step {}: fp16 gradients overflowed; update skipped, loss scale now {} ({} skipped so far)", t + 1,
                 scaler->scale(), scaler->skipped_steps());
  step_times += set->first().times;
  last_stats = set->first().stats;
  const double total = seconds_between(step_begin, Clock::now());
  step_times.add(Phase::kOther, std::max(0.0, total - step_times.total_excluding_in_flight()));
}

// One replica's part of a step, on its thread: its workers' forward and backward one after another (the last
// one's backward feeds the exchange with --overlap), the exchange, then the update of the replica's
// parameters with the average over all workers.
void Trainer::Impl::replica_step(Replica& r, uint32_t step32, float lr, int64_t t) {
  Timeline* tl = timeline.get();
  r.times.clear();
  const int d = static_cast<int>(&r - set->replicas().data());
  std::vector<Worker>& workers = set->workers();
  ProgressWatchdog* watchdog = set->watchdog();
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
  for (int64_t k = 0; k < steps; ++k, ++m.next_step) {
    m.step(m.next_step, m.learning_rate(m.next_step));
    sum += m.step_times;
  }
  return steps > 0 ? sum.scaled(1.0 / steps) : sum;
}

}  // namespace tg

// Trainer: the run loop, its log windows (log line, metrics, TensorBoard), the timeline and the end of a run.
#include <algorithm>
#include <filesystem>

#include "src/train/trainer_impl.h"
#include "terngrad/core/gpu_status.h"
#include "terngrad/data/dataset_description.h"

namespace tg {

// Every process's phase times (one all-gather; processes call it at the same steps).
std::vector<PhaseTimes> Trainer::Impl::gather_times(const PhaseTimes& mine) {
  std::vector<PhaseTimes> all(static_cast<size_t>(set->num_processes()));
  if (!set->process_comm()) {
    all[0] = mine;
    return all;
  }
  set->process_comm()->allgather(mine.seconds, all.data(), sizeof(mine.seconds));
  return all;
}

// --timeline: every process's events into one file, written by process 0 (all processes call this at the
// same point: when the window ends, or at the end of a run that stopped inside it).
void Trainer::Impl::write_timeline() {
  for (Replica& r : set->replicas())  // a GPU's side-stream spans the device has not been asked about yet
    for (GradientExchange* x : {&r.exchanges->exchange(), r.exchanges->fp32()})
      if (x) x->flush_timeline();
  std::string mine = timeline->events_json();
  std::vector<std::string> fragments;
  if (!set->process_comm()) {
    fragments.push_back(std::move(mine));
  } else {
    const uint64_t size = mine.size();
    std::vector<uint64_t> sizes(static_cast<size_t>(set->num_processes()));
    set->process_comm()->allgather(&size, sizes.data(), sizeof(size));
    const uint64_t longest = *std::max_element(sizes.begin(), sizes.end());
    mine.resize(longest, ' ');
    std::string all(longest * static_cast<size_t>(set->num_processes()), ' ');
    set->process_comm()->allgather(mine.data(), all.data(), longest);
    for (int p = 0; p < set->num_processes(); ++p) fragments.push_back(all.substr(p * longest, sizes[p]));
  }
  if (is_chief()) {
    Timeline::write_trace(cfg.timeline, fragments);
    spdlog::info("timeline of steps {}-{} written to {} (open it in https://ui.perfetto.dev or chrome://tracing)",
                 timeline->first_step(), timeline->last_step(), cfg.timeline);
  }
}

// Between steps (`done` of them): a stop request (SIGINT/SIGTERM, --stop_file) reaches processes at slightly different
// times, so they agree on it (all-reduce MAX) and all stop after the same step instead of some waiting in a
// collective. The same all-reduce carries process 0's verdicts on --save_secs and --eval_secs (its clock decides, so
// every process saves after the same step). Then the checkpoint and the evaluation that are due; returns whether to
// stop.
bool Trainer::Impl::between_steps(const std::atomic<bool>* stop, int64_t done, RunReport& report) {
  const Clock::time_point now = Clock::now();
  int32_t flags[3] = {
      (stop && stop->load()) || (!cfg.stop_file.empty() && std::filesystem::exists(cfg.stop_file)) ? 1 : 0,
      is_chief() && cfg.save_secs > 0 && seconds_between(checkpoints->last_save(), now) >= cfg.save_secs ? 1 : 0,
      is_chief() && cfg.eval_secs > 0 && seconds_between(last_eval.at, now) >= cfg.eval_secs ? 1 : 0};
  if (set->process_comm()) set->process_comm()->allreduce(flags, 3, DType::kI32, ReduceOp::kMax);
  if (flags[0] != 0 || done <= checkpoints->start_step()) return flags[0] != 0;
  if (flags[1] != 0 && done != checkpoints->last_saved_step()) save(done);
  if ((flags[2] != 0 || (cfg.eval_every > 0 && done % cfg.eval_every == 0)) && done != last_eval.step)
    evaluate(done, report);
  return false;
}

// --eval_every/--eval_secs: the checkpoint of `done` steps (saved now if it was not), evaluated by process 0 on
// --eval_subset as terngrad-eval would (the moving averages), its result in the run's events and eval.jsonl. The
// training's state is only read (a checkpoint), so its bits do not change; the other processes wait in the next
// step's first collective.
void Trainer::Impl::evaluate(int64_t done, RunReport& report) {
  if (done != checkpoints->last_saved_step()) save(done);
  last_eval.step = done;
  if (is_chief()) {
    const Clock::time_point t0 = Clock::now();
    const EvalResult e =
        Evaluator(eval_options_of(cfg, cfg.eval_subset)).evaluate(checkpoint_path(cfg.train_dir, done));
    report.evaluation(e, seconds_between(t0, Clock::now()));
  }
  last_eval.at = Clock::now();
}

TrainResult Trainer::run(const std::atomic<bool>* stop) {
  Impl& m = *impl_;
  const TrainConfig& cfg = m.cfg;
  if (m.checkpoints->start_step() >= cfg.max_steps) return m.already_finished();
  // One process stops waiting for input at once; several agree on stopping between steps (stop_requested).
  if (m.set->num_processes() == 1) m.source->set_stop_flag(stop);
  m.warn_if_machine_is_busy();
  RunReport report(cfg, m.is_chief(), m.set->workers().size(), m.checkpoints->start_step(),
                   m.set->first().backend->counters());
  m.open_run(report);
  if (m.set->watchdog()) m.set->watchdog()->arm();
  m.checkpoints->restart_save_clock();  // --save_secs, --eval_secs: from the first step
  m.last_eval.at = Clock::now();
  TrainResult result;
  result.start_step = m.checkpoints->start_step();
  int64_t t = m.checkpoints->start_step();
  for (; t < cfg.max_steps; ++t) {
    const float lr = m.learning_rate(t);
    if (m.between_steps(stop, t, report) || !m.timed_step(t, lr, report)) {
      result.interrupted = true;
      break;
    }
    result.bytes_moved += m.last_stats.moved_bytes;
    result.fp32_bytes_moved += m.last_stats.fp32_moved_bytes;
    if (t + 1 == cfg.fp32_warmup_steps && m.is_chief())
      spdlog::info("step {}: the fp32 warm-up ends; the steps from {} on exchange {}", t + 1, t + 2,
                   m.set->first().exchanges->exchange().scheme().describe());
    if (m.set->first().exchanges->plan(t).probe)
      report.quantization(m.set->first().exchanges->probe()->last());  // every replica holds the same averages
    if (m.ends_window(t)) m.log_window(t + 1, lr, report);
    m.after_step(t + 1);
  }
  m.finish_run(t, report, result);
  if (m.set->watchdog()) m.set->watchdog()->disarm();
  return result;
}

// A re-run of a finished training: nothing to do, say what is there.
TrainResult Trainer::Impl::already_finished() const {
  TrainResult result;
  result.start_step = checkpoints->start_step();
  result.already_finished = true;
  result.steps_done = checkpoints->start_step();
  result.parameter_digest = checkpoints->last_digest();
  if (is_chief())
    spdlog::info("training already finished at step {} (checkpoint {}, parameter digest {}); --max_steps is {}",
                 checkpoints->start_step(), checkpoints->resumed_path(), checkpoints->last_digest(), cfg.max_steps);
  return result;
}

// The chief's flags file and configuration lines; the run's clock starts after them.
void Trainer::Impl::open_run(RunReport& report) {
  if (!is_chief()) return;
  write_flags_file();
  log_configuration();
  report.restart_clock();
}

// <train_dir>/flags.ini: every flag of this run as a --config file (the run repeated from it: --config FILE).
void Trainer::Impl::write_flags_file() const {
  const std::string path = (std::filesystem::path(cfg.train_dir) / kFlagsFileName).string();
  std::string text = fmt::format(
      "# The flags of the last terngrad-train run in this folder; `terngrad-train --config {}` repeats it.\n", path);
  for (const Flag<TrainConfig>& f : train_flags()) {
    if (f.has(kFlagInternal) || f.has(kFlagNotSaved)) continue;
    const std::string v = flag_value_text(f, cfg);
    text += fmt::format("{} = {}\n", f.name, v.empty() ? "\"\"" : v);
  }
  AtomicFile out(path);
  out.write(text);
  out.commit();
}

void Trainer::Impl::log_configuration() const {
  // The flags that differ from the defaults (resolved for this network and dataset); all of them: flags.ini.
  TrainConfig defaults;
  defaults.net = cfg.net;
  defaults.dataset = cfg.dataset;
  defaults.data_dir = cfg.data_dir;  // a custom dataset's facts
  defaults.resolve_defaults();
  const std::map<std::string, std::string> base = defaults.to_flags();
  std::string flags;
  for (const Flag<TrainConfig>& f : train_flags()) {
    if (f.has(kFlagInternal) || f.has(kFlagNotSaved)) continue;
    const std::string v = flag_value_text(f, cfg);
    if (base.count(f.name) && base.at(f.name) == v) continue;
    flags += fmt::format(" --{} {}", f.name, v.empty() ? "''" : v);
  }
  spdlog::info("flags other than the defaults:{} (all: {})", flags.empty() ? " none" : flags,
               (std::filesystem::path(cfg.train_dir) / kFlagsFileName).string());
  if (!kGpuPathRunOnDevice && !set->first().backend->device().is_cpu())
    spdlog::warn(
        "--device {}: the GPU path is compiled and unit-tested against the CPU but {}; check this run's "
        "results against a CPU run (scripts/gpu_check.sh runs the device check)",
        cfg.device, kGpuNotYetRun);
  if (cfg.dataset == "custom")
    if (const std::optional<DatasetDescription> d = find_dataset_description(cfg.data_dir))
      spdlog::info("data: {} ({}): --dataset custom, --num_classes {}, --image_size {}", d->summary(),
                   dataset_description_path(cfg.data_dir), cfg.num_classes, cfg.image_size);
  spdlog::info("{} | net {} ({} parameters), {} workers x {} examples, {}", set->first().backend->name(), cfg.net,
               set->first().store->num_parameters(), set->workers().size() * set->num_processes(), set->worker_batch(),
               set->policy().summary());
  const Replica& r0 = set->first();
  const Net::MemoryReport& net = r0.memory.net;
  spdlog::info(
      "memory per replica: {} (planned; {} in this process's buffers on {}) | activations: one arena for {} "
      "worker{}, --memory_plan {}{}: {} without a plan, at least {}; {} outputs in place, {} recomputed",
      r0.memory.describe(), human_bytes(double(r0.backend->allocator().bytes_in_use())), r0.backend->device().str(),
      r0.workers.size(), r0.workers.size() == 1 ? "" : "s", cfg.memory_plan,
      cfg.recompute == "none" ? "" : " --recompute " + cfg.recompute, human_bytes(double(net.unplanned)),
      human_bytes(double(net.peak_live)), net.in_place, net.recomputed);
  const GradientExchange& x = set->first().exchanges->exchange();
  const std::string warmup = cfg.fp32_warmup_steps > 0
                                 ? fmt::format(" after {} steps of fp32 (--fp32_warmup_steps)", cfg.fp32_warmup_steps)
                                 : "";
  spdlog::info("{} | exchange {}{}, {} bucket{}{} | learning rate {}", set->topology().describe(),
               x.scheme().describe(), warmup, x.num_buckets(), x.num_buckets() == 1 ? "" : "s",
               set->first().exchanges->overlapped() ? " overlapped with backward" : "", schedule->describe());
  const size_t all_workers = set->workers().size() * static_cast<size_t>(set->num_processes());
  if (cfg.grad_bits != 32 && all_workers == 1)
    spdlog::warn(
        "one worker: there is nothing to exchange, so --grad_bits {} saves nothing (0 B/step); train data-parallel "
        "with --num_nodes 2 or more, or several processes (mpirun -np 2)",
        cfg.grad_bits);
  const ModelInfo& model = find_model(cfg.net);
  if (model.design_image_size > 0 && cfg.image_size > 2 * model.design_image_size)
    spdlog::warn(
        "--net {} at --image_size {}: it was designed for {}x{} inputs; at this size it has {:.1f} M parameters "
        "(its dense layers grow with the input): a network made for this size (alexnet, resnet50, inception_v3) "
        "or --image_size {} may be what you want",
        cfg.net, cfg.image_size, model.design_image_size, model.design_image_size,
        static_cast<double>(set->first().store->num_parameters()) / 1e6, model.design_image_size);
  spdlog::info("step lines end with {}", PhaseTimes::legend());
}

// Step t, timed into the log window; false when the input was interrupted before any of the step's work (the
// state is still that of step t).
//
// A GPU step only queues its work; the device runs behind. The step that ends a log window waits for every replica's
// device before its timer stops (the log's reads would wait right after it anyway: the window still makes one host
// synchronisation), so a window's time, and examples/sec, is the device's time for its steps, as a peer timing with
// CUDA events reports it; steps inside a window are their host time, and their sum with the last one's wait is the
// window's. On the CPU every op has finished when it returns: nothing to wait for.
bool Trainer::Impl::timed_step(int64_t t, float lr, RunReport& report) {
  const Clock::time_point t0 = Clock::now();
  try {
    step(t, lr);
  } catch (const InputInterrupted&) {
    return false;
  }
  if (ends_window(t))
    for (Replica& r : set->replicas())
      if (!r.backend->device().is_cpu()) r.backend->synchronize();
  report.add_step(seconds_between(t0, Clock::now()), step_times);
  for (size_t w = 0; w < set->workers().size(); ++w) report.add_forward_backward(w, set->workers()[w].forward_backward);
  return true;
}

// The log window ending at step `done` (every process calls it: the phase times are gathered).
void Trainer::Impl::log_window(int64_t done, float lr, RunReport& report) {
  WindowFacts f;
  const PhaseTimes mean = report.close_window();
  f.counters = set->first().backend->counters();  // before this log step's own reads
  f.per_process = gather_times(mean);             // every process: same steps
  f.done = done;
  if (is_chief()) {
    const Net& last = *set->workers().back().net;
    f.lr = lr;
    f.cross_entropy = last.last_cross_entropy();
    f.regularization = last.last_regularization();
    f.stats = last_stats;
    f.fp32_warmup = set->first().exchanges->plan(done - 1).warm;
    f.exchange = set->first().exchanges->exchange().scheme().name();
    if (!f.fp32_warmup)  // the warm-up's fp32 exchange reports no quantities
      for (const TensorSummary& q : set->first().exchanges->exchange().summaries())
        f.exchange_summaries.push_back(
            {std::string(q.quantity) + "/" + set->policy().tensors()[q.tensor].name, static_cast<float>(q.value)});
    f.loss_scaling = scaler->enabled();
    f.loss_scale = scaler->scale();
    f.skipped_steps = scaler->skipped_steps();
  }
  report.window(f);
  report.start_window(set->first().backend->counters());
}

// After step `done`: the timeline when its window ends, the replica check and the periodic checkpoint.
void Trainer::Impl::after_step(int64_t done) {
  if (done == checkpoints->start_step() + 1) log_device_memory_used();
  if (timeline && !timeline_written && done == timeline->last_step()) {
    write_timeline();
    timeline_written = true;
  }
  if (cfg.check_replicas_every > 0 && done % cfg.check_replicas_every == 0) set->check_replicas(done);
  if (done % cfg.save_iter == 0 && done < cfg.max_steps) save(done);
}

// On a GPU, after the first step: what the run took of the device (its free memory before the replica was built less
// after the step) beside the plan; the rest is cuDNN's workspace and the libraries' state (the GPU check compares).
void Trainer::Impl::log_device_memory_used() {
  const Replica& r = set->first();
  if (r.backend->device().is_cpu() || r.free_before_build == SIZE_MAX || !is_chief()) return;
  const std::optional<size_t> free = r.backend->free_memory();
  if (!free) return;
  const size_t used = r.free_before_build > *free ? r.free_before_build - *free : 0;
  spdlog::info(
      "{}: the run took {} ({} bytes) of device memory by the end of its first step; planned {} ({} bytes): "
      "the rest is cuDNN's workspace and the libraries' state",
      r.backend->device().str(), human_bytes(double(used)), used, human_bytes(double(r.memory.total())),
      r.memory.total());
}

// The end of a run stopped after step t (done or interrupted): the last checkpoint and the result.
void Trainer::Impl::finish_run(int64_t t, RunReport& report, TrainResult& result) {
  result.steps_done = t;
  // A run that ended inside the window still leaves the steps it traced.
  if (timeline && !timeline_written && t >= timeline->first_step()) write_timeline();
  if (t > checkpoints->start_step() || checkpoints->none_written() || result.interrupted) save(t);
  if (cfg.evaluates_during_training() && !result.interrupted && t > checkpoints->start_step() && t != last_eval.step)
    evaluate(t, report);  // the curve's last point: the final checkpoint
  if (result.interrupted && is_chief())
    spdlog::warn("stopped at step {} on request; checkpoint saved in {}: the same command resumes from it", t,
                 cfg.train_dir);
  if (source->skipped_records() > 0)  // the one report of the total
    spdlog::warn("--skip_corrupt_records: skipped {} corrupt records (process {})", source->skipped_records(),
                 set->rank());
  const Net& last = *set->workers().back().net;
  if (t > checkpoints->start_step()) result.final_loss = last.last_cross_entropy() + last.last_regularization();
  result.parameter_digest = checkpoints->last_digest();
  result.last_checkpoint = checkpoint_path(cfg.train_dir, t);
  report.finish(result);
}

}  // namespace tg

// Trainer: the run loop, its log windows (log line, metrics, TensorBoard), the timeline and the end of a run.
#include <algorithm>
#include <filesystem>

#include "src/train/trainer_impl.h"

namespace tg {

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

// TensorBoard scalars of a logged step: losses, learning rate, speed, bytes on the wire, and the exchange
// scheme's per-tensor quantities ("<quantity>/<tensor>": TernGrad's shared scaler and zero fraction, ...).
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
  const bool warm = in_warmup(step - 1);  // the logged step (1-based) is step - 1 counted from 0
  if (cfg.fp32_warmup_steps > 0) v.push_back({"exchange/fp32_warmup", warm ? 1.f : 0.f});
  if (!warm)  // the warm-up's fp32 exchange reports no quantities
    for (const TensorSummary& q : replicas[0].exchange->summaries())
      v.push_back({std::string(q.quantity) + "/" + policy.tensors()[q.tensor].name, static_cast<float>(q.value)});
  events.scalars(step, v);
}

// A stop request (SIGINT/SIGTERM) reaches processes at slightly different times: they agree on it before
// each step (all-reduce MAX), so all stop after the same step instead of some waiting in a collective.
bool Trainer::Impl::stop_requested(const std::atomic<bool>* stop) {
  int32_t flag = stop && stop->load() ? 1 : 0;
  if (process_comm) process_comm->allreduce(&flag, 1, DType::kI32, ReduceOp::kMax);
  return flag != 0;
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
    if (t + 1 == cfg.fp32_warmup_steps && m.is_chief())
      spdlog::info("step {}: the fp32 warm-up ends; the steps from {} on exchange {}", t + 1, t + 2,
                   m.replicas[0].exchange->scheme().describe());
    if (m.probes(t)) m.report_quantization(log);
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
  log.start = Clock::now();
  if (!is_chief()) return log;
  std::filesystem::create_directories(cfg.train_dir);  // only now: the configuration and the data are checked
  if (!cfg.metrics_jsonl.empty()) log.metrics = std::make_unique<MetricsWriter>(cfg.metrics_jsonl);
  log.events = std::make_unique<EventWriter>(cfg.train_dir);
  write_flags_file();
  log_configuration();
  log.start = Clock::now();
  return log;
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
  spdlog::info("{} | net {} ({} parameters), {} workers x {} examples, {}", replicas[0].backend->name(), cfg.net,
               replicas[0].store->num_parameters(), workers.size() * num_processes, worker_batch, policy.summary());
  const GradientExchange& x = *replicas[0].exchange;
  const std::string warmup = cfg.fp32_warmup_steps > 0
                                 ? fmt::format(" after {} steps of fp32 (--fp32_warmup_steps)", cfg.fp32_warmup_steps)
                                 : "";
  spdlog::info("{} | exchange {}{}, {} bucket{}{} | learning rate {}", topology->describe(), x.scheme().describe(),
               warmup, x.num_buckets(), x.num_buckets() == 1 ? "" : "s",
               replicas[0].overlap ? " overlapped with backward" : "", schedule->describe());
  const size_t all_workers = workers.size() * static_cast<size_t>(num_processes);
  if (cfg.grad_bits != 32 && all_workers == 1)
    spdlog::warn(
        "one worker: there is nothing to exchange, so --grad_bits {} saves nothing (0 B/step); train data-parallel "
        "with --num_nodes 2 or more, or several processes (mpirun -np 2)",
        cfg.grad_bits);
  spdlog::info("step lines end with {}", PhaseTimes::legend());
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
        "sec/batch) lr = {:.6g}, exchanged {}/step (fp32 {}){} [{}/{} {:.0f}%, ETA {}] {}",
        done, last.last_cross_entropy(), last.last_regularization(), loss, w.examples_per_sec, w.sec_per_step, lr,
        human_bytes(xs.moved_bytes), human_bytes(xs.fp32_moved_bytes), in_warmup(done - 1) ? " fp32 warm-up" : "", done,
        cfg.max_steps, 100.0 * done / cfg.max_steps, human_duration(eta), mean.compact());
    if (scaler->enabled())
      spdlog::info("step {}: fp16 loss scale {}, {} skipped steps", done, scaler->scale(), scaler->skipped_steps());
    if (log.events) write_summaries(*log.events, done, lr, w.examples_per_sec, mean);
    if (log.metrics) {
      StepMetrics sm;
      sm.step = done;
      sm.elapsed = elapsed;
      sm.exchange = in_warmup(done - 1) ? "fp32 warm-up" : replicas[0].exchange->scheme().name();
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
      sm.intra_node_bytes = xs.intra_node_bytes;
      sm.inter_node_bytes = xs.inter_node_bytes;
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

// --quantization_error_every: the probe's log line, TensorBoard scalars and metrics line (the chief's first replica;
// every replica holds the same averages).
void Trainer::Impl::report_quantization(RunLog& log) {
  if (!is_chief()) return;
  const QuantizationReport& q = replicas[0].probe->last();
  const TensorQuantization* worst = nullptr;
  for (const TensorQuantization& t : q.tensors)
    if (!worst || t.relative_error > worst->relative_error) worst = &t;
  spdlog::info(
      "step {}: quantization error of the averaged gradient |ternary - fp32| / |fp32| = {:.3f}, {:.1f}% of the codes "
      "non-zero{} (probe {:.0f} ms)",
      q.step, q.relative_error, 100 * q.nonzero_fraction,
      worst ? fmt::format("; largest {} {:.3f} ({:.1f}% non-zero)", worst->name, worst->relative_error,
                          100 * worst->nonzero_fraction)
            : "",
      1e3 * q.seconds);
  for (const TensorQuantization& t : q.tensors)
    spdlog::debug("step {}: quantization error {} {:.4f}, {:.2f}% non-zero, scaler {:.4g} ({} scaler{})", q.step,
                  t.name, t.relative_error, 100 * t.nonzero_fraction, t.scaler, t.num_scalers,
                  t.num_scalers == 1 ? "" : "s");
  if (log.events) {
    std::vector<std::pair<std::string, float>> v = {
        {"quantization/relative_error", static_cast<float>(q.relative_error)},
        {"quantization/nonzero_fraction", static_cast<float>(q.nonzero_fraction)}};
    for (const TensorQuantization& t : q.tensors) {
      v.push_back({"quantization/relative_error/" + t.name, static_cast<float>(t.relative_error)});
      v.push_back({"quantization/nonzero_fraction/" + t.name, static_cast<float>(t.nonzero_fraction)});
      v.push_back({"quantization/scaler/" + t.name, t.scaler});
    }
    log.events->scalars(q.step, v);
  }
  if (log.metrics) log.metrics->quantization(q);
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
  if (result.interrupted && is_chief())
    spdlog::warn("stopped at step {} on request; checkpoint saved in {}: the same command resumes from it", t,
                 cfg.train_dir);
  if (source->skipped_records() > 0)  // the one report of the total
    spdlog::warn("--skip_corrupt_records: skipped {} corrupt records (process {})", source->skipped_records(), rank);
  const Net& last = *workers.back().net;
  if (t > start_step) result.final_loss = last.last_cross_entropy() + last.last_regularization();
  result.median_examples_per_sec = log.meter.median_examples_per_sec();
  result.time_per_step = log.run_time_steps > 0 ? log.run_times.scaled(1.0 / log.run_time_steps) : log.window_times;
  result.parameter_digest = last_digest;
  result.last_checkpoint = checkpoint_path(cfg.train_dir, t);
  result.wall_seconds = seconds_between(log.start, Clock::now());
  if (log.metrics) log.metrics->summary(result);
}

}  // namespace tg

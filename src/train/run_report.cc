// RunReport: the run's log lines, TensorBoard scalars and metrics lines, per log window and probe.
#include "terngrad/train/run_report.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>

#include "terngrad/core/human_units.h"

namespace tg {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

RunReport::RunReport(const TrainConfig& cfg, bool chief, size_t workers, int64_t start_step, DeviceCounters counters)
    : cfg_(cfg),
      chief_(chief),
      start_step_(start_step),
      meter_(cfg.total_batch(), cfg.log_every),
      window_worker_fb_(workers, 0.0),
      window_counters_(counters) {
  if (!chief_) return;
  std::filesystem::create_directories(cfg.train_dir);  // only now: the configuration and the data are checked
  if (!cfg.metrics_jsonl.empty()) metrics_ = std::make_unique<MetricsWriter>(cfg.metrics_jsonl);
  events_ = std::make_unique<EventWriter>(cfg.train_dir);
  // The training time's origin for this run (or resume): scripts/plot_runs.py joins a resumed run's files here.
  events_->scalars(start_step, {{"run/train_seconds", 0.f}});
}

double RunReport::train_seconds() const { return seconds_since(start_) - eval_seconds_; }

void RunReport::add_step(double seconds, const PhaseTimes& times) {
  meter_.add_step(seconds);
  window_times_ += times;
  if (meter_.warm()) {
    run_times_ += times;
    ++run_time_steps_;
  }
}

PhaseTimes RunReport::close_window() {
  closed_ = meter_.close_window();
  closed_mean_ = window_times_.scaled(1.0 / closed_.steps);
  return closed_mean_;
}

void RunReport::window(const WindowFacts& f) {
  const ThroughputMeter::Window& w = closed_;
  const PhaseTimes& mean = closed_mean_;
  const double elapsed = train_seconds();  // training time: the evaluations left out
  const double eta = elapsed / static_cast<double>(f.done - start_step_) * static_cast<double>(cfg_.max_steps - f.done);
  // The window's steps' host synchronisations and device launches (the log step's own reads are not a step's).
  const double syncs_per_step = static_cast<double>(f.counters.host_syncs - window_counters_.host_syncs) / w.steps;
  const double launches_per_step = static_cast<double>(f.counters.launches - window_counters_.launches) / w.steps;
  if (chief_) {
    const float loss = f.cross_entropy + f.regularization;
    const ExchangeStats& xs = f.stats;
    spdlog::info(
        "step {}, entropy_loss = {:.2f}, reg_loss = {:.2f}, total_loss = {:.2f} ({:.1f} examples/sec; {:.3f} "
        "sec/batch) lr = {:.6g}, exchanged {}/step (fp32 {}){} [{}/{} {:.0f}%, ETA {}] {}",
        f.done, f.cross_entropy, f.regularization, loss, w.examples_per_sec, w.sec_per_step, f.lr,
        human_bytes(xs.moved_bytes), human_bytes(xs.fp32_moved_bytes), f.fp32_warmup ? " fp32 warm-up" : "", f.done,
        cfg_.max_steps, 100.0 * f.done / cfg_.max_steps, human_duration(eta), mean.compact());
    if (f.loss_scaling)
      spdlog::info("step {}: fp16 loss scale {}, {} skipped steps", f.done, f.loss_scale, f.skipped_steps);
    if (events_) write_summaries(f);
    if (metrics_) {
      StepMetrics sm;
      sm.step = f.done;
      sm.elapsed = elapsed;
      sm.exchange = f.fp32_warmup ? "fp32 warm-up" : f.exchange;
      sm.entropy_loss = f.cross_entropy;
      sm.reg_loss = f.regularization;
      sm.total_loss = loss;
      sm.learning_rate = f.lr;
      sm.examples_per_sec = w.examples_per_sec;
      sm.sec_per_batch = w.sec_per_step;
      sm.bytes_exchanged = xs.moved_bytes;
      sm.fp32_bytes = xs.fp32_moved_bytes;
      sm.payload_bytes = xs.payload_bytes;
      sm.wire_bytes = xs.process_wire_bytes;
      sm.intra_node_bytes = xs.intra_node_bytes;
      sm.inter_node_bytes = xs.inter_node_bytes;
      sm.time = mean;
      sm.loss_scale = f.loss_scale;
      sm.skipped_steps = f.skipped_steps;
      sm.host_syncs = syncs_per_step;
      sm.device_launches = launches_per_step;
      if (f.per_process.size() > 1) sm.process_time = f.per_process;
      for (double fb : window_worker_fb_) sm.worker_forward_backward.push_back(fb / w.steps);
      metrics_->step(sm);
    }
  }
}

void RunReport::start_window(DeviceCounters counters) {
  window_times_.clear();
  std::fill(window_worker_fb_.begin(), window_worker_fb_.end(), 0.0);
  window_counters_ = counters;
}

// TensorBoard scalars of a logged step: losses, learning rate, speed, bytes on the wire, and the exchange
// scheme's per-tensor quantities ("<quantity>/<tensor>": TernGrad's shared scaler and zero fraction, ...).
void RunReport::write_summaries(const WindowFacts& f) {
  std::vector<std::pair<std::string, float>> v = {
      {"losses/entropy_loss", f.cross_entropy},
      {"losses/reg_loss", f.regularization},
      {"losses/total_loss", f.cross_entropy + f.regularization},
      {"learning_rate", f.lr},
      {"examples_per_sec", static_cast<float>(closed_.examples_per_sec)},
      {"exchange/bytes_per_step", static_cast<float>(f.stats.moved_bytes)},
      {"exchange/fp32_bytes_per_step", static_cast<float>(f.stats.fp32_moved_bytes)},
      // Seconds of training since this run (or resume) began, evaluations left out: the time axis of a curve.
      {"run/train_seconds", static_cast<float>(train_seconds())},
  };
  if (f.loss_scaling) {
    v.push_back({"loss_scale", f.loss_scale});
    v.push_back({"skipped_steps", static_cast<float>(f.skipped_steps)});
  }
  for (const auto& [name, secs] : closed_mean_.named("time/")) v.push_back({name, static_cast<float>(secs)});
  if (cfg_.fp32_warmup_steps > 0) v.push_back({"exchange/fp32_warmup", f.fp32_warmup ? 1.f : 0.f});
  v.insert(v.end(), f.exchange_summaries.begin(), f.exchange_summaries.end());
  events_->scalars(f.done, v);
}

void RunReport::quantization(const QuantizationReport& q) {
  if (!chief_) return;
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
  if (events_) {
    std::vector<std::pair<std::string, float>> v = {
        {"quantization/relative_error", static_cast<float>(q.relative_error)},
        {"quantization/nonzero_fraction", static_cast<float>(q.nonzero_fraction)}};
    for (const TensorQuantization& t : q.tensors) {
      v.push_back({"quantization/relative_error/" + t.name, static_cast<float>(t.relative_error)});
      v.push_back({"quantization/nonzero_fraction/" + t.name, static_cast<float>(t.nonzero_fraction)});
      v.push_back({"quantization/scaler/" + t.name, t.scaler});
    }
    events_->scalars(q.step, v);
  }
  if (metrics_) metrics_->quantization(q);
}

void RunReport::evaluation(const EvalResult& e, double seconds) {
  eval_seconds_ += seconds;
  ++evaluations_;
  if (!chief_) return;
  record_eval_result(e, cfg_.train_dir, *events_, "--train_dir");
  events_->scalars(e.step, {{"run/train_seconds", static_cast<float>(train_seconds())}});
  spdlog::info(
      "step {}: test precision@1 {:.4f}, recall@5 {:.4f} on the {} examples of '{}' (the moving averages; "
      "evaluated in {}, not counted as training time)",
      e.step, e.precision_at_1(), e.recall_at_5(), e.examples, e.subset, human_duration(seconds));
}

void RunReport::finish(TrainResult& result) {
  result.median_examples_per_sec = meter_.median_examples_per_sec();
  result.time_per_step = run_time_steps_ > 0 ? run_times_.scaled(1.0 / run_time_steps_) : window_times_;
  result.wall_seconds = seconds_since(start_);
  result.evaluations = evaluations_;
  result.eval_seconds = eval_seconds_;
  if (metrics_) metrics_->summary(result);
}

}  // namespace tg

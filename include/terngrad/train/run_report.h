// RunReport: what a training run tells its user while it runs, owned in one place: the throughput meter and the
// sums of the current log window (every process measures), and on the chief (process 0) the log line, the
// TensorBoard scalars and the --metrics_jsonl line of every log window and quantization probe, and the run's summary
// at its end. The trainer hands it plain facts (WindowFacts); it knows no replica, exchange or network.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "terngrad/backend/backend.h"
#include "terngrad/core/phase_times.h"
#include "terngrad/exchange/gradient_scheme.h"
#include "terngrad/exchange/quantization_probe.h"
#include "terngrad/train/evaluator.h"
#include "terngrad/train/event_writer.h"
#include "terngrad/train/metrics.h"
#include "terngrad/train/throughput_meter.h"
#include "terngrad/train/train_config.h"
#include "terngrad/train/trainer.h"

namespace tg {

// What the trainer knows at the end of a log window (the last step's, unless said otherwise).
struct WindowFacts {
  int64_t done = 0;  // steps done
  float lr = 0;
  float cross_entropy = 0, regularization = 0;  // the last worker's losses
  ExchangeStats stats;
  bool fp32_warmup = false;  // the step exchanged fp32 (--fp32_warmup_steps)
  std::string exchange;      // the scheme's name
  // The exchange's per-tensor quantities, named "<quantity>/<tensor>" (none during the fp32 warm-up).
  std::vector<std::pair<std::string, float>> exchange_summaries;
  bool loss_scaling = false;  // --precision fp16's dynamic loss scale, and the steps it skipped
  float loss_scale = 1;
  int64_t skipped_steps = 0;
  DeviceCounters counters;              // replica 0's Backend::counters() before the log step's own reads
  std::vector<PhaseTimes> per_process;  // every process's window_mean(), when several
};

class RunReport {
 public:
  // The chief creates train_dir and opens the metrics file and the event writer; counters: replica 0's
  // Backend::counters() as the first window begins.
  RunReport(const TrainConfig& cfg, bool chief, size_t workers, int64_t start_step, DeviceCounters counters);
  // The run's clock starts (again) now: after the configuration lines.
  void restart_clock() { start_ = Clock::now(); }

  // One step of `seconds` and its phase times; then each worker's forward + backward seconds of it.
  void add_step(double seconds, const PhaseTimes& times);
  void add_forward_backward(size_t worker, double seconds) { window_worker_fb_.at(worker) += seconds; }
  // Closes the window; returns its mean phase times per step (gathered over the processes before window()).
  PhaseTimes close_window();
  // The closed window's log line, TensorBoard scalars and metrics line (the chief).
  void window(const WindowFacts& f);
  // The next window starts: replica 0's Backend::counters() now (after the log step's own reads).
  void start_window(DeviceCounters counters);
  // A --quantization_error_every probe's log line, TensorBoard scalars and metrics line (the chief).
  void quantization(const QuantizationReport& q);
  // An evaluation during training (--eval_every) that took `seconds`: its log line, TensorBoard scalars ("Accuracy @
  // 1", "Accuracy @ 5") and eval.jsonl line (the chief); its time is left out of the training time.
  void evaluation(const EvalResult& e, double seconds);
  // The run's figures into `result` (median rate, time per step after the first window, wall time) and, on the
  // chief, the metrics file's summary line.
  void finish(TrainResult& result);

 private:
  using Clock = std::chrono::steady_clock;
  void write_summaries(const WindowFacts& f);
  // Seconds since start_ without the evaluations': the run's training time.
  double train_seconds() const;
  const TrainConfig& cfg_;
  bool chief_;
  int64_t start_step_;
  std::unique_ptr<MetricsWriter> metrics_;  // --metrics_jsonl (chief)
  std::unique_ptr<EventWriter> events_;     // TensorBoard (chief)
  ThroughputMeter meter_;                   // its warm-up is the first log window
  Clock::time_point start_ = Clock::now();
  double eval_seconds_ = 0;              // spent in evaluation() since start_
  int evaluations_ = 0;                  // evaluation() calls since start_
  PhaseTimes window_times_, run_times_;  // sums over the log window; over the run after the warm-up
  int64_t run_time_steps_ = 0;
  std::vector<double> window_worker_fb_;  // per worker, forward + backward seconds summed over the window
  DeviceCounters window_counters_;        // replica 0's counters when the window's steps began
  ThroughputMeter::Window closed_;        // the window close_window() closed
  PhaseTimes closed_mean_;
};

}  // namespace tg

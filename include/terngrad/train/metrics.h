// MetricsWriter: --metrics_jsonl, one JSON object per logged step and a final summary object, each on its
// own line and flushed, so a run that dies keeps what it logged.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "terngrad/core/phase_times.h"

namespace tg {

// One logged step: the losses of the last step, and the window's means since the previous log line.
struct StepMetrics {
  int64_t step = 0;
  double entropy_loss = 0, reg_loss = 0, total_loss = 0, learning_rate = 0;
  double examples_per_sec = 0, sec_per_batch = 0;
  uint64_t bytes_exchanged = 0, fp32_bytes = 0, payload_bytes = 0;  // per worker and step (byte model)
  uint64_t wire_bytes = 0;  // moved into process 0 by its collectives in the last step
  double loss_scale = 1;     // fp16's dynamic loss scale (1 without fp16)
  int64_t skipped_steps = 0;  // fp16 steps skipped for Inf/NaN gradients since the run started
  PhaseTimes time;          // process 0, seconds per step, mean over the window
  std::vector<PhaseTimes> process_time;           // every process (when several), mean over the window
  std::vector<double> worker_forward_backward;    // process 0's workers, seconds per step
};

class MetricsWriter {
 public:
  explicit MetricsWriter(const std::string& path);  // appends; errors name the path
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  void step(const StepMetrics& m);
  // time: process 0's mean seconds per step over the run after the first window.
  void summary(int64_t steps, double median_examples_per_sec, uint64_t bytes_moved, uint64_t fp32_bytes_moved,
               double final_loss, const std::string& parameter_digest, const PhaseTimes& time);

 private:
  void line(const std::string& json);
  std::FILE* file_ = nullptr;
  std::string path_;
};

}  // namespace tg

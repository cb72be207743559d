// MetricsWriter: --metrics_jsonl, one JSON object per logged step (and per --quantization_error_every probe)
// and a final summary object, each on its own line and written at once (core/json_writer.h), so a run that dies keeps
// what it logged.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "terngrad/core/json_writer.h"
#include "terngrad/core/phase_times.h"

namespace tg {

// One logged step: the losses of the last step, and the window's means since the previous log line.
struct StepMetrics {
  int64_t step = 0;
  double elapsed = 0;    // wall seconds since this run's first step began (checkpoint saves included)
  std::string exchange;  // the logged step's exchange: the scheme's name, or "fp32 warm-up" (--fp32_warmup_steps)
  double entropy_loss = 0, reg_loss = 0, total_loss = 0, learning_rate = 0;
  double examples_per_sec = 0, sec_per_batch = 0;
  uint64_t bytes_exchanged = 0, fp32_bytes = 0, payload_bytes = 0;  // per worker and step (byte model)
  uint64_t wire_bytes = 0;                              // moved into process 0 by its collectives in the last step
  uint64_t intra_node_bytes = 0, inter_node_bytes = 0;  // ... of which inside its node / between nodes
  double loss_scale = 1;                                // fp16's dynamic loss scale (1 without fp16)
  int64_t skipped_steps = 0;   // fp16 steps skipped for Inf/NaN gradients since the run started
  double host_syncs = 0;       // host synchronisations per step of process 0's first device (Backend::host_syncs), mean
  double device_launches = 0;  // device launches per step of process 0 (Backend::device_launches; 0 on the CPU), mean
                               // over the window's steps (the log step's own reads of losses and statistics excluded)
  PhaseTimes time;             // process 0, seconds per step, mean over the window
  std::vector<PhaseTimes> process_time;         // every process (when several), mean over the window
  std::vector<double> worker_forward_backward;  // process 0's workers, seconds per step
};

struct TrainResult;
struct QuantizationReport;

class MetricsWriter {
 public:
  explicit MetricsWriter(const std::string& path) : file_(path, "--metrics_jsonl") {}  // appends

  void step(const StepMetrics& m);
  // The run's steps, median examples/sec, bytes, final loss, parameter digest, and time: process 0's mean
  // seconds per step after the first window.
  void summary(const TrainResult& r);
  // A probe step of --quantization_error_every: {"quantization": true, "step": N, "relative_error": ...,
  // "nonzero_fraction": ..., "seconds": ..., "tensors": [{"name", "numel", "relative_error", "nonzero_fraction",
  // "scaler", "num_scalers"}, ...]} (readers of the step lines skip it by its "quantization" key).
  void quantization(const QuantizationReport& q);

 private:
  JsonLinesFile file_;
};

}  // namespace tg

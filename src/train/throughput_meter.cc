// Examples/sec over log windows; the run's median.
#include "terngrad/train/throughput_meter.h"

#include <algorithm>

#include "terngrad/core/error.h"

namespace tg {

ThroughputMeter::ThroughputMeter(int64_t examples_per_step, int64_t warmup_steps)
    : examples_per_step_(examples_per_step), warmup_steps_(warmup_steps) {
  TG_CHECK(examples_per_step > 0 && warmup_steps >= 0, "ThroughputMeter: {} examples per step, {} warm-up steps",
           examples_per_step, warmup_steps);
}

void ThroughputMeter::add_step(double seconds) {
  ++steps_;
  seconds_ += seconds;
  ++window_steps_;
  window_seconds_ += seconds;
}

ThroughputMeter::Window ThroughputMeter::close_window() {
  TG_CHECK(window_steps_ > 0, "ThroughputMeter: a window closed without a step");
  Window w;
  w.steps = window_steps_;
  w.sec_per_step = window_seconds_ / static_cast<double>(window_steps_);
  w.examples_per_sec = static_cast<double>(examples_per_step_) / w.sec_per_step;
  if (!closed_any_) first_window_rate_ = w.examples_per_sec;
  closed_any_ = true;
  if (warm()) warm_rates_.push_back(w.examples_per_sec);
  window_steps_ = 0;
  window_seconds_ = 0;
  return w;
}

double ThroughputMeter::median_examples_per_sec() const {
  if (!warm_rates_.empty()) {
    std::vector<double> sorted = warm_rates_;
    std::sort(sorted.begin(), sorted.end());
    const size_t n = sorted.size();  // the middle one, or the mean of the middle two
    return n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  }
  if (closed_any_) return first_window_rate_;
  if (steps_ > 0 && seconds_ > 0)
    return static_cast<double>(examples_per_step_) * static_cast<double>(steps_) / seconds_;
  return 0;
}

}  // namespace tg

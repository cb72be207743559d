// ThroughputMeter: a training run's speed in examples/sec, measured over log windows (the steps between two
// log lines). The first --log_every steps of a run are warm-up (memory first touched, caches and algorithm
// choices filled), so the run's rate is the median of the windows that end after them (the middle rate of an
// odd count, the mean of the middle two of an even one); a run too short for
// such a window gets its first window's rate, and one that stopped before any window closed the mean of the
// steps it timed.
#pragma once

#include <cstdint>
#include <vector>

namespace tg {

class ThroughputMeter {
 public:
  // examples_per_step: the global batch; warmup_steps: steps of a run that are warm-up (--log_every).
  ThroughputMeter(int64_t examples_per_step, int64_t warmup_steps);

  void add_step(double seconds);  // one more step of the current window
  // Whether the steps added so far have passed the warm-up (the last one added is timed for the run).
  bool warm() const { return steps_ > warmup_steps_; }

  struct Window {
    int64_t steps = 0;
    double sec_per_step = 0, examples_per_sec = 0;
  };
  // Closes the current window (at least one step) and returns its speed; a new window starts.
  Window close_window();

  double median_examples_per_sec() const;                          // the run's rate, as the header says
  double first_window_rate() const { return first_window_rate_; }  // 0 until a window closed

 private:
  int64_t examples_per_step_, warmup_steps_;
  int64_t steps_ = 0;   // added over the run
  double seconds_ = 0;  // of those steps
  int64_t window_steps_ = 0;
  double window_seconds_ = 0;
  bool closed_any_ = false;
  double first_window_rate_ = 0;
  std::vector<double> warm_rates_;  // of the windows that ended after the warm-up
};

}  // namespace tg

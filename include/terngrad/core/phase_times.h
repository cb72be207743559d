// PhaseTimes: where a worker's step time goes, split into fixed phases (seconds, double), and ScopedPhase, the
// allocation-free stopwatch that fills it and, while a Timeline records, puts the same interval on a track.
//
// Phases, in this order, with the names used in metrics JSON and TensorBoard (`named("time/")` gives
// "time/input_wait", ...):
//   input_wait        waiting for the input pipeline's batch
//   forward_backward  forward and backward passes
//   scalers           per-tensor scalers and their all-reduce MAX
//   encode            ternarize/convert and pack into the fused send buffer
//   comm_blocked      the compute thread blocked waiting for the network
//   comm_in_flight    collectives running on the communication thread, overlapped or not
//   decode            unpack and average the received codes
//   optimizer_ema     optimizer update and EMA of the weights
//   other             the rest of the step (bookkeeping, checks)
//   comm_cpu          CPU time (user + system) the collectives used, on whichever thread ran them: the
//                     protocol's copies and the kernel's network stack, which a process with no spare core pays
//                     out of its compute (the communication thread shares the compute thread's core)
// comm_in_flight and comm_cpu overlap the other phases (measured on another thread, or CPU rather than wall
// time), so they are not part of total_excluding_in_flight(), which adds up to the compute thread's wall time.
//
// A PhaseTimes is plain data and not thread-safe: give each thread (compute, communication) its own and add
// them up with += after the threads have met at the end of the step.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tg {

class Timeline;

enum class Phase : uint8_t {
  kInputWait,
  kForwardBackward,
  kScalers,
  kEncode,
  kCommBlocked,
  kCommInFlight,
  kDecode,
  kOptimizerEma,
  kOther,
  kCommCpu,
  kCount
};
inline constexpr int kPhaseCount = static_cast<int>(Phase::kCount);

// "input_wait", "forward_backward", ... (static strings; also the Timeline category of a phase's events).
const char* phase_name(Phase phase);

struct PhaseTimes {
  double seconds[kPhaseCount] = {};

  void add(Phase phase, double s);
  double get(Phase phase) const;
  PhaseTimes& operator+=(const PhaseTimes& other);
  PhaseTimes scaled(double factor) const;  // e.g. scaled(1.0 / steps) for the mean step of a logging window
  void clear();
  double total_excluding_in_flight() const;

  // The log-line form, in milliseconds:
  //   "in 0.1 fb 301 sc 2.0 en 5.1 comm 10/40 (cpu 3.0) de 4.2 opt 6.0 other 1.3 ms"
  // in = input_wait, fb = forward_backward, sc = scalers, en = encode, comm = comm_blocked/comm_in_flight
  // (comm_cpu), de = decode, opt = optimizer_ema, other = other. Values below 10 ms have one decimal, larger
  // ones none.
  std::string compact() const;
  // What compact()'s names mean, in one line (logged once at the start of a run).
  static const char* legend();

  // (prefix + phase_name, seconds) for every phase in order; the prefix is prepended verbatim ("time/").
  std::vector<std::pair<std::string, double>> named(const std::string& prefix) const;
};

// Measures one phase from construction to stop() (or destruction) with steady_clock and adds the elapsed time
// to `times`. With a timeline, the interval is also recorded on `track` under `event_name` (a string with
// static storage; default: the phase's name), attributed to the step that was current when the scope began,
// so a communication thread's scope that ends after the compute thread moved on still lands in its step.
// Allocates nothing; the track is checked at construction so the destructor cannot throw.
class ScopedPhase {
 public:
  using Clock = std::chrono::steady_clock;

  ScopedPhase(PhaseTimes& times, Phase phase, Timeline* timeline = nullptr, int track = -1,
              const char* event_name = nullptr);
  ~ScopedPhase() { stop(); }
  ScopedPhase(const ScopedPhase&) = delete;
  ScopedPhase& operator=(const ScopedPhase&) = delete;

  // A small argument for the timeline event ("bytes", "bucket"); arg_name must have static storage.
  void set_arg(int64_t value, const char* arg_name) {
    arg_ = value;
    arg_name_ = arg_name;
  }
  // Adds the elapsed time (once) and returns it in seconds; later calls return 0.
  double stop();

 private:
  PhaseTimes& times_;
  Timeline* timeline_;
  const char* event_name_;
  const char* arg_name_ = "arg";
  Clock::time_point begin_;
  int64_t step_ = 0;
  int64_t arg_ = -1;
  int track_;
  Phase phase_;
  bool running_ = true;
};

}  // namespace tg

// PhaseTimes arithmetic and formats; ScopedPhase.
#include "terngrad/core/phase_times.h"

#include <fmt/format.h>

#include "terngrad/core/error.h"
#include "terngrad/core/timeline.h"

namespace tg {

namespace {

int index_of(Phase phase) {
  const int i = static_cast<int>(phase);
  TG_CHECK(i >= 0 && i < kPhaseCount, "no phase {}", i);
  return i;
}

// Three significant figures are plenty to see where the time goes; the threshold is taken after rounding so
// 9.96 ms prints as "10", not "10.0".
std::string milliseconds(double seconds) {
  const double ms = seconds * 1e3;
  return ms < 9.95 ? fmt::format("{:.1f}", ms) : fmt::format("{:.0f}", ms);
}

}  // namespace

const char* phase_name(Phase phase) {
  static const char* const kNames[kPhaseCount] = {"input_wait",   "forward_backward", "scalers", "encode",
                                                  "comm_blocked", "comm_in_flight",   "decode",  "optimizer_ema",
                                                  "other",        "comm_cpu"};
  return kNames[index_of(phase)];
}

void PhaseTimes::add(Phase phase, double s) { seconds[index_of(phase)] += s; }

double PhaseTimes::get(Phase phase) const { return seconds[index_of(phase)]; }

PhaseTimes& PhaseTimes::operator+=(const PhaseTimes& other) {
  for (int i = 0; i < kPhaseCount; ++i) seconds[i] += other.seconds[i];
  return *this;
}

PhaseTimes PhaseTimes::scaled(double factor) const {
  PhaseTimes out;
  for (int i = 0; i < kPhaseCount; ++i) out.seconds[i] = seconds[i] * factor;
  return out;
}

void PhaseTimes::clear() {
  for (double& s : seconds) s = 0;
}

double PhaseTimes::total_excluding_in_flight() const {
  double total = 0;
  for (int i = 0; i < kPhaseCount; ++i)
    if (i != static_cast<int>(Phase::kCommInFlight) && i != static_cast<int>(Phase::kCommCpu)) total += seconds[i];
  return total;
}

std::string PhaseTimes::compact() const {
  auto ms = [&](Phase p) { return milliseconds(get(p)); };
  return fmt::format("in {} fb {} sc {} en {} comm {}/{} (cpu {}) de {} opt {} other {} ms", ms(Phase::kInputWait),
                     ms(Phase::kForwardBackward), ms(Phase::kScalers), ms(Phase::kEncode), ms(Phase::kCommBlocked),
                     ms(Phase::kCommInFlight), ms(Phase::kCommCpu), ms(Phase::kDecode), ms(Phase::kOptimizerEma),
                     ms(Phase::kOther));
}

const char* PhaseTimes::legend() {
  return "the window's mean ms per step: in = waiting for input, fb = forward + backward, sc = gradient scalers, "
         "en = encode, comm = communication blocked / in flight (cpu = the communication thread's CPU time), "
         "de = decode, opt = optimizer + moving averages, other = the rest";
}

std::vector<std::pair<std::string, double>> PhaseTimes::named(const std::string& prefix) const {
  std::vector<std::pair<std::string, double>> out;
  out.reserve(kPhaseCount);
  for (int i = 0; i < kPhaseCount; ++i) out.emplace_back(prefix + phase_name(static_cast<Phase>(i)), seconds[i]);
  return out;
}

ScopedPhase::ScopedPhase(PhaseTimes& times, Phase phase, Timeline* timeline, int track, const char* event_name)
    : times_(times),
      timeline_(timeline),
      event_name_(event_name ? event_name : phase_name(phase)),
      track_(track),
      phase_(phase) {
  if (timeline_) {
    TG_CHECK(track >= 0 && track < timeline_->num_tracks(), "timeline has no track {} ({} tracks)", track,
             timeline_->num_tracks());
    step_ = timeline_->current_step();
  }
  begin_ = Clock::now();  // last, so the checks above are not timed
}

double ScopedPhase::stop() {
  if (!running_) return 0;
  running_ = false;
  const Clock::time_point end = Clock::now();
  const double s = std::chrono::duration<double>(end - begin_).count();
  times_.add(phase_, s);
  if (timeline_ && timeline_->in_window(step_))
    timeline_->record_for_step(step_, track_, event_name_, begin_, end, arg_, arg_name_, phase_name(phase_));
  return s;
}

}  // namespace tg

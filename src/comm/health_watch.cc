// HealthWatch: the periodic probe of the communicators' own error state (see the header).
#include "terngrad/comm/health_watch.h"

#include <chrono>
#include <exception>
#include <utility>

#include "terngrad/core/error.h"

namespace tg {

HealthWatch::HealthWatch(std::vector<Probe> probes, double period_seconds,
                         std::function<void(const std::string&)> on_failure)
    : probes_(std::move(probes)), period_seconds_(period_seconds), on_failure_(std::move(on_failure)) {
  TG_CHECK(period_seconds > 0, "health watch: the period must be positive (got {} s)", period_seconds);
  TG_CHECK(static_cast<bool>(on_failure_), "health watch: no failure action");
  thread_ = std::thread([this] { run(); });
}

HealthWatch::~HealthWatch() { stop(); }

void HealthWatch::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void HealthWatch::run() {
  const auto period = std::chrono::duration<double>(period_seconds_);
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (wake_.wait_for(lock, period, [this] { return stopping_; })) return;
    }
    for (const Probe& probe : probes_) {
      std::string why;
      try {
        why = probe();
      } catch (const std::exception& e) {
        why = e.what();
        if (why.empty()) why = "a health probe failed";
      } catch (...) {
        why = "a health probe failed with an unknown exception";
      }
      if (why.empty()) continue;
      try {
        on_failure_(why);
      } catch (...) {  // the action is an abort: nothing more this thread could do
      }
      return;
    }
  }
}

}  // namespace tg

// StopSignals (stop_signals.h): the signals blocked in every thread and received by one watching thread.
#include "stop_signals.h"

#include <pthread.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>

namespace tg::apps {

namespace {
const char* signal_name(int sig) { return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal"; }
}  // namespace

StopSignals::StopSignals(const char* program, double grace_seconds) : program_(program), grace_(grace_seconds) {
  sigemptyset(&set_);
  sigaddset(&set_, SIGINT);
  sigaddset(&set_, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set_, &old_mask_);
  thread_ = std::thread([this] { watch(); });
}

StopSignals::~StopSignals() {
  done_ = true;
  thread_.join();
  pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);  // a signal still pending now gets the default action
}

void StopSignals::exit_now(int sig, const char* why) {
  std::fprintf(stderr,
               "%s: error: %s %s: exiting at once without a checkpoint of the step in progress (the last "
               "saved checkpoint is intact)\n",
               program_, why, signal_name(sig));
  std::fflush(stderr);
  ::_exit(128 + sig);
}

void StopSignals::watch() {
  using Clock = std::chrono::steady_clock;
  Clock::time_point deadline{}, first_at{};
  while (!done_) {
    const timespec poll{0, 50 * 1000 * 1000};
    const int sig = sigtimedwait(&set_, nullptr, &poll);
    if (done_) return;
    if (sig > 0) {
      if (first_ == 0) {
        first_ = sig;
        stop_ = true;
        first_at = Clock::now();
        deadline = first_at + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(grace_));
        continue;
      }
      // One request often arrives twice: `timeout` signals the command and then its process group, a
      // terminal's Ctrl-C reaches mpirun and its ranks, which mpirun then forwards it to. A second request is
      // one at least a second after the first.
      if (Clock::now() - first_at >= std::chrono::seconds(1)) exit_now(sig, "a second");
    }
    if (first_ != 0 && Clock::now() >= deadline) {
      char why[96];
      std::snprintf(why, sizeof why, "still running %.0f s after", grace_);
      exit_now(first_, why);
    }
  }
}

}  // namespace tg::apps

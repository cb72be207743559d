// Timeline: --timeline FILE --timeline_steps A-B. Records complete events (Chrome trace "ph":"X": name,
// category, track, start, duration, the step and one optional integer argument) of the steps A..B and writes
// them as Chrome trace JSON (Perfetto, chrome://tracing), one track per worker and per communication thread.
//
// Conventions:
// - Steps are 1-based, as the trainer logs them; the window is inclusive.
// - Times are microseconds (floating point) since this Timeline's construction (steady_clock). Each process
//   has its own zero, so processes line up only as well as their Timelines were constructed together (after
//   a barrier, say).
// - The process is Chrome's pid (`process_index`, shown as "process N"); each track is a tid, named by its
//   thread_name metadata and ordered as added.
// - Event names, categories and argument names are `const char*` that outlive the write (string literals, or the
//   layer names of the nets a trainer keeps): they are stored as pointers, so recording copies nothing. Track names are
//   copied at setup. Everything is JSON- escaped on output.
// - record() is thread-safe and allocates nothing: events go into storage reserved at construction, behind a
//   mutex. When it is full further events are counted, not stored, and the file says how many were dropped
//   (a process label shown in the viewer).
// - Several processes: each calls events_json() (a fragment: comma-separated objects, no brackets); one
//   gathers them and calls write_trace(), which writes {"traceEvents":[...],"displayTimeUnit":"ms"} through
//   AtomicFile, so a failure never leaves a partial file under the final name.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace tg {

struct TimelineSteps {
  int64_t first = 0;
  int64_t last = 0;
};

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kDefaultMaxEvents = size_t{1} << 16;  // 64 Ki events, about 4 MiB reserved

  // The path is only used by write(); check_path() it at flag validation on the process that writes.
  Timeline(const std::string& path, int64_t first_step, int64_t last_step, int process_index,
           size_t max_events = kDefaultMaxEvents);
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // Throws tg::Error naming the flag and the path when `path` is empty or a folder, or its folder does not
  // exist, is not a folder or is not writable.
  static void check_path(const std::string& path);
  // "A-B" or "A" with 1 <= A <= B; errors name --timeline_steps and the value.
  static TimelineSteps parse_steps(const std::string& value);

  // At setup: a track ("worker 0", "comm 0"); returns its id (Chrome's tid).
  int add_track(const std::string& name);
  int num_tracks() const { return num_tracks_.load(std::memory_order_acquire); }

  // The compute thread, at the start of each step (1-based).
  void set_step(int64_t step) { step_.store(step, std::memory_order_relaxed); }
  int64_t current_step() const { return step_.load(std::memory_order_relaxed); }
  bool in_window(int64_t step) const { return step >= first_ && step <= last_; }
  bool recording() const { return in_window(current_step()); }

  // Records [begin, end] on `track` for the current step, if it is in the window. Thread-safe. `arg` >= 0 is
  // written as args.<arg_name> (bytes, bucket index); the step is always in args.step.
  void record(int track, const char* name, Clock::time_point begin, Clock::time_point end, int64_t arg = -1,
              const char* arg_name = "arg", const char* category = "step") {
    record_for_step(current_step(), track, name, begin, end, arg, arg_name, category);
  }
  // The same for an explicit step: a communication thread finishing step N's collective after the compute
  // thread has called set_step(N + 1).
  void record_for_step(int64_t step, int track, const char* name, Clock::time_point begin, Clock::time_point end,
                       int64_t arg = -1, const char* arg_name = "arg", const char* category = "step");

  size_t num_events() const;
  uint64_t dropped_events() const { return dropped_.load(std::memory_order_relaxed); }
  const std::string& path() const { return path_; }
  int64_t first_step() const { return first_; }
  int64_t last_step() const { return last_; }

  // This process's metadata and events as a JSON array fragment (comma-separated objects, no brackets).
  std::string events_json() const;
  // Writes {"traceEvents":[fragments joined],"displayTimeUnit":"ms"} atomically; empty fragments are skipped.
  static void write_trace(const std::string& path, const std::vector<std::string>& fragments);
  // write_trace(path(), {events_json()}): a single process.
  void write() const;

 private:
  struct Event {
    const char* name;
    const char* category;
    const char* arg_name;
    int64_t step;
    int64_t arg;
    double ts_us;
    double dur_us;
    int track;
  };

  std::string path_;
  int64_t first_, last_;
  int process_;
  Clock::time_point zero_;
  std::atomic<int64_t> step_{0};
  std::atomic<uint64_t> dropped_{0};
  std::atomic<int> num_tracks_{0};  // lock-free track checks on the hot path
  mutable std::mutex mutex_;
  std::vector<std::string> tracks_;  // guarded by mutex_
  std::vector<Event> events_;        // guarded by mutex_; capacity fixed at construction
};

}  // namespace tg

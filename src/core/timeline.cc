// Timeline: the event store, flag checks and the Chrome trace JSON writer.
#include "terngrad/core/timeline.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>

#include "terngrad/core/atomic_file.h"
#include "terngrad/core/error.h"
#include "terngrad/core/json_writer.h"

namespace tg {

namespace fs = std::filesystem;

namespace {

// A whole decimal number and nothing else (no spaces; a '-' never reaches here, it splits the range).
bool parse_step(const std::string& text, int64_t& step) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, step);
  return !text.empty() && ec == std::errc() && ptr == end;
}

}  // namespace

Timeline::Timeline(const std::string& path, int64_t first_step, int64_t last_step, int process_index, size_t max_events)
    : path_(path), first_(first_step), last_(last_step), process_(process_index), zero_(Clock::now()) {
  TG_CHECK(first_step >= 1 && last_step >= first_step, "timeline window {}-{}: steps are 1-based, first <= last",
           first_step, last_step);
  TG_CHECK(process_index >= 0, "timeline process index {} < 0", process_index);
  TG_CHECK(max_events > 0, "timeline with room for no events");
  events_.reserve(max_events);
}

void Timeline::check_path(const std::string& path) {
  if (path.empty()) TG_THROW("--timeline: empty path");
  const fs::path file(path);
  const std::string dir = file.parent_path().empty() ? std::string(".") : file.parent_path().string();
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (!fs::exists(st)) TG_THROW("--timeline {}: folder {} does not exist", path, dir);
  if (!fs::is_directory(st)) TG_THROW("--timeline {}: {} is not a folder", path, dir);
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    TG_THROW("--timeline {}: folder {} is not writable: {}", path, dir, std::strerror(errno));
  if (fs::is_directory(fs::status(file, ec))) TG_THROW("--timeline {}: is a folder, expected a file name", path);
}

TimelineSteps Timeline::parse_steps(const std::string& value) {
  const auto dash = value.find('-');
  TimelineSteps steps;
  const bool ok = dash == std::string::npos ? parse_step(value, steps.first)
                                            : parse_step(value.substr(0, dash), steps.first) &&
                                                  parse_step(value.substr(dash + 1), steps.last);
  if (!ok) TG_THROW("--timeline_steps {}: expected a step A or a range A-B (e.g. 100-110)", value);
  if (dash == std::string::npos) steps.last = steps.first;
  if (steps.first < 1) TG_THROW("--timeline_steps {}: steps start at 1", value);
  if (steps.last < steps.first) TG_THROW("--timeline_steps {}: the range ends before it starts", value);
  return steps;
}

int Timeline::add_track(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  tracks_.push_back(name);
  const int id = static_cast<int>(tracks_.size()) - 1;
  num_tracks_.store(id + 1, std::memory_order_release);
  return id;
}

void Timeline::record_for_step(int64_t step, int track, const char* name, Clock::time_point begin,
                               Clock::time_point end, int64_t arg, const char* arg_name, const char* category) {
  if (!in_window(step)) return;
  TG_CHECK(track >= 0 && track < num_tracks(), "timeline has no track {} ({} tracks)", track, num_tracks());
  TG_CHECK(name != nullptr && category != nullptr && arg_name != nullptr, "timeline event without a name");
  const Event e{name,
                category,
                arg_name,
                step,
                arg,
                std::chrono::duration<double, std::micro>(begin - zero_).count(),
                std::chrono::duration<double, std::micro>(end - begin).count(),
                track};
  std::lock_guard<std::mutex> lock(mutex_);
  if (events_.size() == events_.capacity()) {  // never grow: recording must not allocate
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  events_.push_back(e);
}

size_t Timeline::num_events() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_.size();
}

std::string Timeline::events_json() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out;
  out.reserve(256 + 64 * tracks_.size() + 160 * events_.size());
  out += fmt::format(R"({{"name":"process_name","ph":"M","pid":{0},"tid":0,"args":{{"name":"process {0}"}}}},)"
                     R"({{"name":"process_sort_index","ph":"M","pid":{0},"tid":0,"args":{{"sort_index":{0}}}}})",
                     process_);
  const uint64_t dropped = dropped_.load(std::memory_order_relaxed);
  if (dropped > 0)
    out += fmt::format(
        R"(,{{"name":"process_labels","ph":"M","pid":{},"tid":0,"args":{{"labels":"timeline full: dropped {} events"}}}})",
        process_, dropped);
  for (size_t t = 0; t < tracks_.size(); ++t) {
    out += fmt::format(R"(,{{"name":"thread_name","ph":"M","pid":{},"tid":{},"args":{{"name":{}}}}})", process_, t,
                       json_string(tracks_[t]));
    out += fmt::format(R"(,{{"name":"thread_sort_index","ph":"M","pid":{},"tid":{},"args":{{"sort_index":{}}}}})",
                       process_, t, t);
  }
  for (const Event& e : events_) {
    out += R"(,{"name":)";
    append_json_string(out, e.name);
    out += R"(,"cat":)";
    append_json_string(out, e.category);
    out += fmt::format(R"(,"ph":"X","pid":{},"tid":{},"ts":{:.3f},"dur":{:.3f},"args":{{"step":{})", process_, e.track,
                       e.ts_us, e.dur_us, e.step);
    if (e.arg >= 0) {
      out += ',';
      append_json_string(out, e.arg_name);
      out += fmt::format(":{}", e.arg);
    }
    out += "}}";
  }
  return out;
}

void Timeline::write_trace(const std::string& path, const std::vector<std::string>& fragments) {
  check_path(path);  // a clear line for a folder that went away since the flags were checked
  std::string json = R"({"traceEvents":[)";
  bool first = true;
  for (const std::string& f : fragments) {
    if (f.empty()) continue;
    if (!first) json += ',';
    json += f;
    first = false;
  }
  json += R"(],"displayTimeUnit":"ms"})";
  json += '\n';
  AtomicFile file(path);
  file.write(json);
  file.commit();
}

void Timeline::write() const { write_trace(path_, {events_json()}); }

}  // namespace tg

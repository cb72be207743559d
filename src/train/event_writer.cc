// TensorBoard event files (scalar summaries).
#include "terngrad/train/event_writer.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "event.pb.h"
#include "terngrad/data/tfrecord.h"

namespace tg {

namespace {
double wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// `<dir>/events.out.tfevents.<seconds>.<host>`, dir created when missing.
std::string event_file_path(const std::string& dir) {
  std::filesystem::create_directories(dir);
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  return (std::filesystem::path(dir) /
          ("events.out.tfevents." + std::to_string(static_cast<int64_t>(wall_time())) + "." + host))
      .string();
}
}  // namespace

EventWriter::EventWriter(const std::string& dir) : file_(event_file_path(dir), "event file") {
  tensorflow::Event e;
  e.set_wall_time(wall_time());
  e.set_file_version("brain.Event:2");
  write_event(e.SerializeAsString());
}

void EventWriter::write_event(const std::string& bytes) {
  std::string record;
  append_tfrecord(&record, bytes.data(), bytes.size());
  file_.append(record);
}

void EventWriter::scalars(int64_t step, const std::vector<std::pair<std::string, float>>& values) {
  tensorflow::Event e;
  e.set_wall_time(wall_time());
  e.set_step(step);
  for (const auto& [tag, v] : values) {
    auto* value = e.mutable_summary()->add_value();
    value->set_tag(tag);
    value->set_simple_value(v);
  }
  write_event(e.SerializeAsString());
}

}  // namespace tg

// TensorBoard event files (scalar summaries).
#include "terngrad/train/event_writer.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "event.pb.h"
#include "terngrad/core/error.h"
#include "terngrad/data/tfrecord.h"

namespace tg {

namespace {
double wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}
}  // namespace

EventWriter::EventWriter(const std::string& dir) {
  std::filesystem::create_directories(dir);
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  path_ = (std::filesystem::path(dir) /
           ("events.out.tfevents." + std::to_string(static_cast<int64_t>(wall_time())) + "." + host))
              .string();
  file_ = std::fopen(path_.c_str(), "ab");
  TG_CHECK(file_ != nullptr, "cannot open event file {}: {}", path_, std::strerror(errno));
  tensorflow::Event e;
  e.set_wall_time(wall_time());
  e.set_file_version("brain.Event:2");
  write_event(e.SerializeAsString());
}

EventWriter::~EventWriter() {
  if (file_) std::fclose(file_);
}

void EventWriter::write_event(const std::string& bytes) {
  const RecordFraming f = frame_record(bytes.data(), bytes.size());
  bool ok = std::fwrite(f.header, 1, 12, file_) == 12 && std::fwrite(bytes.data(), 1, bytes.size(), file_) == bytes.size() &&
            std::fwrite(f.footer, 1, 4, file_) == 4 && std::fflush(file_) == 0;
  TG_CHECK(ok, "writing event file {} failed: {}", path_, std::strerror(errno));
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

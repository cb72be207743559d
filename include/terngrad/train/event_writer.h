// EventWriter: TensorBoard event files, `<dir>/events.out.tfevents.<seconds>.<host>`: TFRecord-framed
// tensorflow.Event protos (proto/event.proto), a file_version record first, then one Event of scalar summaries
// per call. Each event is flushed, so TensorBoard sees a running job and a crash loses nothing written.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace tg {

class EventWriter {
 public:
  explicit EventWriter(const std::string& dir);  // creates dir if missing; errors name the path
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  void scalars(int64_t step, const std::vector<std::pair<std::string, float>>& values);
  const std::string& path() const { return path_; }

 private:
  void write_event(const std::string& bytes);
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace tg

// EventWriter: TensorBoard event files, `<dir>/events.out.tfevents.<seconds>.<host>`: TFRecord-framed
// tensorflow.Event protos (proto/event.proto), a file_version record first, then one Event of scalar summaries
// per call. Each event is one append (core/atomic_file.h), so TensorBoard sees a running job and a crash loses
// nothing written.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "terngrad/core/atomic_file.h"

namespace tg {

class EventWriter {
 public:
  explicit EventWriter(const std::string& dir);  // creates dir if missing; errors name the path

  void scalars(int64_t step, const std::vector<std::pair<std::string, float>>& values);

 private:
  void write_event(const std::string& bytes);
  AppendFile file_;
};

}  // namespace tg

// StepArena: the memory a Net's per-step buffers live in (memory_plan.h). Nets that never run at the same time
// (the workers of one replica compute one after another on its thread and stream) share one arena, so a replica
// holds one activation area instead of one per worker. Each net states what it needs while it is set up
// (require); the memory is taken once, when a net first asks for it (data(), from Net::bind), at the largest
// size required; a net that needs more after that is an error.
#pragma once

#include <cstddef>

#include "terngrad/core/buffer.h"

namespace tg {

class StepArena {
 public:
  explicit StepArena(Allocator& allocator) : allocator_(allocator) {}
  StepArena(const StepArena&) = delete;
  StepArena& operator=(const StepArena&) = delete;

  void require(size_t bytes);
  void* data();                                  // allocates at the first call
  size_t bytes() const { return required_; }     // the largest requirement
  bool allocated() const { return allocated_; }  // data() has been called
  Device device() const { return allocator_.device(); }

 private:
  Allocator& allocator_;
  size_t required_ = 0;
  bool allocated_ = false;
  Buffer buffer_;
};

}  // namespace tg

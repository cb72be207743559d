// StepArena: deferred allocation at the largest size its nets required.
#include "terngrad/nn/step_arena.h"

#include "terngrad/core/error.h"

namespace tg {

void StepArena::require(size_t bytes) {
  TG_CHECK(!allocated_ || bytes <= required_,
           "step arena: a net needs {} bytes after the arena was allocated with {} (set up every net sharing it "
           "before binding any)",
           bytes, required_);
  if (bytes > required_) required_ = bytes;
}

void* StepArena::data() {
  if (!allocated_) {
    allocated_ = true;
    if (required_ > 0) buffer_ = Buffer(allocator_, required_);
  }
  return buffer_.data();
}

}  // namespace tg

// Buffer ownership and the 64-byte-aligned host allocator.
#include "terngrad/core/buffer.h"

#include <cstdlib>
#include <utility>

#include "terngrad/core/error.h"

namespace tg {

namespace {
class HostAllocator final : public Allocator {
 public:
  Device device() const override { return Device::cpu(); }
  void* allocate(size_t bytes) override {
    size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    TG_CHECK(p != nullptr, "out of host memory allocating {} bytes", bytes);
    return p;
  }
  void deallocate(void* ptr) noexcept override { std::free(ptr); }
};
}  // namespace

Allocator& host_allocator() {
  // Never destroyed: Buffers in other static objects (e.g. a backend's cached primitives) may be released
  // after this function's statics are gone at exit (UBSan: member call on a destroyed Allocator).
  static HostAllocator* alloc = new HostAllocator;
  return *alloc;
}

Buffer::Buffer(Allocator& alloc, size_t bytes) : alloc_(&alloc), bytes_(bytes) {
  ptr_ = bytes ? alloc.allocate(bytes) : nullptr;
  if (ptr_) alloc.in_use_.fetch_add(bytes_, std::memory_order_relaxed);
}

Buffer::~Buffer() { release(); }

Buffer::Buffer(Buffer&& o) noexcept
    : alloc_(std::exchange(o.alloc_, nullptr)),
      ptr_(std::exchange(o.ptr_, nullptr)),
      bytes_(std::exchange(o.bytes_, 0)) {}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    release();
    alloc_ = std::exchange(o.alloc_, nullptr);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

Device Buffer::device() const { return alloc_ ? alloc_->device() : Device::cpu(); }

void Buffer::release() noexcept {
  if (ptr_ && alloc_) {
    alloc_->in_use_.fetch_sub(bytes_, std::memory_order_relaxed);
    alloc_->deallocate(ptr_);
  }
  ptr_ = nullptr;
  bytes_ = 0;
}

}  // namespace tg

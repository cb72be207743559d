// Buffer: RAII, move-only bytes on one device, obtained from an Allocator. The core knows only the host
// allocator; the CUDA backend supplies its own (cudaMalloc) without the core knowing CUDA.
#pragma once

#include <atomic>
#include <cstddef>

#include "terngrad/core/device.h"

namespace tg {

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual Device device() const = 0;
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr) noexcept = 0;
  // The bytes of the live Buffers this allocator gave (Buffer keeps the count): what a run holds, area by area.
  size_t bytes_in_use() const { return in_use_.load(std::memory_order_relaxed); }

 private:
  friend class Buffer;
  std::atomic<size_t> in_use_{0};
};

// Host memory aligned to 64 bytes (a cache line; what AVX-512 and oneDNN like).
Allocator& host_allocator();

class Buffer {
 public:
  Buffer() = default;
  Buffer(Allocator& alloc, size_t bytes);
  ~Buffer();
  Buffer(Buffer&& o) noexcept;
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  Device device() const;
  bool empty() const { return ptr_ == nullptr; }

 private:
  void release() noexcept;
  Allocator* alloc_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace tg

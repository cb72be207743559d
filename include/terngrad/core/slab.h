// Slab: one Buffer holding many named tensors (a replica's parameters, its gradients, its optimizer state).
// Usage: declare every tensor with add(), then allocate() once; views stay valid for the slab's life.
// One slab means one allocation, one memset, one checksum and one contiguous range for fused collectives.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "terngrad/core/buffer.h"
#include "terngrad/core/tensor.h"

namespace tg {

class Slab {
 public:
  struct Entry {
    std::string name;
    Shape shape;
    DType dtype;
    size_t offset;  // bytes from the slab start, 64-byte aligned
  };

  Slab() = default;
  Slab(Slab&&) = default;
  Slab& operator=(Slab&&) = default;

  // Declares a tensor; returns its index. Names are unique.
  int add(const std::string& name, const Shape& shape, DType dtype = DType::kF32);
  void allocate(Allocator& alloc);

  bool allocated() const { return !buffer_.empty() || (bytes_ == 0 && frozen_); }
  int size() const { return static_cast<int>(entries_.size()); }
  const Entry& entry(int i) const { return entries_.at(i); }
  const std::vector<Entry>& entries() const { return entries_; }
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  int index_of(const std::string& name) const;  // throws, naming the tensor, when unknown

  Tensor view(int i) const;
  Tensor view(const std::string& name) const { return view(index_of(name)); }
  // The whole slab as one flat tensor (for memset, fused collectives, checksums).
  void* data() const { return buffer_.data(); }
  Tensor flat_bytes() const;  // (bytes) u8 view of the whole slab, padding included
  size_t bytes() const { return bytes_; }
  Device device() const { return buffer_.device(); }

 private:
  std::vector<Entry> entries_;
  std::unordered_map<std::string, int> index_;
  size_t bytes_ = 0;
  bool frozen_ = false;
  Buffer buffer_;
};

}  // namespace tg

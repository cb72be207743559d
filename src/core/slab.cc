// Slab layout (64-byte aligned entries) and named views.
#include "terngrad/core/slab.h"

namespace tg {

int Slab::add(const std::string& name, const Shape& shape, DType dtype) {
  TG_CHECK(!frozen_, "cannot add tensor '{}' to a slab that is already allocated", name);
  TG_CHECK(index_.count(name) == 0, "duplicate tensor name '{}'", name);
  size_t offset = (bytes_ + 63) / 64 * 64;
  entries_.push_back({name, shape, dtype, offset});
  bytes_ = offset + static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  index_[name] = static_cast<int>(entries_.size()) - 1;
  return static_cast<int>(entries_.size()) - 1;
}

void Slab::allocate(Allocator& alloc) {
  TG_CHECK(!frozen_, "slab allocated twice");
  frozen_ = true;
  bytes_ = (bytes_ + 63) / 64 * 64;
  buffer_ = Buffer(alloc, bytes_);
}

int Slab::index_of(const std::string& name) const {
  auto it = index_.find(name);
  TG_CHECK(it != index_.end(), "no tensor named '{}'", name);
  return it->second;
}

Tensor Slab::view(int i) const {
  TG_CHECK(frozen_, "view of a slab that is not allocated yet");
  const Entry& e = entries_.at(i);
  return Tensor(static_cast<char*>(buffer_.data()) + e.offset, e.shape, e.dtype, buffer_.device());
}

Tensor Slab::flat_bytes() const {
  return Tensor(buffer_.data(), Shape{static_cast<int64_t>(bytes_)}, DType::kU8, buffer_.device());
}

}  // namespace tg

// Tensor: a non-owning view (pointer, shape, dtype, device) over memory some Buffer owns. Copying a Tensor
// copies the view, never the data; there are no implicit host<->device copies (Backend::copy does that).
#pragma once

#include <cstdint>
#include <string>

#include "terngrad/core/device.h"
#include "terngrad/core/dtype.h"
#include "terngrad/core/error.h"
#include "terngrad/core/shape.h"

namespace tg {

class Tensor {
 public:
  Tensor() = default;
  Tensor(void* data, Shape shape, DType dtype, Device device)
      : data_(data), shape_(shape), dtype_(dtype), device_(device) {}

  void* raw() const { return data_; }
  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int64_t numel() const { return shape_.numel(); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool defined() const { return data_ != nullptr || (shape_.rank() > 0 && numel() == 0); }
  explicit operator bool() const { return data_ != nullptr; }

  // Typed pointer; checks that T matches the dtype.
  template <typename T>
  T* data() const {
    TG_CHECK(DTypeOf<T>::value == dtype_, "tensor of dtype {} accessed as {}", dtype_name(dtype_),
             dtype_name(DTypeOf<T>::value));
    return static_cast<T*>(data_);
  }

  // Same memory seen with another shape of the same element count.
  Tensor reshaped(const Shape& s) const;
  // Rows [begin, end) along dimension 0 (contiguous sub-view: a worker's slice of a batch).
  Tensor slice0(int64_t begin, int64_t end) const;

  std::string str() const;  // "f32(64, 28, 28, 1)@cpu"

 private:
  void* data_ = nullptr;
  Shape shape_;
  DType dtype_ = DType::kF32;
  Device device_;
};

}  // namespace tg

// Tensor views: reshape, slicing along the batch dimension, printing; dtype names.
#include "terngrad/core/tensor.h"

#include <fmt/format.h>

namespace tg {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBf16:
      return "bf16";
    case DType::kI8:
      return "i8";
    case DType::kU8:
      return "u8";
    case DType::kI32:
      return "i32";
  }
  return "?";
}

Tensor Tensor::reshaped(const Shape& s) const {
  TG_CHECK(s.numel() == numel(), "cannot reshape {} ({} elements) to {}", shape_.str(), numel(), s.str());
  return Tensor(data_, s, dtype_, device_);
}

Tensor Tensor::slice0(int64_t begin, int64_t end) const {
  TG_CHECK(shape_.rank() >= 1, "slice0 of a scalar tensor");
  TG_CHECK(0 <= begin && begin <= end && end <= shape_[0], "slice [{}, {}) out of range for {}", begin, end,
           shape_.str());
  Shape s = shape_;
  int64_t row = s[0] ? numel() / s[0] : 0;
  s[0] = end - begin;
  return Tensor(static_cast<char*>(data_) + begin * row * static_cast<int64_t>(dtype_size(dtype_)), s, dtype_, device_);
}

std::string Tensor::str() const { return fmt::format("{}{}@{}", dtype_name(dtype_), shape_.str(), device_.str()); }

}  // namespace tg

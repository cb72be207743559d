// ExchangeArena: one device allocation for all the buffers a scheme needs, planned before it is made: reserve()
// each piece (64-byte aligned), allocate() once (zeroed on the device, so every page is touched at setup, not in
// the first steps), then view() the pieces as tensors. fused_piece() cuts a range's piece out of such a buffer.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "terngrad/backend/backend.h"
#include "terngrad/core/buffer.h"
#include "terngrad/core/error.h"
#include "terngrad/core/tensor.h"

namespace tg {

class ExchangeArena {
 public:
  static constexpr size_t kAlign = 64;
  // Reserves `bytes`; returns the piece's offset.
  size_t reserve(size_t bytes) {
    const size_t at = total_;
    total_ += (bytes + kAlign - 1) / kAlign * kAlign;
    return at;
  }
  void allocate(Backend& be) {
    device_ = be.device();
    storage_ = Buffer(be.allocator(), std::max<size_t>(total_, kAlign));
    be.zero(Tensor(storage_.data(), Shape{static_cast<int64_t>(storage_.bytes())}, DType::kU8, device_));
  }
  // The piece at `at` as a rank-1 tensor of n elements of `dtype`.
  Tensor view(size_t at, int64_t n, DType dtype) const {
    return Tensor(static_cast<char*>(storage_.data()) + at, Shape{n}, dtype, device_);
  }
  size_t bytes() const { return total_; }

 private:
  size_t total_ = 0;
  Buffer storage_;
  Device device_ = Device::cpu();
};

// Elements [begin, end) of a fused buffer (any shape, seen flat) as a rank-1 view; `what` names it in errors.
inline Tensor fused_piece(const Tensor& buf, DType dtype, int64_t begin, int64_t end, const char* what) {
  TG_CHECK(buf.dtype() == dtype, "gradient exchange: {} {} is not {}", what, buf.str(), dtype_name(dtype));
  TG_CHECK(0 <= begin && begin <= end && end <= buf.numel(),
           "gradient exchange: {} {} has {} elements, the range needs [{}, {})", what, buf.str(), buf.numel(), begin,
           end);
  return Tensor(static_cast<char*>(buf.raw()) + begin * static_cast<int64_t>(dtype_size(dtype)), Shape{end - begin},
                dtype, buf.device());
}

}  // namespace tg

// The host communicators' element-wise reductions (see the header).
#include "src/comm/reduce_into.h"

#include <algorithm>

#include "terngrad/core/error.h"
#include "terngrad/core/half_convert.h"

namespace tg::comm_detail {

void reduce_into(uint8_t* dst_bytes, const uint8_t* src_bytes, size_t bytes, DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::kF32: {
      float* d = reinterpret_cast<float*>(dst_bytes);
      const float* s = reinterpret_cast<const float*>(src_bytes);
      const size_t n = bytes / sizeof(float);
      if (op == ReduceOp::kSum) {
        for (size_t i = 0; i < n; ++i) d[i] += s[i];
      } else {
        for (size_t i = 0; i < n; ++i) d[i] = (s[i] > d[i] || s[i] != s[i]) ? s[i] : d[i];
      }
      return;
    }
    case DType::kI32: {
      int32_t* d = reinterpret_cast<int32_t*>(dst_bytes);
      const int32_t* s = reinterpret_cast<const int32_t*>(src_bytes);
      const size_t n = bytes / sizeof(int32_t);
      if (op == ReduceOp::kSum) {
        for (size_t i = 0; i < n; ++i)
          d[i] = static_cast<int32_t>(static_cast<uint32_t>(d[i]) + static_cast<uint32_t>(s[i]));
      } else {
        for (size_t i = 0; i < n; ++i) d[i] = std::max(d[i], s[i]);
      }
      return;
    }
    case DType::kI8: {
      int8_t* d = reinterpret_cast<int8_t*>(dst_bytes);
      const int8_t* s = reinterpret_cast<const int8_t*>(src_bytes);
      if (op == ReduceOp::kSum) {
        for (size_t i = 0; i < bytes; ++i)
          d[i] = static_cast<int8_t>(static_cast<uint8_t>(d[i]) + static_cast<uint8_t>(s[i]));
      } else {
        for (size_t i = 0; i < bytes; ++i) d[i] = std::max(d[i], s[i]);
      }
      return;
    }
    case DType::kF16:
      if (op != ReduceOp::kSum) break;
      add_halves(reinterpret_cast<half_bits*>(dst_bytes), reinterpret_cast<const half_bits*>(src_bytes),
                 static_cast<int64_t>(bytes / sizeof(half_bits)));
      return;
    case DType::kBf16: {
      if (op != ReduceOp::kSum) break;
      bf16_bits* d = reinterpret_cast<bf16_bits*>(dst_bytes);
      const bf16_bits* s = reinterpret_cast<const bf16_bits*>(src_bytes);
      const size_t n = bytes / sizeof(bf16_bits);
      for (size_t i = 0; i < n; ++i) d[i] = float_to_bf16(bf16_to_float(d[i]) + bf16_to_float(s[i]));
      return;
    }
    default:
      break;
  }
  TG_THROW("no host reduction {} for {}", enum_name(op), dtype_name(dtype));
}

}  // namespace tg::comm_detail

// The compute dtypes in the CPU backend's own loops (relu, dropout, add, concat, batch norm, softmax_xent, cast,
// reductions): elements are read into f32 (to_f32), computed in f32 or double, and written back rounded to
// nearest even (from_f32). dispatch_compute calls a generic lambda with a null pointer of the storage type
// (float, bf16_bits, half_bits) of a tensor's dtype, so one loop body serves all three; map_elements is the
// element-wise loop over it.
#pragma once

#include <cstdint>
#include <type_traits>

#include "terngrad/core/dtype.h"
#include "terngrad/core/error.h"
#include "terngrad/core/parallel.h"
#include "terngrad/core/tensor.h"

namespace tg::cpu {

inline float to_f32(float v) { return v; }
inline float to_f32(bf16_bits v) { return bf16_to_float(v); }
inline float to_f32(half_bits v) { return half_to_float(v); }

template <typename T>
T from_f32(float v);
template <>
inline float from_f32<float>(float v) {
  return v;
}
template <>
inline bf16_bits from_f32<bf16_bits>(float v) {
  return float_to_bf16(v);
}
template <>
inline half_bits from_f32<half_bits>(float v) {
  return float_to_half(v);
}

// fn(static_cast<T*>(nullptr)) with T the storage type of `t` (f32, bf16 or f16); other dtypes throw naming
// `op`.
template <typename Fn>
decltype(auto) dispatch_compute(DType t, const char* op, Fn&& fn) {
  switch (t) {
    case DType::kF32:
      return fn(static_cast<float*>(nullptr));
    case DType::kBf16:
      return fn(static_cast<bf16_bits*>(nullptr));
    case DType::kF16:
      return fn(static_cast<half_bits*>(nullptr));
    default:
      break;
  }
  TG_THROW("{}: dtype {} is not a compute dtype (f32, f16, bf16)", op, dtype_name(t));
}

// out[i] = fn(i, in_0[i], ..., in_k[i]) with the inputs read into f32 and the result rounded once into out's
// dtype (all tensors share it, as the Backend front checked), over contiguous chunks on `threads` threads. out
// may be one of the inputs (element i is read before it is written; no restrict on out for that reason).
template <typename Fn, typename... In>
void map_elements(const char* op, int threads, int64_t grain, const Fn& fn, const Tensor& out, const In&... ins) {
  dispatch_compute(out.dtype(), op, [&](auto* type) {
    using T = std::remove_pointer_t<decltype(type)>;
    T* po = static_cast<T*>(out.raw());
    tg::parallel_for(
        out.numel(), grain,
        [&](int64_t s, int64_t e) {
          for (int64_t i = s; i < e; ++i) po[i] = from_f32<T>(fn(i, to_f32(static_cast<const T*>(ins.raw())[i])...));
        },
        threads);
  });
}

}  // namespace tg::cpu

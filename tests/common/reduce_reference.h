// The host reference of the communicators' reductions, for the communicator tests: combine(acc, x, op) as the
// communicators define it (written out again here, not the implementation's reduce_into), random inputs of
// every reducible dtype, and byte-level forms over a DType for tests that loop over every dtype/op.
//   f32 sum: acc + x; f32 max: x when x > acc or x is NaN; f16/bf16 sum: fp32 add rounded to the 16-bit type;
//   i8/i32 sum: wrap-around; i8/i32 max.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "terngrad/comm/communicator.h"
#include "terngrad/core/dtype.h"
#include "terngrad/core/half_convert.h"

namespace tg::testing {

template <typename T>
T combine(T acc, T x, ReduceOp op) {
  if constexpr (std::is_same_v<T, float>) {
    if (op == ReduceOp::kSum) return acc + x;
    return (x > acc || std::isnan(x)) ? x : acc;
  } else if constexpr (std::is_same_v<T, half_bits>) {
    return float_to_half(half_to_float(acc) + half_to_float(x));
  } else if constexpr (std::is_same_v<T, bf16_bits>) {
    return float_to_bf16(bf16_to_float(acc) + bf16_to_float(x));
  } else {  // int8_t, int32_t: sums wrap
    using U = std::make_unsigned_t<T>;
    if (op == ReduceOp::kSum) return static_cast<T>(static_cast<U>(acc) + static_cast<U>(x));
    return std::max(acc, x);
  }
}

// n values; float magnitudes spread over many binades, so that the order of a float sum changes its bits.
// Every third seed puts a NaN at index 5 of an f32 input (max: NaN wins). Integer sums overflow (and wrap).
template <typename T>
std::vector<T> random_input(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> d(-1.0, 1.0);
  std::vector<T> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const double x = d(rng) * std::pow(2.0, static_cast<double>(i % 23) - 8);
    if constexpr (std::is_same_v<T, float>)
      v[i] = static_cast<float>(x);
    else if constexpr (std::is_same_v<T, half_bits>)
      v[i] = float_to_half(static_cast<float>(x));
    else if constexpr (std::is_same_v<T, bf16_bits>)
      v[i] = float_to_bf16(static_cast<float>(x));
    else
      v[i] = static_cast<T>(std::lround(d(rng) * std::numeric_limits<T>::max()));
  }
  if constexpr (std::is_same_v<T, float>)
    if (n > 5 && seed % 3 == 0) v[5] = std::numeric_limits<float>::quiet_NaN();
  return v;
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// ---- over a DType (bytes) ----

struct ReduceCase {
  DType dtype;
  ReduceOp op;
};

// Every combination reduce_supported() lists, plus bf16 sum with `bf16`.
inline std::vector<ReduceCase> reduce_cases(bool bf16) {
  std::vector<ReduceCase> cases = {{DType::kF32, ReduceOp::kSum}, {DType::kF32, ReduceOp::kMax},
                                   {DType::kF16, ReduceOp::kSum}, {DType::kI8, ReduceOp::kSum},
                                   {DType::kI8, ReduceOp::kMax},  {DType::kI32, ReduceOp::kSum},
                                   {DType::kI32, ReduceOp::kMax}};
  if (bf16) cases.push_back({DType::kBf16, ReduceOp::kSum});
  return cases;
}

// Calls f(T{}) with the element type of dtype.
template <typename F>
void with_type(DType dtype, F f) {
  switch (dtype) {
    case DType::kF32:
      return f(float{});
    case DType::kF16:
      return f(half_bits{});
    case DType::kBf16:
      return f(bf16_bits{});
    case DType::kI8:
      return f(int8_t{});
    case DType::kI32:
      return f(int32_t{});
    default:
      return;
  }
}

inline std::vector<uint8_t> random_input_bytes(DType dtype, int64_t n, uint32_t seed) {
  std::vector<uint8_t> out;
  with_type(dtype, [&](auto tag) {
    const auto v = random_input<decltype(tag)>(n, seed);
    out.resize(v.size() * sizeof(tag));
    if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  });
  return out;
}

// acc[i] = combine(acc[i], x[i], op) over n elements of dtype.
inline void combine_bytes(uint8_t* acc, const uint8_t* x, int64_t n, DType dtype, ReduceOp op) {
  with_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t i = 0; i < n; ++i) {
      T a, b;
      std::memcpy(&a, acc + i * sizeof(T), sizeof(T));
      std::memcpy(&b, x + i * sizeof(T), sizeof(T));
      a = combine(a, b, op);
      std::memcpy(acc + i * sizeof(T), &a, sizeof(T));
    }
  });
}

// inputs[order[0]] combined with inputs[order[1]], ... (elements [first, first + n) of each).
inline std::vector<uint8_t> reduce_in_order(const std::vector<std::vector<uint8_t>>& inputs,
                                            const std::vector<int>& order, int64_t first, int64_t n, DType dtype,
                                            ReduceOp op) {
  const size_t elem = dtype_size(dtype);
  std::vector<uint8_t> acc(inputs[order[0]].begin() + first * elem, inputs[order[0]].begin() + (first + n) * elem);
  for (size_t k = 1; k < order.size(); ++k)
    combine_bytes(acc.data(), inputs[order[k]].data() + first * elem, n, dtype, op);
  return acc;
}

}  // namespace tg::testing

// CPU loops of the ternary operations (scaler, encode, unpack, decode) over the shared host/device math.
#include "terngrad/compress/ternary_codec.h"

#include <algorithm>
#include <atomic>
#include <cmath>

#include "terngrad/core/thread_pool.h"
#include "terngrad/math/ternary_math.h"

namespace tg {

TensorStats tensor_stats_cpu(const float* g, int64_t n) {
  TensorStats st;
  if (n <= 0) return st;
  double sum = 0.0;
  float max_abs = 0.f;
  bool any_nan = false;
  for (int64_t i = 0; i < n; ++i) {
    sum += g[i];
    float a = std::fabs(g[i]);
    if (a > max_abs) max_abs = a;
    any_nan |= std::isnan(a);  // comparisons with NaN are false: record it explicitly
  }
  if (any_nan) max_abs = std::nanf("");
  const double mean = sum / static_cast<double>(n);
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    double d = static_cast<double>(g[i]) - mean;
    ss += d * d;
  }
  st.mean = mean;
  st.sigma = std::sqrt(ss / static_cast<double>(n));
  st.max_abs = max_abs;
  return st;
}

float ternary_scaler_cpu(const float* g, int64_t n, float clip_factor) {
  if (n <= 0) return 0.f;
  TensorStats st = tensor_stats_cpu(g, n);
  if (std::isnan(st.max_abs) || std::isnan(st.sigma)) return std::nanf("");
  return ternary_scaler(static_cast<float>(st.sigma), st.max_abs, clip_factor);
}

static int64_t encode_range(const float* g, int64_t n, float s, PhiloxKey key, uint32_t step, uint32_t tensor,
                            uint8_t* packed, int64_t b0, int64_t b1) {
  int64_t nonzero = 0;
  for (int64_t b = b0; b < b1; ++b) {
    uint8_t byte = ternarize_pack_byte(g, n, b, s, key, step, tensor);
    packed[b] = byte;
    // Each non-zero field has exactly one bit set (01 or 10).
    nonzero += __builtin_popcount(byte);
  }
  return nonzero;
}

int64_t ternary_encode_cpu(const float* g, int64_t n, float s, PhiloxKey key, uint32_t step, uint32_t tensor,
                           uint8_t* packed, ThreadPool* pool) {
  const int64_t nbytes = (n + 3) / 4;
  int64_t nonzero = 0;
  if (pool && pool->num_threads() > 1 && nbytes >= 4096) {
    std::atomic<int64_t> total{0};
    pool->parallel_for(
        nbytes, [&](int64_t b0, int64_t b1) { total += encode_range(g, n, s, key, step, tensor, packed, b0, b1); },
        4096);
    nonzero = total.load();
  } else {
    nonzero = encode_range(g, n, s, key, step, tensor, packed, 0, nbytes);
  }
  return n - nonzero;
}

void ternary_unpack_cpu(const uint8_t* packed, int64_t n, int8_t* codes) {
  for (int64_t i = 0; i < n; ++i) codes[i] = static_cast<int8_t>(unpack_ternary(packed, i));
}

void ternary_decode_sums_cpu(const int8_t* code_sums, int64_t n, float s, int num_workers, float* g) {
  for (int64_t i = 0; i < n; ++i) g[i] = ternary_decode_value(s, code_sums[i], num_workers);
}

void ternary_decode_gathered_cpu(const uint8_t* gathered, int64_t stride, int num_workers, int64_t n, float s,
                                 float* g) {
  for (int64_t i = 0; i < n; ++i) {
    int sum = 0;
    for (int w = 0; w < num_workers; ++w) sum += unpack_ternary(gathered + w * stride, i);
    g[i] = ternary_decode_value(s, sum, num_workers);
  }
}

}  // namespace tg

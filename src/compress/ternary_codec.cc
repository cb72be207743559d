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

namespace {
// Philox lanes side by side: 16 consecutive bytes (64 elements) of a tensor, each byte's Philox block in one
// lane of four word arrays, so the rounds are plain loops over lanes that the compiler vectorizes (vpmuludq
// on AVX2/AVX-512; target_clones picks the best the CPU has at run time, the default build keeps running on
// any x86-64). Same integer arithmetic, same float compare: the same bits as ternarize_pack_byte.
constexpr int kLanes = 16;

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TG_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TG_VECTOR_CLONES
#endif

// Encodes bytes [b0, b0 + kLanes), all of whose elements lie inside the tensor; returns the non-zero codes.
// The 32-bit Philox words live in 64-bit lanes so the 32x32->64 multiplies map onto vpmuludq; the uniforms
// are then laid out in element order so the compare-and-pack loop reads the gradient contiguously.
TG_VECTOR_CLONES int64_t encode_16_bytes(const float* g, int64_t b0, float s, PhiloxKey key, uint32_t step,
                                         uint32_t tensor, uint8_t* packed) {
  if (!(s > 0.f)) {  // s = 0 (or NaN): every code is 0
    for (int l = 0; l < kLanes; ++l) packed[b0 + l] = 0;
    return 0;
  }
  uint64_t w0[kLanes], w1[kLanes], w2[kLanes], w3[kLanes];
  for (int l = 0; l < kLanes; ++l) {
    w0[l] = static_cast<uint32_t>(b0 + l);
    w1[l] = step;
    w2[l] = tensor;
    w3[l] = kTernaryPurpose;
  }
  uint64_t k0 = key.k[0], k1 = key.k[1];
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k0 = static_cast<uint32_t>(k0 + philox_detail::kW0);
      k1 = static_cast<uint32_t>(k1 + philox_detail::kW1);
    }
    for (int l = 0; l < kLanes; ++l) {
      const uint64_t p0 = uint64_t{philox_detail::kM0} * (w0[l] & 0xffffffffu);
      const uint64_t p1 = uint64_t{philox_detail::kM1} * (w2[l] & 0xffffffffu);
      const uint64_t n0 = (p1 >> 32) ^ w1[l] ^ k0;
      const uint64_t n2 = (p0 >> 32) ^ w3[l] ^ k1;
      w1[l] = p1 & 0xffffffffu;
      w3[l] = p0 & 0xffffffffu;
      w0[l] = n0;
      w2[l] = n2;
    }
  }
  float u[4 * kLanes];  // element 4l + k draws word k of lane l, as in ternarize_pack_byte
  for (int l = 0; l < kLanes; ++l) {
    u[4 * l + 0] = uniform_from_bits(static_cast<uint32_t>(w0[l]));
    u[4 * l + 1] = uniform_from_bits(static_cast<uint32_t>(w1[l]));
    u[4 * l + 2] = uniform_from_bits(static_cast<uint32_t>(w2[l]));
    u[4 * l + 3] = uniform_from_bits(static_cast<uint32_t>(w3[l]));
  }
  const float* x = g + b0 * 4;  // (kLanes * 4) elements
  uint32_t field[4 * kLanes];
  int32_t nonzero = 0;
  for (int e = 0; e < 4 * kLanes; ++e) {
    const float v = x[e];
    const uint32_t keep = u[e] * s < fabsf(v);  // ternarize_with_uniform's rule; NaN compares false
    field[e] = keep << (v > 0.f ? 0 : 1);       // 01 for +1, 10 for -1, 00 for 0
    nonzero += static_cast<int32_t>(keep);
  }
  for (int l = 0; l < kLanes; ++l)
    packed[b0 + l] = static_cast<uint8_t>(field[4 * l] | (field[4 * l + 1] << 2) | (field[4 * l + 2] << 4) |
                                          (field[4 * l + 3] << 6));
  return nonzero;
}

int64_t encode_range(const float* g, int64_t n, float s, PhiloxKey key, uint32_t step, uint32_t tensor,
                     uint8_t* packed, int64_t b0, int64_t b1) {
  int64_t nonzero = 0;
  // Bytes whose four elements all exist; the lanes assume the counter's high words of a tensor below 2^34
  // elements (ternarize_pack_byte folds element >> 34 into the tensor word).
  const int64_t full_bytes = n < (int64_t{1} << 34) ? n / 4 : 0;
  int64_t b = b0;
  for (; b + kLanes <= std::min(b1, full_bytes); b += kLanes)
    nonzero += encode_16_bytes(g, b, s, key, step, tensor, packed);
  for (; b < b1; ++b) {
    uint8_t byte = ternarize_pack_byte(g, n, b, s, key, step, tensor);
    packed[b] = byte;
    for (int k = 0; k < 4; ++k) nonzero += unpack_ternary_field(byte, k) != 0;
  }
  return nonzero;
}
}  // namespace

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

// Byte by byte: the four fields of every worker's byte are summed, then scaled (the per-element unpack
// recomputed the byte index and shift for every element and worker).
TG_VECTOR_CLONES void ternary_decode_gathered_cpu(const uint8_t* gathered, int64_t stride, int num_workers,
                                                  int64_t n, float s, float* g) {
  const int64_t full_bytes = n / 4;
  for (int64_t b = 0; b < full_bytes; ++b) {
    int sum[4] = {0, 0, 0, 0};
    for (int w = 0; w < num_workers; ++w) {
      const uint32_t byte = gathered[w * stride + b];
      for (int k = 0; k < 4; ++k) sum[k] += ternary_code_of_field(byte >> (2 * k));
    }
    for (int k = 0; k < 4; ++k) g[4 * b + k] = ternary_decode_value(s, sum[k], num_workers);
  }
  for (int64_t i = full_bytes * 4; i < n; ++i) {
    int sum = 0;
    for (int w = 0; w < num_workers; ++w) sum += unpack_ternary(gathered + w * stride, i);
    g[i] = ternary_decode_value(s, sum, num_workers);
  }
}

}  // namespace tg

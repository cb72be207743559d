// CPU loops of the fp16/fp32 codings (the tensors left out of ternarization): sums of the workers' gradients in
// worker order (fp16-rounded per worker for the fp16 coding), averages, and the decodes of all-reduced sums, on
// the compute team (terngrad/core/parallel.h). Declared in terngrad/backend/ternary_codec.h beside the ternary
// loops (ternary_codec.cc); the CPU backend's codec ops (cpu_codec.cc) call them.
#include <algorithm>
#include <cstring>

#include "terngrad/backend/ternary_codec.h"
#include "terngrad/core/error.h"
#include "terngrad/core/half_convert.h"
#include "terngrad/core/parallel.h"

namespace tg {

namespace {
constexpr int64_t kFloatGrain = 32768;  // elements below which a loop stays on one thread
constexpr int64_t kHalfChunk = 2048;    // fp32 accumulator of the fp16 sums, on the stack

// acc[0, m) = sum over the workers of their fp16-rounded elements [k, k + m), in fp32, in worker order.
inline void sum_rounded_to_half(const float* const* xs, int count, int64_t k, int64_t m, float* acc) {
  std::fill(acc, acc + m, 0.f);
  for (int w = 0; w < count; ++w) add_rounded_to_half(xs[w] + k, acc, m);
}
}  // namespace

void encode_f16_sum_cpu(const float* const* xs, int count, int64_t n, half_bits* out) {
  TG_CHECK(count >= 1, "fp16 sum of {} workers", count);
  parallel_for(n, kFloatGrain, [&](int64_t b, int64_t e) {
    float acc[kHalfChunk];
    for (int64_t k = b; k < e; k += kHalfChunk) {
      const int64_t m = std::min(kHalfChunk, e - k);
      sum_rounded_to_half(xs, count, k, m, acc);
      floats_to_halves(acc, out + k, m);
    }
  });
}

void encode_f32_sum_cpu(const float* const* xs, int count, int64_t n, float* out) {
  TG_CHECK(count >= 1, "fp32 sum of {} workers", count);
  parallel_for(n, kFloatGrain, [&](int64_t b, int64_t e) {
    const float* first = xs[0];
    if (first != out)
      for (int64_t k = b; k < e; ++k) out[k] = first[k];
    for (int w = 1; w < count; ++w) {  // worker order, as a reduction in rank order
      const float* g = xs[w];
      for (int64_t k = b; k < e; ++k) out[k] += g[k];
    }
  });
}

void average_f16_cpu(const float* const* xs, int count, int64_t n, float* out) {
  TG_CHECK(count >= 1, "fp16 average of {} workers", count);
  const float nf = static_cast<float>(count);
  parallel_for(n, kFloatGrain, [&](int64_t b, int64_t e) {
    float acc[kHalfChunk];
    half_bits h[kHalfChunk];
    for (int64_t k = b; k < e; k += kHalfChunk) {
      const int64_t m = std::min(kHalfChunk, e - k);
      sum_rounded_to_half(xs, count, k, m, acc);
      floats_to_halves(acc, h, m);  // the fp16 sum, as it would have travelled
      halves_to_floats(h, out + k, m);
      for (int64_t j = 0; j < m; ++j) out[k + j] /= nf;
    }
  });
}

void average_f32_cpu(const float* const* xs, int count, int64_t n, float* out) {
  TG_CHECK(count >= 1, "fp32 average of {} workers", count);
  if (count == 1) {  // g / 1 is g
    if (xs[0] != out && n > 0) std::memmove(out, xs[0], static_cast<size_t>(n) * sizeof(float));
    return;
  }
  const float nf = static_cast<float>(count);
  parallel_for(n, kFloatGrain, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      float acc = xs[0][k];
      for (int w = 1; w < count; ++w) acc += xs[w][k];
      out[k] = acc / nf;
    }
  });
}

void decode_f16_sum_cpu(const half_bits* sum, int64_t n, int num_workers, float* g) {
  TG_CHECK(num_workers >= 1, "fp16 decode: {} workers", num_workers);
  const float nf = static_cast<float>(num_workers);
  parallel_for(n, kFloatGrain, [&](int64_t b, int64_t e) {
    halves_to_floats(sum + b, g + b, e - b);
    for (int64_t k = b; k < e; ++k) g[k] /= nf;
  });
}

void decode_f32_sum_cpu(const float* sum, int64_t n, int num_workers, float* g) {
  TG_CHECK(num_workers >= 1, "fp32 decode: {} workers", num_workers);
  const float nf = static_cast<float>(num_workers);
  parallel_for(n, kFloatGrain, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) g[k] = sum[k] / nf;
  });
}

}  // namespace tg

// CPU implementation of the per-tensor ternary operations (plain loops over host memory), built on the
// shared math of terngrad/math/ternary_math.h; kernels/ternary_kernels.cu has the same operations for CUDA
// (terngrad/compress/ternary_cuda.h). The packed format is documented in ternary_math.h.
#pragma once

#include <cstdint>

#include "terngrad/core/philox.h"

namespace tg {

class ThreadPool;

// Statistics of one tensor, accumulated in double: mean, population std (mean subtracted, two passes) and
// max |g|. NaN/Inf in g give a non-finite sigma or max_abs.
struct TensorStats {
  double mean = 0.0;
  double sigma = 0.0;
  float max_abs = 0.f;
};
TensorStats tensor_stats_cpu(const float* g, int64_t n);

// s = ternary_scaler(sigma, max|g|, clip_factor) of one tensor (0 for an empty tensor).
float ternary_scaler_cpu(const float* g, int64_t n, float clip_factor);

// g (n) -> packed (ceil(n/4) bytes), codes drawn from key with counter (step, tensor). With a pool the
// bytes are split over its threads (same bits at any thread count). Returns the number of zero codes.
int64_t ternary_encode_cpu(const float* g, int64_t n, float s, PhiloxKey key, uint32_t step, uint32_t tensor,
                           uint8_t* packed, ThreadPool* pool = nullptr);

// packed (ceil(n/4) bytes) -> codes (n) in {-1, 0, +1}.
void ternary_unpack_cpu(const uint8_t* packed, int64_t n, int8_t* codes);

// g[i] = s * code_sums[i] / num_workers for i < n.
void ternary_decode_sums_cpu(const int8_t* code_sums, int64_t n, float s, int num_workers, float* g);

// g[i] = s * sum_w code_w[i] / num_workers where worker w's packed codes start at gathered + w * stride.
void ternary_decode_gathered_cpu(const uint8_t* gathered, int64_t stride, int num_workers, int64_t n, float s,
                                 float* g);

}  // namespace tg

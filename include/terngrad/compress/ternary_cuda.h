// Launchers of the CUDA ternary kernels (kernels/ternary_kernels.cu): the same operations as
// terngrad/compress/ternary_codec.h, over device pointers, on the given stream (a cudaStream_t passed as
// void* so this header needs no CUDA headers). All launches are asynchronous and checked
// (TG_CUDA_CHECK_LAUNCH of terngrad/backend/cuda_check.h). Built only when the CUDA backend is
// (TG_HAVE_CUDA).
#pragma once

#include <cstddef>
#include <cstdint>

#include "terngrad/core/philox.h"

namespace tg {

// Bytes of device workspace ternary_scaler_cuda needs.
size_t ternary_scaler_workspace_bytes_cuda();

// *scaler (device float) = ternary_scaler_from_stats(sigma, max|g|, clip_factor) of g (n elements, device),
// the CPU's formula (ternary_math.h): one pass accumulating sum and sum of squares in double and max|g|
// (NaN-propagating), then sigma = sqrt(max(0, sumsq/n - mean^2)); NaN for a non-finite g, 0 for n = 0. Equal
// to ternary_scaler_cpu up to the order of the double additions. workspace: ternary_scaler_workspace_bytes_cuda.
void ternary_scaler_cuda(const float* g, int64_t n, float clip_factor, float* scaler, void* workspace, void* stream);

// packed (ceil(n/4) bytes, device) = codes of g drawn with *scaler (device), key and counter (step, tensor)
// (ternarize_one: 16-bit uniforms, 8 elements per Philox block): bit-identical to ternary_encode_cpu.
void ternary_encode_cuda(const float* g, int64_t n, const float* scaler, PhiloxKey key, uint32_t step, uint32_t tensor,
                         uint8_t* packed, void* stream);

// codes (n) = unpacked codes of packed.
void ternary_unpack_cuda(const uint8_t* packed, int64_t n, int8_t* codes, void* stream);

// code_sums[i] = sum over workers of their codes of element i, worker w's packed codes at packed + w * stride
// (1 <= num_workers <= 127, else an Error): as ternary_sum_codes_cpu.
void ternary_sum_codes_cuda(const uint8_t* packed, int64_t stride, int num_workers, int64_t n, int8_t* code_sums,
                            void* stream);

// g[i] = *scaler * code_sums[i] / num_workers.
void ternary_decode_sums_cuda(const int8_t* code_sums, int64_t n, const float* scaler, int num_workers, float* g,
                              void* stream);

// g[i] = *scaler * sum_w code_w[i] / num_workers, worker w's packed codes at gathered + w * stride.
void ternary_decode_gathered_cuda(const uint8_t* gathered, int64_t stride, int num_workers, int64_t n,
                                  const float* scaler, float* g, void* stream);

}  // namespace tg

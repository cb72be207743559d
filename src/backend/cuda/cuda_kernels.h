// Host-side launchers of the CUDA backend's kernels (kernels/*.cu). Each enqueues its kernel(s) on `stream`,
// checks the launch (TG_CUDA_CHECK_LAUNCH) and returns without synchronizing. Pointers are device pointers;
// n == 0 launches nothing. Tensors are row-major: (rows, cols) means cols is the fastest dimension.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "terngrad/backend/op_desc.h"
#include "terngrad/core/philox.h"

namespace tg::cuda_kernels {

// ---- kernels/elementwise_kernels.cu --------------------------------------------------------------------
void fill_f32(float* p, int64_t n, float value, cudaStream_t stream);
void add_f32(const float* a, const float* b, float* out, int64_t n, cudaStream_t stream);
void axpy_f32(float alpha, const float* x, float* y, int64_t n, cudaStream_t stream);
void scale_f32(float alpha, float* x, int64_t n, cudaStream_t stream);
void relu_forward_f32(const float* x, float* y, int64_t n, cudaStream_t stream);
void relu_backward_f32(const float* y, const float* dy, float* dx, int64_t n, cudaStream_t stream);
// mask[i] = philox_uniform(key, i, step, salt, 0) < keep_prob; y[i] = mask ? x[i] * (1/keep_prob) : 0
void dropout_forward_f32(const float* x, float* y, uint8_t* mask, int64_t n, float keep_prob, PhiloxKey key,
                         uint32_t step, uint32_t salt, cudaStream_t stream);
void dropout_backward_f32(const float* dy, const uint8_t* mask, float keep_prob, float* dx, int64_t n,
                          cudaStream_t stream);
// y (rows, cols) += b (cols) broadcast over rows
void add_bias_rows_f32(float* y, const float* b, int64_t rows, int64_t cols, cudaStream_t stream);

// ---- kernels/layout_kernels.cu --------------------------------------------------------------------------
// dst (cols, rows) = transpose of src (rows, cols)
void transpose_f32(const float* src, float* dst, int64_t rows, int64_t cols, cudaStream_t stream);
// xp (N, H+pt+pb, W+pl+pr, C) = x (N, H, W, C) surrounded by zeros
void pad_nhwc_f32(const float* x, float* xp, int64_t n, int64_t h, int64_t w, int64_t c, int64_t pt, int64_t pb,
                  int64_t pl, int64_t pr, cudaStream_t stream);
// x (N, H, W, C) = the interior of xp (N, H+pt+pb, W+pl+pr, C) (the adjoint of pad for gradients)
void crop_nhwc_f32(const float* xp, float* x, int64_t n, int64_t h, int64_t w, int64_t c, int64_t pt, int64_t pb,
                   int64_t pl, int64_t pr, cudaStream_t stream);

// ---- kernels/reduce_kernels.cu ---------------------------------------------------------------------------
// Deterministic two-pass reductions (fixed grid, fixed tree): the same input gives the same bits.
constexpr int kReduceMaxBlocks = 1024;
// *result = sum x[i] (or x[i]^2 when squares), accumulated in double; partials holds kReduceMaxBlocks.
void reduce_sum_f64(const float* x, int64_t n, bool squares, double* partials, double* result,
                    cudaStream_t stream);
// *result = max |x[i]| (NaN propagates), as a double holding the float; partials as above.
void reduce_max_abs(const float* x, int64_t n, double* partials, double* result, cudaStream_t stream);
// out (cols) = sum over rows of x (rows, cols): slabs of rows summed in double by a 2-D grid (a fixed tree
// per slab), then the slabs in order; the grid depends only on (rows, cols), so the bits are deterministic.
// scratch: column_sum_scratch_bytes(rows, cols) bytes of device memory.
size_t column_sum_scratch_bytes(int64_t rows, int64_t cols);
void column_sum_f32(const float* x, int64_t rows, int64_t cols, float* out, void* scratch, cudaStream_t stream);

// ---- kernels/batch_norm_kernels.cu -------------------------------------------------------------------------
// The CPU backend's batch norm loops (same chunks, same order, same bits) over x (rows, C); gamma may be null
// (1), beta is required; backward's dx, dgamma, dbeta may each be null. scratch: batch_norm_scratch_bytes.
size_t batch_norm_scratch_bytes(int64_t rows, int64_t c);
void batch_norm_forward_training_f32(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                                     float* var, int64_t rows, int64_t c, float epsilon, void* scratch,
                                     cudaStream_t stream);
void batch_norm_forward_inference_f32(const float* x, const float* gamma, const float* beta, const float* mean,
                                      const float* var, float* y, int64_t rows, int64_t c, float epsilon,
                                      void* scratch, cudaStream_t stream);
void batch_norm_backward_f32(const float* x, const float* gamma, const float* mean, const float* var,
                             const float* dy, float* dx, float* dgamma, float* dbeta, int64_t rows, int64_t c,
                             float epsilon, void* scratch, cudaStream_t stream);

// ---- kernels/loss_kernels.cu ------------------------------------------------------------------------------
// The label flag: kNoBadLabel (memset byte 0xFF) or (row << 32 | uint32 label) of the first bad example.
constexpr unsigned long long kNoBadLabel = ~0ull;
// logits (N, K), labels (N) -> probs (N, K), losses (N); a label outside [0, K) is atomicMin'd into *bad as
// (row << 32 | uint32 label), so the flag names the smallest such row (the caller set it to kNoBadLabel).
void softmax_xent_forward_f32(const float* logits, const int32_t* labels, int64_t n, int64_t k,
                              float label_smoothing, float* probs, float* losses, unsigned long long* bad,
                              cudaStream_t stream);
// dlogits (N, K) = scale * (probs - target); bad labels flagged as above.
void softmax_xent_backward_f32(const float* probs, const int32_t* labels, int64_t n, int64_t k,
                               float label_smoothing, float scale, float* dlogits, unsigned long long* bad,
                               cudaStream_t stream);

// ---- kernels/optimizer_kernels.cu --------------------------------------------------------------------------
// optimizer_update_one (include/terngrad/math/optim_math.h) per element; s1/s2 may be null when unused; with
// ema (step.ema_decay >= 0) ema_update_one of the new w in the same pass.
void optimizer_update_f32(const OptimizerStep& step, float* w, const float* g, float* s1, float* s2, float* ema,
                          int64_t n, cudaStream_t stream);
void ema_update_f32(float decay, const float* w, float* ema, int64_t n, cudaStream_t stream);

// ---- kernels/pool_kernels.cu -------------------------------------------------------------------------------
// Direct NHWC pooling with TF's (possibly asymmetric) padding: max ignores padded cells, average divides by
// the in-image count. The backward recomputes each window's arg-max (first maximum in window order).
void pool_forward_f32(const PoolDesc& d, const float* x, float* y, cudaStream_t stream);
void pool_backward_f32(const PoolDesc& d, const float* x, const float* dy, float* dx, cudaStream_t stream);

// ---- kernels/lrn_kernels.cu --------------------------------------------------------------------------------
// TF LRN across the channels of x (rows, channels): y = x * (bias + alpha * window sum of x^2)^-beta.
void lrn_forward_f32(const float* x, float* y, int64_t rows, int64_t channels, int64_t radius, float bias,
                     float alpha, float beta, cudaStream_t stream);
void lrn_backward_f32(const float* x, const float* dy, float* dx, int64_t rows, int64_t channels, int64_t radius,
                      float bias, float alpha, float beta, cudaStream_t stream);

}  // namespace tg::cuda_kernels

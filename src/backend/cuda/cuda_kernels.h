// Host-side launchers of the CUDA backend's kernels (kernels/*.cu). Each enqueues its kernel(s) on `stream`,
// checks the launch (TG_CUDA_CHECK_LAUNCH) and returns without synchronizing. Pointers are device pointers;
// n == 0 launches nothing. Tensors are row-major: (rows, cols) means cols is the fastest dimension.
// Activations have the compute dtype `t` (F32, F16 or BF16; `void*` pointers to it); every kernel computes in
// f32 (sums in double where the f32 kernels do) and rounds to t when it stores. Parameters, statistics,
// probabilities and losses are f32 (`float*`).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "terngrad/backend/op_desc.h"
#include "terngrad/core/dtype.h"
#include "terngrad/core/philox.h"

namespace tg::cuda_kernels {

// ---- kernels/elementwise_kernels.cu --------------------------------------------------------------------
void fill_f32(float* p, int64_t n, float value, cudaStream_t stream);
void axpy_f32(float alpha, const float* x, float* y, int64_t n, cudaStream_t stream);
void scale_f32(float alpha, float* x, int64_t n, cudaStream_t stream);
void add(DType t, const void* a, const void* b, void* out, int64_t n, cudaStream_t stream);
void relu_forward(DType t, const void* x, void* y, int64_t n, cudaStream_t stream);
void relu_backward(DType t, const void* y, const void* dy, void* dx, int64_t n, cudaStream_t stream);
// mask[i] = philox_uniform(key, i, step, salt, 0) < keep_prob; y[i] = mask ? x[i] * (1/keep_prob) : 0
void dropout_forward(DType t, const void* x, void* y, uint8_t* mask, int64_t n, float keep_prob, PhiloxKey key,
                     uint32_t step, uint32_t salt, cudaStream_t stream);
void dropout_backward(DType t, const void* dy, const uint8_t* mask, float keep_prob, void* dx, int64_t n,
                      cudaStream_t stream);
// y (rows, cols) += b (cols) broadcast over rows; y and b of dtype t
void add_bias_rows(DType t, void* y, const void* b, int64_t rows, int64_t cols, cudaStream_t stream);

// ---- kernels/cast_kernels.cu ------------------------------------------------------------------------------
// dst (dst_t, n) = src (src_t, n) converted through f32 with round to nearest even (f16 overflow -> +-Inf,
// NaN stays NaN); dst_t, src_t in {F32, F16, BF16}; equal dtypes are a copy.
void cast(DType dst_t, void* dst, DType src_t, const void* src, int64_t n, cudaStream_t stream);
// Up to kCastTable casts of one dtype pair in one launch (a block row per pair): dst[k] (dst_t, n[k]) = src[k] as
// cast() converts it; where rows[k] > 0, src[k] read as (rows x n/rows) and written transposed (equal dtypes too).
constexpr int kCastTable = 64;
struct CastTable {
  const void* src[kCastTable];
  void* dst[kCastTable];
  int64_t n[kCastTable];
  int64_t rows[kCastTable];  // 0: in order
  int count;
};
void cast_table(DType dst_t, DType src_t, const CastTable& table, cudaStream_t stream);
// dst (f32, n) = f32(src[i]) * scale; *found = 1 when any product is not finite (never cleared here).
void unscale_and_check(DType src_t, const void* src, float scale, float* dst, int32_t* found, int64_t n,
                       cudaStream_t stream);
// unscale_and_check of up to kUnscaleTable tensors of one src dtype in one launch (a block row per tensor), each
// followed by dst[i] += decay * decayed[i] where decayed is not null (axpy's arithmetic); where rows[k] > 0, src
// read as (rows x n/rows) and written transposed.
constexpr int kUnscaleTable = 16;
struct UnscaleTable {
  const void* src[kUnscaleTable];
  float* dst[kUnscaleTable];
  const float* decayed[kUnscaleTable];  // or null
  float decay[kUnscaleTable];
  int64_t n[kUnscaleTable];
  int64_t rows[kUnscaleTable];  // 0: in order
  int count;
};
void unscale_and_check_table(DType src_t, const UnscaleTable& table, float scale, int32_t* found, cudaStream_t stream);

// ---- kernels/layout_kernels.cu --------------------------------------------------------------------------
// dst (cols, rows) = transpose of src (rows, cols)
void transpose(DType t, const void* src, void* dst, int64_t rows, int64_t cols, cudaStream_t stream);
// xp (N, H+pt+pb, W+pl+pr, C) = x (N, H, W, C) surrounded by zeros
void pad_nhwc(DType t, const void* x, void* xp, int64_t n, int64_t h, int64_t w, int64_t c, int64_t pt, int64_t pb,
              int64_t pl, int64_t pr, cudaStream_t stream);
// x (N, H, W, C) = the interior of xp (N, H+pt+pb, W+pl+pr, C) (the adjoint of pad for gradients)
void crop_nhwc(DType t, const void* xp, void* x, int64_t n, int64_t h, int64_t w, int64_t c, int64_t pt, int64_t pb,
               int64_t pl, int64_t pr, cudaStream_t stream);

// ---- kernels/reduce_kernels.cu ---------------------------------------------------------------------------
// Deterministic two-pass reductions (fixed grid, fixed tree): the same input gives the same bits.
constexpr int kReduceMaxBlocks = 1024;
// *result = sum x[i] (or x[i]^2 when squares), accumulated in double; partials holds kReduceMaxBlocks.
void reduce_sum_f64(DType t, const void* x, int64_t n, bool squares, double* partials, double* result,
                    cudaStream_t stream);
// Backend::reduce_into over a table of up to kReduceTable f32 tensors in two launches: *out (f32) = the sum over
// k of w[k] * (sum of x[k] or of its squares), each tensor's sum in double over up to kReduceTableBlocks blocks
// (a fixed tree), the terms added in double in table order onto *running (read unless first, written unless
// last). scratch: reduce_table_scratch_bytes().
constexpr int kReduceTable = 32;
constexpr int kReduceTableBlocks = 64;
struct ReduceTable {
  const float* x[kReduceTable];
  int64_t n[kReduceTable];
  float w[kReduceTable];
  int count = 0;
};
size_t reduce_table_scratch_bytes();
void reduce_table(const ReduceTable& t, bool squares, bool first, bool last, double* running, float* out, void* scratch,
                  cudaStream_t stream);
// *result = max |x[i]| (NaN propagates), as a double holding the float; partials as above.
void reduce_max_abs(DType t, const void* x, int64_t n, double* partials, double* result, cudaStream_t stream);
// out (cols, dtype t) = sum over rows of x (rows, cols, dtype t): slabs of rows summed in double by a 2-D grid
// (a fixed tree per slab), then the slabs in order; the grid depends only on (rows, cols), so the bits are
// deterministic. scratch: column_sum_scratch_bytes(rows, cols) bytes of device memory.
size_t column_sum_scratch_bytes(int64_t rows, int64_t cols);
void column_sum(DType t, const void* x, int64_t rows, int64_t cols, void* out, void* scratch, cudaStream_t stream);

// ---- kernels/batch_norm_kernels.cu -------------------------------------------------------------------------
// The CPU backend's batch norm loops (same chunks, same order, same bits) over x (rows, C) of dtype t (y, dy,
// dx too); gamma, beta, mean, var, dgamma, dbeta f32. gamma may be null (1), beta is required; backward's dx,
// dgamma, dbeta may each be null. scratch: batch_norm_scratch_bytes. relu: the forwards write max(y, 0). The
// training forward updates moving_mean/moving_var (each may be null) with `decay` in its last statistics kernel.
size_t batch_norm_scratch_bytes(int64_t rows, int64_t c);
void batch_norm_forward_training(DType t, const void* x, const float* gamma, const float* beta, void* y, float* mean,
                                 float* var, float* moving_mean, float* moving_var, float decay, int64_t rows,
                                 int64_t c, float epsilon, bool relu, void* scratch, cudaStream_t stream);
void batch_norm_forward_inference(DType t, const void* x, const float* gamma, const float* beta, const float* mean,
                                  const float* var, void* y, int64_t rows, int64_t c, float epsilon, bool relu,
                                  void* scratch, cudaStream_t stream);
void batch_norm_backward(DType t, const void* x, const float* gamma, const float* beta, const float* mean,
                         const float* var, const void* dy, void* dx, float* dgamma, float* dbeta, int64_t rows,
                         int64_t c, float epsilon, bool relu, void* scratch, cudaStream_t stream);

// ---- kernels/loss_kernels.cu ------------------------------------------------------------------------------
// The label flag: kNoBadLabel (memset byte 0xFF) or (row << 32 | uint32 label) of the first bad example.
constexpr unsigned long long kNoBadLabel = ~0ull;
// logits (N, K) of dtype t, labels (N) -> probs (N, K) f32, losses (N) f32; a label outside [0, K) is
// atomicMin'd into *bad as (row << 32 | uint32 label), so the flag names the smallest such row (the caller set
// it to kNoBadLabel).
void softmax_xent_forward(DType t, const void* logits, const int32_t* labels, int64_t n, int64_t k,
                          float label_smoothing, float* probs, float* losses, unsigned long long* bad,
                          cudaStream_t stream);
// dlogits (N, K) of dtype t = scale * (probs - target), probs f32; bad labels flagged as above.
void softmax_xent_backward(DType t, const float* probs, const int32_t* labels, int64_t n, int64_t k,
                           float label_smoothing, float scale, void* dlogits, unsigned long long* bad,
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
void pool_forward(DType t, const PoolDesc& d, const void* x, void* y, cudaStream_t stream);
void pool_backward(DType t, const PoolDesc& d, const void* x, const void* dy, void* dx, cudaStream_t stream);

// ---- kernels/lrn_kernels.cu --------------------------------------------------------------------------------
// TF LRN across the channels of x (rows, channels): y = x * (bias + alpha * window sum of x^2)^-beta.
void lrn_forward(DType t, const void* x, void* y, int64_t rows, int64_t channels, int64_t radius, float bias,
                 float alpha, float beta, cudaStream_t stream);
void lrn_backward(DType t, const void* x, const void* dy, void* dx, int64_t rows, int64_t channels, int64_t radius,
                  float bias, float alpha, float beta, cudaStream_t stream);

// ---- kernels/linalg_kernels.cu -----------------------------------------------------------------------------
// The columns of p (rows, cols; row-major f32) made orthonormal in place (Backend::orthogonalize_columns): one
// block, column by column, sums in double in a fixed order.
void orthogonalize_columns(float* p, int64_t rows, int64_t cols, float epsilon, cudaStream_t stream);

}  // namespace tg::cuda_kernels

// Element-wise f32 kernels of the CUDA backend: fill, add, axpy, scale, ReLU forward/backward, inverted
// dropout with Philox masks (the CPU backend's bits: mask = philox_uniform(key, i, step, salt, 0) <
// keep_prob, y = x * (1 / keep_prob)), and a row-broadcast bias add. Launchers in
// src/backend/cuda/cuda_kernels.h.
#include "terngrad/math/activation_math.h"
#include <cuda_runtime.h>

#include "src/backend/cuda/cuda_kernels.h"
#include "src/backend/cuda/cuda_launch.h"
#include "terngrad/backend/cuda_check.h"

namespace tg::cuda_kernels {
namespace {

__global__ void fill_kernel(float* p, int64_t n, float value) {
  TG_GRID_STRIDE_LOOP(i, n) p[i] = value;
}

__global__ void add_kernel(const float* a, const float* b, float* out, int64_t n) {
  TG_GRID_STRIDE_LOOP(i, n) out[i] = a[i] + b[i];
}

__global__ void axpy_kernel(float alpha, const float* x, float* y, int64_t n) {
  TG_GRID_STRIDE_LOOP(i, n) y[i] += alpha * x[i];
}

__global__ void scale_kernel(float alpha, float* x, int64_t n) {
  TG_GRID_STRIDE_LOOP(i, n) x[i] *= alpha;
}

__global__ void relu_forward_kernel(const float* x, float* y, int64_t n) {
  TG_GRID_STRIDE_LOOP(i, n) y[i] = relu_one(x[i]);
}

__global__ void relu_backward_kernel(const float* y, const float* dy, float* dx, int64_t n) {
  TG_GRID_STRIDE_LOOP(i, n) dx[i] = relu_grad_one(y[i], dy[i]);
}

__global__ void dropout_forward_kernel(const float* x, float* y, uint8_t* mask, int64_t n, float keep_prob,
                                       float inv, PhiloxKey key, uint32_t step, uint32_t salt) {
  TG_GRID_STRIDE_LOOP(i, n) {
    uint8_t keep = philox_uniform(key, static_cast<uint64_t>(i), step, salt, 0) < keep_prob;
    mask[i] = keep;
    y[i] = keep ? x[i] * inv : 0.f;
  }
}

__global__ void dropout_backward_kernel(const float* dy, const uint8_t* mask, float inv, float* dx, int64_t n) {
  TG_GRID_STRIDE_LOOP(i, n) dx[i] = mask[i] ? dy[i] * inv : 0.f;
}

__global__ void add_bias_rows_kernel(float* y, const float* b, int64_t rows, int64_t cols) {
  TG_GRID_STRIDE_LOOP(i, rows * cols) y[i] += b[i % cols];
}

}  // namespace

void fill_f32(float* p, int64_t n, float value, cudaStream_t stream) {
  if (n == 0) return;
  fill_kernel<<<grid_for(n), kThreads, 0, stream>>>(p, n, value);
  TG_CUDA_CHECK_LAUNCH();
}

void add_f32(const float* a, const float* b, float* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  add_kernel<<<grid_for(n), kThreads, 0, stream>>>(a, b, out, n);
  TG_CUDA_CHECK_LAUNCH();
}

void axpy_f32(float alpha, const float* x, float* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  axpy_kernel<<<grid_for(n), kThreads, 0, stream>>>(alpha, x, y, n);
  TG_CUDA_CHECK_LAUNCH();
}

void scale_f32(float alpha, float* x, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  scale_kernel<<<grid_for(n), kThreads, 0, stream>>>(alpha, x, n);
  TG_CUDA_CHECK_LAUNCH();
}

void relu_forward_f32(const float* x, float* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  relu_forward_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, y, n);
  TG_CUDA_CHECK_LAUNCH();
}

void relu_backward_f32(const float* y, const float* dy, float* dx, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  relu_backward_kernel<<<grid_for(n), kThreads, 0, stream>>>(y, dy, dx, n);
  TG_CUDA_CHECK_LAUNCH();
}

void dropout_forward_f32(const float* x, float* y, uint8_t* mask, int64_t n, float keep_prob, PhiloxKey key,
                         uint32_t step, uint32_t salt, cudaStream_t stream) {
  if (n == 0) return;
  const float inv = 1.f / keep_prob;  // computed on the host, as the CPU backend does
  dropout_forward_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, y, mask, n, keep_prob, inv, key, step, salt);
  TG_CUDA_CHECK_LAUNCH();
}

void dropout_backward_f32(const float* dy, const uint8_t* mask, float keep_prob, float* dx, int64_t n,
                          cudaStream_t stream) {
  if (n == 0) return;
  const float inv = 1.f / keep_prob;
  dropout_backward_kernel<<<grid_for(n), kThreads, 0, stream>>>(dy, mask, inv, dx, n);
  TG_CUDA_CHECK_LAUNCH();
}

void add_bias_rows_f32(float* y, const float* b, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows * cols == 0) return;
  add_bias_rows_kernel<<<grid_for(rows * cols), kThreads, 0, stream>>>(y, b, rows, cols);
  TG_CUDA_CHECK_LAUNCH();
}

}  // namespace tg::cuda_kernels

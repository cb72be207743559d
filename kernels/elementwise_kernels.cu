// Element-wise kernels of the CUDA backend: fill, axpy and scale (f32: parameters and gradients), and over
// activations of the compute dtype T (f32, f16, bf16; computed in f32, rounded once when stored): add, ReLU
// forward/backward, inverted dropout with Philox masks (the CPU backend's bits: mask = philox_uniform(key, i,
// step, salt, 0) < keep_prob, y = x * (1 / keep_prob)), and a row-broadcast bias add. Launchers in
// src/backend/cuda/cuda_kernels.h; each is one linear_kernel launch (src/backend/cuda/cuda_launch.h).
#include <cuda_runtime.h>

#include "src/backend/cuda/cuda_kernels.h"
#include "src/backend/cuda/cuda_launch.h"
#include "terngrad/math/activation_math.h"

namespace tg::cuda_kernels {
namespace {

__global__ void fill_kernel(int64_t n, float* p, float value) { TG_GRID_STRIDE_LOOP(i, n) p[i] = value; }

__global__ void axpy_kernel(int64_t n, float alpha, const float* x, float* y) {
  TG_GRID_STRIDE_LOOP(i, n) y[i] += alpha * x[i];
}

__global__ void scale_kernel(int64_t n, float alpha, float* x) { TG_GRID_STRIDE_LOOP(i, n) x[i] *= alpha; }

template <typename T>
__global__ void add_kernel(int64_t n, const T* a, const T* b, T* out) {
  TG_GRID_STRIDE_LOOP(i, n) out[i] = from_f32<T>(to_f32(a[i]) + to_f32(b[i]));
}

template <typename T>
__global__ void relu_forward_kernel(int64_t n, const T* x, T* y) {
  TG_GRID_STRIDE_LOOP(i, n) y[i] = from_f32<T>(relu_one(to_f32(x[i])));
}

template <typename T>
__global__ void relu_backward_kernel(int64_t n, const T* y, const T* dy, T* dx) {
  TG_GRID_STRIDE_LOOP(i, n) dx[i] = from_f32<T>(relu_grad_one(to_f32(y[i]), to_f32(dy[i])));
}

template <typename T>
__global__ void dropout_forward_kernel(int64_t n, const T* x, T* y, uint8_t* mask, float keep_prob, float inv,
                                       PhiloxKey key, uint32_t step, uint32_t salt) {
  TG_GRID_STRIDE_LOOP(i, n) {
    uint8_t keep = philox_uniform(key, static_cast<uint64_t>(i), step, salt, 0) < keep_prob;
    mask[i] = keep;
    y[i] = from_f32<T>(keep ? to_f32(x[i]) * inv : 0.f);
  }
}

template <typename T>
__global__ void dropout_backward_kernel(int64_t n, const T* dy, const uint8_t* mask, float inv, T* dx) {
  TG_GRID_STRIDE_LOOP(i, n) dx[i] = from_f32<T>(mask[i] ? to_f32(dy[i]) * inv : 0.f);
}

template <typename T>
__global__ void add_bias_rows_kernel(int64_t n, T* y, const T* b, int64_t cols) {
  TG_GRID_STRIDE_LOOP(i, n) y[i] = from_f32<T>(to_f32(y[i]) + to_f32(b[i % cols]));
}

}  // namespace

void fill_f32(float* p, int64_t n, float value, cudaStream_t stream) {
  linear_kernel("fill", fill_kernel, n, stream, p, value);
}

void axpy_f32(float alpha, const float* x, float* y, int64_t n, cudaStream_t stream) {
  linear_kernel("axpy", axpy_kernel, n, stream, alpha, x, y);
}

void scale_f32(float alpha, float* x, int64_t n, cudaStream_t stream) {
  linear_kernel("scale", scale_kernel, n, stream, alpha, x);
}

void add(DType t, const void* a, const void* b, void* out, int64_t n, cudaStream_t stream) {
  dispatch_float(t, "add", [&](auto tag) {
    using T = decltype(tag);
    linear_kernel("add", add_kernel<T>, n, stream, static_cast<const T*>(a), static_cast<const T*>(b),
                  static_cast<T*>(out));
  });
}

void relu_forward(DType t, const void* x, void* y, int64_t n, cudaStream_t stream) {
  dispatch_float(t, "relu_forward", [&](auto tag) {
    using T = decltype(tag);
    linear_kernel("relu_forward", relu_forward_kernel<T>, n, stream, static_cast<const T*>(x), static_cast<T*>(y));
  });
}

void relu_backward(DType t, const void* y, const void* dy, void* dx, int64_t n, cudaStream_t stream) {
  dispatch_float(t, "relu_backward", [&](auto tag) {
    using T = decltype(tag);
    linear_kernel("relu_backward", relu_backward_kernel<T>, n, stream, static_cast<const T*>(y),
                  static_cast<const T*>(dy), static_cast<T*>(dx));
  });
}

void dropout_forward(DType t, const void* x, void* y, uint8_t* mask, int64_t n, float keep_prob, PhiloxKey key,
                     uint32_t step, uint32_t salt, cudaStream_t stream) {
  const float inv = 1.f / keep_prob;  // computed on the host, as the CPU backend does
  dispatch_float(t, "dropout_forward", [&](auto tag) {
    using T = decltype(tag);
    linear_kernel("dropout_forward", dropout_forward_kernel<T>, n, stream, static_cast<const T*>(x), static_cast<T*>(y),
                  mask, keep_prob, inv, key, step, salt);
  });
}

void dropout_backward(DType t, const void* dy, const uint8_t* mask, float keep_prob, void* dx, int64_t n,
                      cudaStream_t stream) {
  const float inv = 1.f / keep_prob;
  dispatch_float(t, "dropout_backward", [&](auto tag) {
    using T = decltype(tag);
    linear_kernel("dropout_backward", dropout_backward_kernel<T>, n, stream, static_cast<const T*>(dy), mask, inv,
                  static_cast<T*>(dx));
  });
}

void add_bias_rows(DType t, void* y, const void* b, int64_t rows, int64_t cols, cudaStream_t stream) {
  dispatch_float(t, "add_bias_rows", [&](auto tag) {
    using T = decltype(tag);
    linear_kernel("add_bias_rows", add_bias_rows_kernel<T>, rows * cols, stream, static_cast<T*>(y),
                  static_cast<const T*>(b), cols);
  });
}

}  // namespace tg::cuda_kernels

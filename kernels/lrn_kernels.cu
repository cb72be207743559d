// Local response normalization across channels (TensorFlow's convention) on NHWC tensors:
//   s_c = bias + alpha * sum_{|c'-c| <= r} x_{c'}^2,   y_c = x_c * s_c^-beta
//   dx_c = dy_c * s_c^-beta - 2 alpha beta x_c * sum_{|c'-c| <= r} dy_{c'} x_{c'} s_{c'}^(-beta-1)
// One thread per element; the backward recomputes the s_{c'} it needs, so no workspace is kept. Written
// directly rather than through cuDNN: cuDNN's LRN caps the window at 16 channels and documents NCHW-packed
// tensors, while our activations are NHWC. x, y, dy, dx have the compute dtype T (f32, f16, bf16), read as
// f32: the window sums and powers are f32.
#include <cuda_runtime.h>

#include "src/backend/cuda/cuda_kernels.h"
#include "src/backend/cuda/cuda_launch.h"

namespace tg::cuda_kernels {
namespace {

template <typename T>
__device__ float lrn_scale(const T* row, int64_t c, int64_t channels, int64_t radius, float bias, float alpha) {
  const int64_t lo = c - radius > 0 ? c - radius : 0, hi = c + radius < channels - 1 ? c + radius : channels - 1;
  float s = 0.f;
  for (int64_t j = lo; j <= hi; ++j) {
    const float v = to_f32(row[j]);
    s += v * v;
  }
  return bias + alpha * s;
}

template <typename T>
__global__ void lrn_forward_kernel(int64_t total, const T* x, T* y, int64_t channels, int64_t radius, float bias,
                                   float alpha, float beta) {
  TG_GRID_STRIDE_LOOP(i, total) {
    const int64_t c = i % channels;
    const T* row = x + (i - c);
    y[i] = from_f32<T>(to_f32(x[i]) * powf(lrn_scale(row, c, channels, radius, bias, alpha), -beta));
  }
}

template <typename T>
__global__ void lrn_backward_kernel(int64_t total, const T* x, const T* dy, T* dx, int64_t channels, int64_t radius,
                                    float bias, float alpha, float beta) {
  TG_GRID_STRIDE_LOOP(i, total) {
    const int64_t c = i % channels;
    const T* xrow = x + (i - c);
    const T* dyrow = dy + (i - c);
    const int64_t lo = c - radius > 0 ? c - radius : 0, hi = c + radius < channels - 1 ? c + radius : channels - 1;
    float cross = 0.f;
    for (int64_t j = lo; j <= hi; ++j) {
      const float s = lrn_scale(xrow, j, channels, radius, bias, alpha);
      cross += to_f32(dyrow[j]) * to_f32(xrow[j]) * powf(s, -beta - 1.f);
    }
    const float s = lrn_scale(xrow, c, channels, radius, bias, alpha);
    dx[i] = from_f32<T>(to_f32(dy[i]) * powf(s, -beta) - 2.f * alpha * beta * to_f32(x[i]) * cross);
  }
}

}  // namespace

void lrn_forward(DType t, const void* x, void* y, int64_t rows, int64_t channels, int64_t radius, float bias,
                 float alpha, float beta, cudaStream_t stream) {
  dispatch_float(t, "lrn_forward", [&](auto tag) {
    using T = decltype(tag);
    linear_kernel("lrn_forward", lrn_forward_kernel<T>, rows * channels, stream, static_cast<const T*>(x),
                  static_cast<T*>(y), channels, radius, bias, alpha, beta);
  });
}

void lrn_backward(DType t, const void* x, const void* dy, void* dx, int64_t rows, int64_t channels, int64_t radius,
                  float bias, float alpha, float beta, cudaStream_t stream) {
  dispatch_float(t, "lrn_backward", [&](auto tag) {
    using T = decltype(tag);
    linear_kernel("lrn_backward", lrn_backward_kernel<T>, rows * channels, stream, static_cast<const T*>(x),
                  static_cast<const T*>(dy), static_cast<T*>(dx), channels, radius, bias, alpha, beta);
  });
}

}  // namespace tg::cuda_kernels

// Local response normalization across channels (TensorFlow's convention) on NHWC tensors:
//   s_c = bias + alpha * sum_{|c'-c| <= r} x_{c'}^2,   y_c = x_c * s_c^-beta
//   dx_c = dy_c * s_c^-beta - 2 alpha beta x_c * sum_{|c'-c| <= r} dy_{c'} x_{c'} s_{c'}^(-beta-1)
// One thread per element; the backward recomputes the s_{c'} it needs, so no workspace is kept. Written
// directly rather than through cuDNN: cuDNN's LRN caps the window at 16 channels and documents NCHW-packed
// tensors, while our activations are NHWC.
#include <cuda_runtime.h>

#include "src/backend/cuda/cuda_kernels.h"
#include "src/backend/cuda/cuda_launch.h"
#include "terngrad/backend/cuda_check.h"

namespace tg::cuda_kernels {
namespace {

__device__ float lrn_scale(const float* row, int64_t c, int64_t channels, int64_t radius, float bias, float alpha) {
  const int64_t lo = c - radius > 0 ? c - radius : 0, hi = c + radius < channels - 1 ? c + radius : channels - 1;
  float s = 0.f;
  for (int64_t j = lo; j <= hi; ++j) s += row[j] * row[j];
  return bias + alpha * s;
}

__global__ void lrn_forward_kernel(const float* x, float* y, int64_t rows, int64_t channels, int64_t radius,
                                   float bias, float alpha, float beta) {
  TG_GRID_STRIDE_LOOP(i, rows * channels) {
    const int64_t c = i % channels;
    const float* row = x + (i - c);
    y[i] = x[i] * powf(lrn_scale(row, c, channels, radius, bias, alpha), -beta);
  }
}

__global__ void lrn_backward_kernel(const float* x, const float* dy, float* dx, int64_t rows, int64_t channels,
                                    int64_t radius, float bias, float alpha, float beta) {
  TG_GRID_STRIDE_LOOP(i, rows * channels) {
    const int64_t c = i % channels;
    const float* xrow = x + (i - c);
    const float* dyrow = dy + (i - c);
    const int64_t lo = c - radius > 0 ? c - radius : 0, hi = c + radius < channels - 1 ? c + radius : channels - 1;
    float cross = 0.f;
    for (int64_t j = lo; j <= hi; ++j) {
      const float s = lrn_scale(xrow, j, channels, radius, bias, alpha);
      cross += dyrow[j] * xrow[j] * powf(s, -beta - 1.f);
    }
    const float s = lrn_scale(xrow, c, channels, radius, bias, alpha);
    dx[i] = dy[i] * powf(s, -beta) - 2.f * alpha * beta * x[i] * cross;
  }
}

}  // namespace

void lrn_forward_f32(const float* x, float* y, int64_t rows, int64_t channels, int64_t radius, float bias,
                     float alpha, float beta, cudaStream_t stream) {
  if (rows * channels == 0) return;
  lrn_forward_kernel<<<grid_for(rows * channels), kThreads, 0, stream>>>(x, y, rows, channels, radius, bias, alpha,
                                                                         beta);
  TG_CUDA_CHECK_LAUNCH();
}

void lrn_backward_f32(const float* x, const float* dy, float* dx, int64_t rows, int64_t channels, int64_t radius,
                      float bias, float alpha, float beta, cudaStream_t stream) {
  if (rows * channels == 0) return;
  lrn_backward_kernel<<<grid_for(rows * channels), kThreads, 0, stream>>>(x, dy, dx, rows, channels, radius, bias,
                                                                          alpha, beta);
  TG_CUDA_CHECK_LAUNCH();
}

}  // namespace tg::cuda_kernels

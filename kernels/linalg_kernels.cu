// Linear-algebra kernels of the CUDA backend: Gram-Schmidt orthogonalization of the columns of a tall, narrow
// f32 matrix (PowerSGD's P and Q: rows in the thousands, a few columns). One block does the whole matrix,
// column by column in order, as the CPU backend does: each norm and dot product is a sum in double, every thread
// adding its rows (a fixed stride) and the block adding the threads' sums in a fixed tree, so the bits repeat
// run to run. Launcher in src/backend/cuda/cuda_kernels.h.
#include <cuda_runtime.h>

#include "src/backend/cuda/cuda_kernels.h"
#include "src/backend/cuda/cuda_launch.h"

namespace tg::cuda_kernels {
namespace {

constexpr int kOrthThreads = 256;

// The block's sum of each thread's `v` (a fixed tree), returned to every thread.
__device__ double block_sum(double v, double* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int s = kOrthThreads / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) shared[threadIdx.x] += shared[threadIdx.x + s];
    __syncthreads();
  }
  const double total = shared[0];
  __syncthreads();  // shared[] is reused by the next sum
  return total;
}

__global__ void orthogonalize_columns_kernel(float* __restrict__ p, int64_t rows, int64_t cols, float epsilon) {
  __shared__ double shared[kOrthThreads];
  for (int64_t i = 0; i < cols; ++i) {
    double norm2 = 0;
    for (int64_t r = threadIdx.x; r < rows; r += kOrthThreads) {
      const double v = p[r * cols + i];
      norm2 += v * v;
    }
    const double norm = sqrt(block_sum(norm2, shared)) + epsilon;
    const float inv = norm > 0 ? static_cast<float>(1.0 / norm) : 0.f;  // a zero column stays zero
    for (int64_t r = threadIdx.x; r < rows; r += kOrthThreads) p[r * cols + i] *= inv;
    __syncthreads();
    for (int64_t j = i + 1; j < cols; ++j) {
      double dot = 0;
      for (int64_t r = threadIdx.x; r < rows; r += kOrthThreads)
        dot += static_cast<double>(p[r * cols + i]) * p[r * cols + j];
      const float d = static_cast<float>(block_sum(dot, shared));
      for (int64_t r = threadIdx.x; r < rows; r += kOrthThreads) p[r * cols + j] -= d * p[r * cols + i];
      __syncthreads();
    }
  }
}

}  // namespace

void orthogonalize_columns(float* p, int64_t rows, int64_t cols, float epsilon, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  orthogonalize_columns_kernel<<<1, kOrthThreads, 0, stream>>>(p, rows, cols, epsilon);
  TG_CUDA_CHECK_LAUNCH();
}

}  // namespace tg::cuda_kernels

// Optimizer and EMA updates of the CUDA backend: one thread per element calling the shared TG_HOST_DEVICE
// math of include/terngrad/math/optim_math.h, so (with -fmad=false and IEEE sqrt/div) the GPU gives the CPU
// backend's bits.
#include <cuda_runtime.h>

#include "src/backend/cuda/cuda_kernels.h"
#include "src/backend/cuda/cuda_launch.h"
#include "terngrad/math/optim_math.h"

namespace tg::cuda_kernels {
namespace {

__global__ void optimizer_update_kernel(int64_t n, OptimizerStep step, float* w, const float* g, float* s1, float* s2,
                                        float* ema) {
  TG_GRID_STRIDE_LOOP(i, n) {
    optimizer_update_one(step, w[i], g[i], s1 ? s1 + i : nullptr, s2 ? s2 + i : nullptr);
    if (ema) ema_update_one(ema[i], w[i], step.ema_decay);
  }
}

__global__ void ema_update_kernel(int64_t n, float decay, const float* w, float* ema) {
  TG_GRID_STRIDE_LOOP(i, n) ema_update_one(ema[i], w[i], decay);
}

}  // namespace

void optimizer_update_f32(const OptimizerStep& step, float* w, const float* g, float* s1, float* s2, float* ema,
                          int64_t n, cudaStream_t stream) {
  linear_kernel("optimizer_update", optimizer_update_kernel, n, stream, step, w, g, s1, s2, ema);
}

void ema_update_f32(float decay, const float* w, float* ema, int64_t n, cudaStream_t stream) {
  linear_kernel("ema_update", ema_update_kernel, n, stream, decay, w, ema);
}

}  // namespace tg::cuda_kernels

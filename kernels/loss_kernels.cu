// Softmax cross-entropy with label smoothing on the CUDA backend, mirroring the CPU backend's arithmetic:
// target = on for the label (on = 1 - ls + ls/K), off = ls/K elsewhere; max in float, the partition
// function and the loss in double. One block per row for the forward (K may be 1001). A label outside
// [0, K) is not used: (row << 32 | label) is atomicMin'd into *bad, so the flag ends up naming the first bad
// example and its label; the backend reads it at its next host sync. Logits and dlogits have the compute dtype
// T (f32, f16, bf16; read as f32); probabilities and losses are f32.
#include <cuda_runtime.h>

#include <algorithm>

#include "src/backend/cuda/cuda_kernels.h"
#include "src/backend/cuda/cuda_launch.h"

namespace tg::cuda_kernels {
namespace {

constexpr int kRowThreads = 128;

__device__ unsigned long long bad_label_code(int64_t row, int32_t label) {
  return (static_cast<unsigned long long>(row) << 32) | static_cast<uint32_t>(label);
}

template <typename T, typename Combine>
__device__ T block_combine(T v, Combine combine) {
  __shared__ T shared[kRowThreads];
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int s = kRowThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) shared[threadIdx.x] = combine(shared[threadIdx.x], shared[threadIdx.x + s]);
    __syncthreads();
  }
  T total = shared[0];
  __syncthreads();  // shared is reused by the next call
  return total;
}

template <typename T>
__global__ void softmax_xent_forward_kernel(const T* logits, const int32_t* labels, int64_t n, int64_t k, float on,
                                            float off, float* probs, float* losses, unsigned long long* bad) {
  for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
    const int32_t label = labels[r];
    if (label < 0 || label >= k) {
      if (threadIdx.x == 0) atomicMin(bad, bad_label_code(r, label));
      continue;  // uniform across the block
    }
    const T* row = logits + r * k;
    float* prow = probs + r * k;
    float mx = to_f32(row[0]);
    for (int64_t j = threadIdx.x; j < k; j += kRowThreads) mx = fmaxf(mx, to_f32(row[j]));
    mx = block_combine<float>(mx, [](float a, float b) { return fmaxf(a, b); });
    double z = 0;
    for (int64_t j = threadIdx.x; j < k; j += kRowThreads) z += exp(static_cast<double>(to_f32(row[j]) - mx));
    z = block_combine<double>(z, [](double a, double b) { return a + b; });
    const double log_z = log(z);
    double loss = 0;
    for (int64_t j = threadIdx.x; j < k; j += kRowThreads) {
      double log_p = static_cast<double>(to_f32(row[j]) - mx) - log_z;
      prow[j] = static_cast<float>(exp(log_p));
      double target = (j == label) ? on : off;
      if (target != 0) loss -= target * log_p;
    }
    loss = block_combine<double>(loss, [](double a, double b) { return a + b; });
    if (threadIdx.x == 0) losses[r] = static_cast<float>(loss);
  }
}

template <typename T>
__global__ void softmax_xent_backward_kernel(int64_t total, const float* probs, const int32_t* labels, int64_t k,
                                             float on, float off, float scale, T* dlogits, unsigned long long* bad) {
  TG_GRID_STRIDE_LOOP(i, total) {
    const int64_t r = i / k, j = i % k;
    const int32_t label = labels[r];
    if (label < 0 || label >= k) {
      if (j == 0) atomicMin(bad, bad_label_code(r, label));
      continue;
    }
    dlogits[i] = from_f32<T>(scale * (probs[i] - (j == label ? on : off)));
  }
}

}  // namespace

void softmax_xent_forward(DType t, const void* logits, const int32_t* labels, int64_t n, int64_t k,
                          float label_smoothing, float* probs, float* losses, unsigned long long* bad,
                          cudaStream_t stream) {
  if (n == 0 || k == 0) return;
  const float off = label_smoothing / static_cast<float>(k);
  const float on = 1.f - label_smoothing + off;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(n, kMaxBlocks));
  dispatch_float(t, "softmax_xent_forward", [&](auto tag) {
    using T = decltype(tag);
    softmax_xent_forward_kernel<<<blocks, kRowThreads, 0, stream>>>(static_cast<const T*>(logits), labels, n, k, on,
                                                                    off, probs, losses, bad);
    TG_CUDA_CHECK_LAUNCH_OF("softmax_xent_forward");
  });
}

void softmax_xent_backward(DType t, const float* probs, const int32_t* labels, int64_t n, int64_t k,
                           float label_smoothing, float scale, void* dlogits, unsigned long long* bad,
                           cudaStream_t stream) {
  const float off = k ? label_smoothing / static_cast<float>(k) : 0.f;
  const float on = 1.f - label_smoothing + off;
  dispatch_float(t, "softmax_xent_backward", [&](auto tag) {
    using T = decltype(tag);
    linear_kernel("softmax_xent_backward", softmax_xent_backward_kernel<T>, n * k, stream, probs, labels, k, on, off,
                  scale, static_cast<T*>(dlogits), bad);
  });
}

}  // namespace tg::cuda_kernels

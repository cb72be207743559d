// Launch-shape helpers shared by kernels/*.cu: grid-stride loops over int64 element counts with a capped
// grid (every kernel loops, so any n fits).
#pragma once

#include <algorithm>
#include <cstdint>

namespace tg::cuda_kernels {

constexpr int kThreads = 256;      // threads per block of the element-wise kernels
constexpr int64_t kMaxBlocks = 65536;

inline unsigned grid_for(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
}

}  // namespace tg::cuda_kernels

#if defined(__CUDACC__)
// for (int64_t i = first; i < n; i += stride) over the whole grid
#define TG_GRID_STRIDE_LOOP(i, n)                                                                       \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);               \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
#endif

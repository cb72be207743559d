// Layout kernels of the CUDA backend: a tiled 2-D transpose (our (KH, KW, Cin, Cout) filters <-> cuDNN's
// NHWC filter layout (Cout, KH, KW, Cin)) and zero-padding / cropping of NHWC tensors (cuDNN pads
// symmetrically; TensorFlow's SAME puts the odd pixel after, so such convolutions run on a padded copy).
#include <cuda_runtime.h>

#include "src/backend/cuda/cuda_kernels.h"
#include "src/backend/cuda/cuda_launch.h"
#include "terngrad/backend/cuda_check.h"

namespace tg::cuda_kernels {
namespace {

constexpr int kTile = 32;
constexpr int kTileRows = 8;

// Block (kTile x kTileRows) moves one kTile x kTile tile through shared memory (+1 column: no bank conflicts).
__global__ void transpose_kernel(const float* src, float* dst, int64_t rows, int64_t cols) {
  __shared__ float tile[kTile][kTile + 1];
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kTile, r0 = static_cast<int64_t>(blockIdx.y) * kTile;
  for (int j = threadIdx.y; j < kTile; j += kTileRows) {
    int64_t r = r0 + j, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[j][threadIdx.x] = src[r * cols + c];
  }
  __syncthreads();
  for (int j = threadIdx.y; j < kTile; j += kTileRows) {
    int64_t c = c0 + j, r = r0 + threadIdx.x;  // dst row c, column r
    if (r < rows && c < cols) dst[c * rows + r] = tile[threadIdx.x][j];
  }
}

__global__ void pad_kernel(const float* x, float* xp, int64_t n, int64_t h, int64_t w, int64_t c, int64_t pt,
                           int64_t pl, int64_t hp, int64_t wp) {
  TG_GRID_STRIDE_LOOP(i, n * hp * wp * c) {
    int64_t ch = i % c, rest = i / c;
    int64_t col = rest % wp - pl;
    rest /= wp;
    int64_t row = rest % hp - pt;
    int64_t b = rest / hp;
    xp[i] = (row >= 0 && row < h && col >= 0 && col < w) ? x[((b * h + row) * w + col) * c + ch] : 0.f;
  }
}

__global__ void crop_kernel(const float* xp, float* x, int64_t n, int64_t h, int64_t w, int64_t c, int64_t pt,
                            int64_t pl, int64_t hp, int64_t wp) {
  TG_GRID_STRIDE_LOOP(i, n * h * w * c) {
    int64_t ch = i % c, rest = i / c;
    int64_t col = rest % w;
    rest /= w;
    int64_t row = rest % h;
    int64_t b = rest / h;
    x[i] = xp[((b * hp + row + pt) * wp + col + pl) * c + ch];
  }
}

}  // namespace

void transpose_f32(const float* src, float* dst, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows * cols == 0) return;
  TG_CHECK((rows + kTile - 1) / kTile <= 65535, "transpose of {} rows exceeds the grid", rows);
  dim3 grid(static_cast<unsigned>((cols + kTile - 1) / kTile), static_cast<unsigned>((rows + kTile - 1) / kTile));
  transpose_kernel<<<grid, dim3(kTile, kTileRows), 0, stream>>>(src, dst, rows, cols);
  TG_CUDA_CHECK_LAUNCH();
}

void pad_nhwc_f32(const float* x, float* xp, int64_t n, int64_t h, int64_t w, int64_t c, int64_t pt, int64_t pb,
                  int64_t pl, int64_t pr, cudaStream_t stream) {
  const int64_t hp = h + pt + pb, wp = w + pl + pr, total = n * hp * wp * c;
  if (total == 0) return;
  pad_kernel<<<grid_for(total), kThreads, 0, stream>>>(x, xp, n, h, w, c, pt, pl, hp, wp);
  TG_CUDA_CHECK_LAUNCH();
}

void crop_nhwc_f32(const float* xp, float* x, int64_t n, int64_t h, int64_t w, int64_t c, int64_t pt, int64_t pb,
                   int64_t pl, int64_t pr, cudaStream_t stream) {
  const int64_t hp = h + pt + pb, wp = w + pl + pr, total = n * h * w * c;
  if (total == 0) return;
  crop_kernel<<<grid_for(total), kThreads, 0, stream>>>(xp, x, n, h, w, c, pt, pl, hp, wp);
  TG_CUDA_CHECK_LAUNCH();
}

}  // namespace tg::cuda_kernels

// Layout kernels of the CUDA backend: a tiled 2-D transpose (our (KH, KW, Cin, Cout) filters <-> cuDNN's
// NHWC filter layout (Cout, KH, KW, Cin)) and zero-padding / cropping of NHWC tensors (cuDNN pads
// symmetrically; TensorFlow's SAME puts the odd pixel after, so such convolutions run on a padded copy), for
// elements of any compute dtype T (moved, never converted).
#include <cuda_runtime.h>

#include "src/backend/cuda/cuda_kernels.h"
#include "src/backend/cuda/cuda_launch.h"

namespace tg::cuda_kernels {
namespace {

constexpr int kTile = 32;
constexpr int kTileRows = 8;

// Block (kTile x kTileRows) moves one kTile x kTile tile through shared memory (+1 column: no bank conflicts).
template <typename T>
__global__ void transpose_kernel(const T* src, T* dst, int64_t rows, int64_t cols) {
  __shared__ T tile[kTile][kTile + 1];
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

template <typename T>
__global__ void pad_kernel(int64_t total, const T* x, T* xp, int64_t h, int64_t w, int64_t c, int64_t pt, int64_t pl,
                           int64_t hp, int64_t wp) {
  TG_GRID_STRIDE_LOOP(i, total) {
    int64_t ch = i % c, rest = i / c;
    int64_t col = rest % wp - pl;
    rest /= wp;
    int64_t row = rest % hp - pt;
    int64_t b = rest / hp;
    xp[i] = (row >= 0 && row < h && col >= 0 && col < w) ? x[((b * h + row) * w + col) * c + ch] : from_f32<T>(0.f);
  }
}

template <typename T>
__global__ void crop_kernel(int64_t total, const T* xp, T* x, int64_t h, int64_t w, int64_t c, int64_t pt, int64_t pl,
                            int64_t hp, int64_t wp) {
  TG_GRID_STRIDE_LOOP(i, total) {
    int64_t ch = i % c, rest = i / c;
    int64_t col = rest % w;
    rest /= w;
    int64_t row = rest % h;
    int64_t b = rest / h;
    x[i] = xp[((b * hp + row + pt) * wp + col + pl) * c + ch];
  }
}

}  // namespace

void transpose(DType t, const void* src, void* dst, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows * cols == 0) return;
  TG_CHECK((rows + kTile - 1) / kTile <= 65535, "transpose of {} rows exceeds the grid", rows);
  dim3 grid(static_cast<unsigned>((cols + kTile - 1) / kTile), static_cast<unsigned>((rows + kTile - 1) / kTile));
  dispatch_float(t, "transpose", [&](auto tag) {
    using T = decltype(tag);
    transpose_kernel<T>
        <<<grid, dim3(kTile, kTileRows), 0, stream>>>(static_cast<const T*>(src), static_cast<T*>(dst), rows, cols);
    TG_CUDA_CHECK_LAUNCH_OF("transpose");
  });
}

void pad_nhwc(DType t, const void* x, void* xp, int64_t n, int64_t h, int64_t w, int64_t c, int64_t pt, int64_t pb,
              int64_t pl, int64_t pr, cudaStream_t stream) {
  const int64_t hp = h + pt + pb, wp = w + pl + pr;
  dispatch_float(t, "pad_nhwc", [&](auto tag) {
    using T = decltype(tag);
    linear_kernel("pad_nhwc", pad_kernel<T>, n * hp * wp * c, stream, static_cast<const T*>(x), static_cast<T*>(xp), h,
                  w, c, pt, pl, hp, wp);
  });
}

void crop_nhwc(DType t, const void* xp, void* x, int64_t n, int64_t h, int64_t w, int64_t c, int64_t pt, int64_t pb,
               int64_t pl, int64_t pr, cudaStream_t stream) {
  const int64_t hp = h + pt + pb, wp = w + pl + pr;
  dispatch_float(t, "crop_nhwc", [&](auto tag) {
    using T = decltype(tag);
    linear_kernel("crop_nhwc", crop_kernel<T>, n * h * w * c, stream, static_cast<const T*>(xp), static_cast<T*>(x), h,
                  w, c, pt, pl, hp, wp);
  });
}

}  // namespace tg::cuda_kernels

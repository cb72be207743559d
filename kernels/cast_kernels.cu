// Mixed-precision kernels of the CUDA backend: cast between the compute dtypes (the per-step f16/bf16 copy of
// the f32 master weights, activations at the net's ends) and unscale_and_check (a loss-scaled f16/bf16/f32
// gradient to f32, flagging a non-finite product for the dynamic loss scale). Both convert through f32 with
// round to nearest even (src/backend/cuda/cuda_launch.h); launchers in src/backend/cuda/cuda_kernels.h.
#include <cuda_runtime.h>

#include "src/backend/cuda/cuda_kernels.h"
#include "src/backend/cuda/cuda_launch.h"

namespace tg::cuda_kernels {
namespace {

template <typename D, typename S>
__global__ void cast_kernel(int64_t n, const S* src, D* dst) {
  TG_GRID_STRIDE_LOOP(i, n) dst[i] = from_f32<D>(to_f32(src[i]));
}

// Every thread that sees a non-finite product writes 1: a benign race (all write the same value), no atomics.
template <typename S>
__global__ void unscale_and_check_kernel(int64_t n, const S* src, float scale, float* dst, int32_t* found) {
  bool bad = false;
  TG_GRID_STRIDE_LOOP(i, n) {
    const float v = to_f32(src[i]) * scale;
    dst[i] = v;
    bad |= !isfinite(v);
  }
  if (bad) *found = 1;
}

}  // namespace

void cast(DType dst_t, void* dst, DType src_t, const void* src, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  if (dst_t == src_t) {
    dispatch_float(dst_t, "cast", [](auto) {});  // the dtype check
    TG_CUDA_CHECK(
        cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * dtype_size(dst_t), cudaMemcpyDeviceToDevice, stream));
    return;
  }
  dispatch_float(dst_t, "cast (destination)", [&](auto dtag) {
    using D = decltype(dtag);
    dispatch_float(src_t, "cast (source)", [&](auto stag) {
      using S = decltype(stag);
      linear_kernel("cast", cast_kernel<D, S>, n, stream, static_cast<const S*>(src), static_cast<D*>(dst));
    });
  });
}

void unscale_and_check(DType src_t, const void* src, float scale, float* dst, int32_t* found, int64_t n,
                       cudaStream_t stream) {
  dispatch_float(src_t, "unscale_and_check", [&](auto tag) {
    using S = decltype(tag);
    linear_kernel("unscale_and_check", unscale_and_check_kernel<S>, n, stream, static_cast<const S*>(src), scale, dst,
                  found);
  });
}

}  // namespace tg::cuda_kernels

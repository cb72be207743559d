// Max and average pooling of NHWC tensors on the CUDA backend, written directly rather than through cuDNN:
// cuDNN pooling pads symmetrically, while TensorFlow's SAME padding puts the odd pixel after (before/after
// come from the PoolDesc), and TF's average divides by the number of in-image cells. Max ignores padded
// cells. The backward gathers (one thread per input element, no atomics: deterministic): for max it
// recomputes each covering window's arg-max (first maximum in row-major window order), so the forward
// keeps no workspace. x, y, dy, dx have the compute dtype T (f32, f16, bf16): compared and summed in f32; a thread
// handles 16 bytes of consecutive channels when C allows (vector loads and stores).
#include <cuda_runtime.h>

#include <cfloat>

#include "src/backend/cuda/cuda_kernels.h"
#include "src/backend/cuda/cuda_launch.h"

namespace tg::cuda_kernels {
namespace {

struct Window {
  int64_t h0, h1, w0, w1;  // in-image rows [h0, h1), columns [w0, w1)
};

__device__ Window window_of(const PoolDesc& d, int64_t oh, int64_t ow) {
  const int64_t hs = oh * d.stride_h - d.pad_top, ws = ow * d.stride_w - d.pad_left;
  return {max(hs, int64_t{0}), min(hs + d.kh, d.h), max(ws, int64_t{0}), min(ws + d.kw, d.w)};
}

// One thread per N consecutive channels of an output (N = 1, or 16 bytes of T when C is a multiple of it and the
// tensors are 16-byte aligned): the window's cells read as whole vectors, each channel compared or summed in f32 in
// the same order either way (the same bits).
template <typename T, int N>
__global__ void pool_forward_kernel(int64_t total, PoolDesc d, const T* __restrict__ x, T* __restrict__ y) {
  const int64_t groups = d.c / N;
  TG_GRID_STRIDE_LOOP(v, total / N) {
    const int64_t ch = v % groups * N;
    int64_t rest = v / groups;
    const int64_t ow = rest % d.out_w;
    rest /= d.out_w;
    const int64_t oh = rest % d.out_h, b = rest / d.out_h;
    const Window win = window_of(d, oh, ow);
    float acc[N];
#pragma unroll
    for (int k = 0; k < N; ++k) acc[k] = d.kind == PoolKind::kMax ? -FLT_MAX : 0.f;
    bool any = false;
    for (int64_t h = win.h0; h < win.h1; ++h)
      for (int64_t w = win.w0; w < win.w1; ++w) {
        const auto cell = load_vec<N>(x, ((b * d.h + h) * d.w + w) * d.c + ch);
#pragma unroll
        for (int k = 0; k < N; ++k) {
          const float val = to_f32(cell.v[k]);
          if (d.kind == PoolKind::kMax) {
            if (!any || val > acc[k]) acc[k] = val;
          } else {
            acc[k] += val;
          }
        }
        any = true;
      }
    const int64_t count = d.kind == PoolKind::kAvgIncludePad ? d.kh * d.kw : (win.h1 - win.h0) * (win.w1 - win.w0);
    Vec<T, N> out;
#pragma unroll
    for (int k = 0; k < N; ++k)
      out.v[k] = from_f32<T>(d.kind == PoolKind::kMax ? (any ? acc[k] : 0.f)
                                                      : (count > 0 ? acc[k] / static_cast<float>(count) : 0.f));
    store_vec(y, v * N, out);
  }
}

// One thread per N consecutive channels of an input cell: the gradient gathered from every output whose window
// covers it; for max, each covering window's arg-max is recomputed per channel (first maximum in row-major order).
template <typename T, int N>
__global__ void pool_backward_kernel(int64_t total, PoolDesc d, const T* __restrict__ x, const T* __restrict__ dy,
                                     T* __restrict__ dx) {
  const int64_t groups = d.c / N;
  TG_GRID_STRIDE_LOOP(v, total / N) {
    const int64_t ch = v % groups * N;
    int64_t rest = v / groups;
    const int64_t w = rest % d.w;
    rest /= d.w;
    const int64_t h = rest % d.h, b = rest / d.h;
    // Output rows whose window [oh*s - pad, oh*s - pad + k) contains h.
    const int64_t hp = h + d.pad_top, wp = w + d.pad_left;
    const int64_t oh0 = hp - d.kh + 1 > 0 ? (hp - d.kh + 1 + d.stride_h - 1) / d.stride_h : 0;
    const int64_t oh1 = min(hp / d.stride_h + 1, d.out_h);
    const int64_t ow0 = wp - d.kw + 1 > 0 ? (wp - d.kw + 1 + d.stride_w - 1) / d.stride_w : 0;
    const int64_t ow1 = min(wp / d.stride_w + 1, d.out_w);
    float g[N];
#pragma unroll
    for (int k = 0; k < N; ++k) g[k] = 0.f;
    for (int64_t oh = oh0; oh < oh1; ++oh)
      for (int64_t ow = ow0; ow < ow1; ++ow) {
        const auto gy = load_vec<N>(dy, ((b * d.out_h + oh) * d.out_w + ow) * d.c + ch);
        const Window win = window_of(d, oh, ow);
        if (d.kind == PoolKind::kMax) {
          int64_t best[N];
          float best_v[N];
#pragma unroll
          for (int k = 0; k < N; ++k) best[k] = -1, best_v[k] = -FLT_MAX;
          for (int64_t hh = win.h0; hh < win.h1; ++hh)
            for (int64_t ww = win.w0; ww < win.w1; ++ww) {
              const auto cell = load_vec<N>(x, ((b * d.h + hh) * d.w + ww) * d.c + ch);
#pragma unroll
              for (int k = 0; k < N; ++k) {
                const float val = to_f32(cell.v[k]);
                if (best[k] < 0 || val > best_v[k]) best[k] = hh * d.w + ww, best_v[k] = val;
              }
            }
#pragma unroll
          for (int k = 0; k < N; ++k)
            if (best[k] == h * d.w + w) g[k] += to_f32(gy.v[k]);
        } else {
          const float count = static_cast<float>(
              d.kind == PoolKind::kAvgIncludePad ? d.kh * d.kw : (win.h1 - win.h0) * (win.w1 - win.w0));
#pragma unroll
          for (int k = 0; k < N; ++k) g[k] += to_f32(gy.v[k]) / count;
        }
      }
    Vec<T, N> out;
#pragma unroll
    for (int k = 0; k < N; ++k) out.v[k] = from_f32<T>(g[k]);
    store_vec(dx, v * N, out);
  }
}

// The vector width a pooling of C channels takes: 16 bytes of T when C is a multiple of it and every pointer is
// 16-byte aligned, else 1.
template <typename T>
bool pool_vectors(const PoolDesc& d, const void* a, const void* b, const void* c = nullptr) {
  constexpr int N = vec_width<T>();
  return d.c % N == 0 && aligned16(a, b) && (c == nullptr || aligned16(c));
}

}  // namespace

void pool_forward(DType t, const PoolDesc& d, const void* x, void* y, cudaStream_t stream) {
  dispatch_float(t, "pool_forward", [&](auto tag) {
    using T = decltype(tag);
    constexpr int N = vec_width<T>();
    vector_kernel<N>("pool_forward", pool_forward_kernel<T, N>, pool_forward_kernel<T, 1>, pool_vectors<T>(d, x, y),
                     d.n * d.out_h * d.out_w * d.c, stream, d, static_cast<const T*>(x), static_cast<T*>(y));
  });
}

void pool_backward(DType t, const PoolDesc& d, const void* x, const void* dy, void* dx, cudaStream_t stream) {
  dispatch_float(t, "pool_backward", [&](auto tag) {
    using T = decltype(tag);
    constexpr int N = vec_width<T>();
    vector_kernel<N>("pool_backward", pool_backward_kernel<T, N>, pool_backward_kernel<T, 1>,
                     pool_vectors<T>(d, x, dy, dx), d.n * d.h * d.w * d.c, stream, d, static_cast<const T*>(x),
                     static_cast<const T*>(dy), static_cast<T*>(dx));
  });
}

}  // namespace tg::cuda_kernels

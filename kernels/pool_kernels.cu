// Max and average pooling of NHWC tensors on the CUDA backend, written directly rather than through cuDNN:
// cuDNN pooling pads symmetrically, while TensorFlow's SAME padding puts the odd pixel after (before/after
// come from the PoolDesc), and TF's average divides by the number of in-image cells. Max ignores padded
// cells. The backward gathers (one thread per input element, no atomics: deterministic): for max it
// recomputes each covering window's arg-max (first maximum in row-major window order), so the forward
// keeps no workspace. x, y, dy, dx have the compute dtype T (f32, f16, bf16): compared and summed in f32.
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

// Position (h * W + w) of the first maximum of window (b, oh, ow, ch); -1 if the window is empty.
template <typename T>
__device__ int64_t window_argmax(const PoolDesc& d, const T* x, int64_t b, int64_t oh, int64_t ow, int64_t ch) {
  Window win = window_of(d, oh, ow);
  int64_t best = -1;
  float best_v = -FLT_MAX;
  for (int64_t h = win.h0; h < win.h1; ++h)
    for (int64_t w = win.w0; w < win.w1; ++w) {
      float v = to_f32(x[((b * d.h + h) * d.w + w) * d.c + ch]);
      if (best < 0 || v > best_v) best = h * d.w + w, best_v = v;
    }
  return best;
}

template <typename T>
__global__ void pool_forward_kernel(int64_t total, PoolDesc d, const T* x, T* y) {
  TG_GRID_STRIDE_LOOP(i, total) {
    int64_t ch = i % d.c, rest = i / d.c;
    int64_t ow = rest % d.out_w;
    rest /= d.out_w;
    int64_t oh = rest % d.out_h, b = rest / d.out_h;
    Window win = window_of(d, oh, ow);
    if (d.kind == PoolKind::kMax) {
      float m = -FLT_MAX;
      bool any = false;
      for (int64_t h = win.h0; h < win.h1; ++h)
        for (int64_t w = win.w0; w < win.w1; ++w) {
          float v = to_f32(x[((b * d.h + h) * d.w + w) * d.c + ch]);
          if (!any || v > m) m = v, any = true;
        }
      y[i] = from_f32<T>(any ? m : 0.f);
    } else {
      float s = 0.f;
      for (int64_t h = win.h0; h < win.h1; ++h)
        for (int64_t w = win.w0; w < win.w1; ++w) s += to_f32(x[((b * d.h + h) * d.w + w) * d.c + ch]);
      int64_t count = (win.h1 - win.h0) * (win.w1 - win.w0);
      y[i] = from_f32<T>(count > 0 ? s / static_cast<float>(count) : 0.f);
    }
  }
}

template <typename T>
__global__ void pool_backward_kernel(int64_t total, PoolDesc d, const T* x, const T* dy, T* dx) {
  TG_GRID_STRIDE_LOOP(i, total) {
    int64_t ch = i % d.c, rest = i / d.c;
    int64_t w = rest % d.w;
    rest /= d.w;
    int64_t h = rest % d.h, b = rest / d.h;
    // Output rows whose window [oh*s - pad, oh*s - pad + k) contains h.
    const int64_t hp = h + d.pad_top, wp = w + d.pad_left;
    int64_t oh0 = hp - d.kh + 1 > 0 ? (hp - d.kh + 1 + d.stride_h - 1) / d.stride_h : 0;
    int64_t oh1 = min(hp / d.stride_h + 1, d.out_h);
    int64_t ow0 = wp - d.kw + 1 > 0 ? (wp - d.kw + 1 + d.stride_w - 1) / d.stride_w : 0;
    int64_t ow1 = min(wp / d.stride_w + 1, d.out_w);
    float g = 0.f;
    for (int64_t oh = oh0; oh < oh1; ++oh)
      for (int64_t ow = ow0; ow < ow1; ++ow) {
        const float gy = to_f32(dy[((b * d.out_h + oh) * d.out_w + ow) * d.c + ch]);
        if (d.kind == PoolKind::kMax) {
          if (window_argmax(d, x, b, oh, ow, ch) == h * d.w + w) g += gy;
        } else {
          Window win = window_of(d, oh, ow);
          g += gy / static_cast<float>((win.h1 - win.h0) * (win.w1 - win.w0));
        }
      }
    dx[i] = from_f32<T>(g);
  }
}

}  // namespace

void pool_forward(DType t, const PoolDesc& d, const void* x, void* y, cudaStream_t stream) {
  dispatch_float(t, "pool_forward", [&](auto tag) {
    using T = decltype(tag);
    linear_kernel("pool_forward", pool_forward_kernel<T>, d.n * d.out_h * d.out_w * d.c, stream, d,
                  static_cast<const T*>(x), static_cast<T*>(y));
  });
}

void pool_backward(DType t, const PoolDesc& d, const void* x, const void* dy, void* dx, cudaStream_t stream) {
  dispatch_float(t, "pool_backward", [&](auto tag) {
    using T = decltype(tag);
    linear_kernel("pool_backward", pool_backward_kernel<T>, d.n * d.h * d.w * d.c, stream, d, static_cast<const T*>(x),
                  static_cast<const T*>(dy), static_cast<T*>(dx));
  });
}

}  // namespace tg::cuda_kernels

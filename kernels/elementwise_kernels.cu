// Element-wise kernels of the CUDA backend: fill, axpy and scale (f32: parameters and gradients), and over
// activations of the compute dtype T (f32, f16, bf16; computed in f32, rounded once when stored): add, ReLU
// forward/backward, inverted dropout with Philox masks (the CPU backend's bits: mask = philox_uniform(key, i,
// step, salt, 0) < keep_prob, y = x * (1 / keep_prob)), and a row-broadcast bias add. Launchers in
// src/backend/cuda/cuda_kernels.h; each is one launch (src/backend/cuda/cuda_launch.h). The element-wise kernels
// move 16 bytes per load and store (vector_kernel: N elements of the narrowest type per thread; the outputs of add,
// ReLU and dropout may be their input (the memory plan runs them in place), so those pointers are not __restrict__,
// each element being read before it is written) when every
// pointer is 16-byte aligned, else one element at a time; both compute each element alike (the same bits).
#include <cuda_runtime.h>

#include "src/backend/cuda/cuda_kernels.h"
#include "src/backend/cuda/cuda_launch.h"
#include "terngrad/math/activation_math.h"

namespace tg::cuda_kernels {
namespace {

template <int N>
__global__ void fill_kernel(int64_t n, float* __restrict__ p, float value) {
  TG_VECTOR_LOOP(i, n, N) {
    Vec<float, N> o;
#pragma unroll
    for (int k = 0; k < N; ++k) o.v[k] = value;
    store_vec(p, i, o);
  }
  TG_VECTOR_TAIL(i, n, N) p[i] = value;
}

template <int N>
__global__ void axpy_kernel(int64_t n, float alpha, const float* __restrict__ x, float* __restrict__ y) {
  TG_VECTOR_LOOP(i, n, N) {
    const auto vx = load_vec<N>(x, i);
    auto vy = load_vec<N>(y, i);
#pragma unroll
    for (int k = 0; k < N; ++k) vy.v[k] += alpha * vx.v[k];
    store_vec(y, i, vy);
  }
  TG_VECTOR_TAIL(i, n, N) y[i] += alpha * x[i];
}

template <int N>
__global__ void scale_kernel(int64_t n, float alpha, float* __restrict__ x) {
  TG_VECTOR_LOOP(i, n, N) {
    auto v = load_vec<N>(x, i);
#pragma unroll
    for (int k = 0; k < N; ++k) v.v[k] *= alpha;
    store_vec(x, i, v);
  }
  TG_VECTOR_TAIL(i, n, N) x[i] *= alpha;
}

template <typename T, int N>
__global__ void add_kernel(int64_t n, const T* a, const T* b, T* out) {  // out may be a or b (in place)
  TG_VECTOR_LOOP(i, n, N) {
    const auto va = load_vec<N>(a, i), vb = load_vec<N>(b, i);
    Vec<T, N> o;
#pragma unroll
    for (int k = 0; k < N; ++k) o.v[k] = from_f32<T>(to_f32(va.v[k]) + to_f32(vb.v[k]));
    store_vec(out, i, o);
  }
  TG_VECTOR_TAIL(i, n, N) out[i] = from_f32<T>(to_f32(a[i]) + to_f32(b[i]));
}

template <typename T, int N>
__global__ void relu_forward_kernel(int64_t n, const T* x, T* y) {  // y may be x (in place)
  TG_VECTOR_LOOP(i, n, N) {
    const auto vx = load_vec<N>(x, i);
    Vec<T, N> o;
#pragma unroll
    for (int k = 0; k < N; ++k) o.v[k] = from_f32<T>(relu_one(to_f32(vx.v[k])));
    store_vec(y, i, o);
  }
  TG_VECTOR_TAIL(i, n, N) y[i] = from_f32<T>(relu_one(to_f32(x[i])));
}

template <typename T, int N>
__global__ void relu_backward_kernel(int64_t n, const T* __restrict__ y, const T* __restrict__ dy, T* __restrict__ dx) {
  TG_VECTOR_LOOP(i, n, N) {
    const auto vy = load_vec<N>(y, i), vdy = load_vec<N>(dy, i);
    Vec<T, N> o;
#pragma unroll
    for (int k = 0; k < N; ++k) o.v[k] = from_f32<T>(relu_grad_one(to_f32(vy.v[k]), to_f32(vdy.v[k])));
    store_vec(dx, i, o);
  }
  TG_VECTOR_TAIL(i, n, N) dx[i] = from_f32<T>(relu_grad_one(to_f32(y[i]), to_f32(dy[i])));
}

template <typename T>
__device__ __forceinline__ void dropout_one(int64_t i, T x, T* y, uint8_t* mask, float keep_prob, float inv,
                                            PhiloxKey key, uint32_t step, uint32_t salt) {
  const uint8_t keep = philox_uniform(key, static_cast<uint64_t>(i), step, salt, 0) < keep_prob;
  *mask = keep;
  *y = from_f32<T>(keep ? to_f32(x) * inv : 0.f);
}

template <typename T, int N>
__global__ void dropout_forward_kernel(int64_t n, const T* x, T* y,  // y may be x (in place)
                                       uint8_t* __restrict__ mask, float keep_prob, float inv, PhiloxKey key,
                                       uint32_t step, uint32_t salt) {
  TG_VECTOR_LOOP(i, n, N) {
    const auto vx = load_vec<N>(x, i);
    Vec<T, N> o;
    Vec<uint8_t, N> m;
#pragma unroll
    for (int k = 0; k < N; ++k) dropout_one(i + k, vx.v[k], &o.v[k], &m.v[k], keep_prob, inv, key, step, salt);
    store_vec(y, i, o);
    store_vec(mask, i, m);
  }
  TG_VECTOR_TAIL(i, n, N) dropout_one(i, x[i], &y[i], &mask[i], keep_prob, inv, key, step, salt);
}

template <typename T, int N>
__global__ void dropout_backward_kernel(int64_t n, const T* __restrict__ dy, const uint8_t* __restrict__ mask,
                                        float inv, T* __restrict__ dx) {
  TG_VECTOR_LOOP(i, n, N) {
    const auto vdy = load_vec<N>(dy, i);
    const auto m = load_vec<N>(mask, i);
    Vec<T, N> o;
#pragma unroll
    for (int k = 0; k < N; ++k) o.v[k] = from_f32<T>(m.v[k] ? to_f32(vdy.v[k]) * inv : 0.f);
    store_vec(dx, i, o);
  }
  TG_VECTOR_TAIL(i, n, N) dx[i] = from_f32<T>(mask[i] ? to_f32(dy[i]) * inv : 0.f);
}

template <typename T>
__global__ void add_bias_rows_kernel(int64_t n, T* y, const T* b, int64_t cols) {
  TG_GRID_STRIDE_LOOP(i, n) y[i] = from_f32<T>(to_f32(y[i]) + to_f32(b[i % cols]));
}

}  // namespace

void fill_f32(float* p, int64_t n, float value, cudaStream_t stream) {
  constexpr int N = vec_width<float>();
  vector_kernel<N>("fill", fill_kernel<N>, fill_kernel<1>, aligned16(p), n, stream, p, value);
}

void axpy_f32(float alpha, const float* x, float* y, int64_t n, cudaStream_t stream) {
  constexpr int N = vec_width<float>();
  vector_kernel<N>("axpy", axpy_kernel<N>, axpy_kernel<1>, aligned16(x, y), n, stream, alpha, x, y);
}

void scale_f32(float alpha, float* x, int64_t n, cudaStream_t stream) {
  constexpr int N = vec_width<float>();
  vector_kernel<N>("scale", scale_kernel<N>, scale_kernel<1>, aligned16(x), n, stream, alpha, x);
}

void add(DType t, const void* a, const void* b, void* out, int64_t n, cudaStream_t stream) {
  dispatch_float(t, "add", [&](auto tag) {
    using T = decltype(tag);
    constexpr int N = vec_width<T>();
    vector_kernel<N>("add", add_kernel<T, N>, add_kernel<T, 1>, aligned16(a, b, out), n, stream,
                     static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(out));
  });
}

void relu_forward(DType t, const void* x, void* y, int64_t n, cudaStream_t stream) {
  dispatch_float(t, "relu_forward", [&](auto tag) {
    using T = decltype(tag);
    constexpr int N = vec_width<T>();
    vector_kernel<N>("relu_forward", relu_forward_kernel<T, N>, relu_forward_kernel<T, 1>, aligned16(x, y), n, stream,
                     static_cast<const T*>(x), static_cast<T*>(y));
  });
}

void relu_backward(DType t, const void* y, const void* dy, void* dx, int64_t n, cudaStream_t stream) {
  dispatch_float(t, "relu_backward", [&](auto tag) {
    using T = decltype(tag);
    constexpr int N = vec_width<T>();
    vector_kernel<N>("relu_backward", relu_backward_kernel<T, N>, relu_backward_kernel<T, 1>, aligned16(y, dy, dx), n,
                     stream, static_cast<const T*>(y), static_cast<const T*>(dy), static_cast<T*>(dx));
  });
}

void dropout_forward(DType t, const void* x, void* y, uint8_t* mask, int64_t n, float keep_prob, PhiloxKey key,
                     uint32_t step, uint32_t salt, cudaStream_t stream) {
  const float inv = 1.f / keep_prob;  // computed on the host, as the CPU backend does
  dispatch_float(t, "dropout_forward", [&](auto tag) {
    using T = decltype(tag);
    constexpr int N = vec_width<T, uint8_t>();
    vector_kernel<N>("dropout_forward", dropout_forward_kernel<T, N>, dropout_forward_kernel<T, 1>,
                     aligned16(x, y, mask), n, stream, static_cast<const T*>(x), static_cast<T*>(y), mask, keep_prob,
                     inv, key, step, salt);
  });
}

void dropout_backward(DType t, const void* dy, const uint8_t* mask, float keep_prob, void* dx, int64_t n,
                      cudaStream_t stream) {
  const float inv = 1.f / keep_prob;
  dispatch_float(t, "dropout_backward", [&](auto tag) {
    using T = decltype(tag);
    constexpr int N = vec_width<T, uint8_t>();
    vector_kernel<N>("dropout_backward", dropout_backward_kernel<T, N>, dropout_backward_kernel<T, 1>,
                     aligned16(dy, mask, dx), n, stream, static_cast<const T*>(dy), mask, inv, static_cast<T*>(dx));
  });
}

void add_bias_rows(DType t, void* y, const void* b, int64_t rows, int64_t cols, cudaStream_t stream) {
  dispatch_float(t, "add_bias_rows", [&](auto tag) {
    using T = decltype(tag);
    linear_kernel("add_bias_rows", add_bias_rows_kernel<T>, rows * cols, stream, static_cast<T*>(y),
                  static_cast<const T*>(b), cols);
  });
}

}  // namespace tg::cuda_kernels

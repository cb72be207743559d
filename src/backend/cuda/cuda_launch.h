// Launch helpers shared by kernels/*.cu: grid-stride loops over int64 element counts with a capped grid
// (every kernel loops, so any n fits); linear_kernel, the one launch of an element-wise kernel (tiny-cuda-nn's
// linear_kernel: nothing for n == 0, launch, check); and the compute dtypes of the activations (f32, f16,
// bf16) as device storage types, converted to and from f32 in registers (every op computes in f32), with
// dispatch_float to instantiate a kernel for a tensor's dtype.
#pragma once

#include <algorithm>
#include <cstdint>

#include "terngrad/core/dtype.h"
#include "terngrad/core/error.h"

namespace tg::cuda_kernels {

constexpr int kThreads = 256;  // threads per block of the element-wise kernels
constexpr int64_t kMaxBlocks = 65536;

inline unsigned grid_for(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
}

}  // namespace tg::cuda_kernels

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "terngrad/backend/cuda_check.h"

// for (int64_t i = first; i < n; i += stride) over the whole grid
#define TG_GRID_STRIDE_LOOP(i, n)                                                        \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

namespace tg::cuda_kernels {

// Launches kernel(n, args...) over n elements on `stream` (grid_for(n) blocks of kThreads; the kernel
// grid-strides) and checks the launch, naming `launcher`. n <= 0 launches nothing.
template <typename... KernelArgs, typename... Args>
void linear_kernel(const char* launcher, void (*kernel)(int64_t, KernelArgs...), int64_t n, cudaStream_t stream,
                   Args... args) {
  if (n <= 0) return;
  kernel<<<grid_for(n), kThreads, 0, stream>>>(n, args...);
  ::tg::detail::check_launch(launcher, __FILE__, __LINE__);
}

// ---- 16-byte vectors -----------------------------------------------------------------------------------------
// Vec<T, N>: N elements of T loaded or stored as whole 16-byte words (N * sizeof(T) a multiple of 16); Vec<T, 1> is
// one element (the kernels' path for pointers that are not 16-byte aligned). An element-wise kernel over several
// arrays takes N = vec_width<T...>() (16 bytes of its narrowest type) when every pointer is aligned.
template <typename T, int N>
struct alignas(16) Vec {
  static_assert(sizeof(T) * N % 16 == 0, "whole 16-byte words");
  T v[N];
};
template <typename T>
struct Vec<T, 1> {
  T v[1];
};
template <typename... T>
constexpr int vec_width() {
  size_t narrowest = 16;
  ((narrowest = sizeof(T) < narrowest ? sizeof(T) : narrowest), ...);
  return static_cast<int>(16 / narrowest);
}
template <int N, typename T>
__device__ __forceinline__ Vec<T, N> load_vec(const T* __restrict__ p, int64_t i) {
  return *reinterpret_cast<const Vec<T, N>*>(p + i);
}
template <int N, typename T>
__device__ __forceinline__ void store_vec(T* __restrict__ p, int64_t i, const Vec<T, N>& v) {
  *reinterpret_cast<Vec<T, N>*>(p + i) = v;
}
inline bool aligned16() { return true; }
template <typename P, typename... Ps>
bool aligned16(const P* p, const Ps*... ps) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0 && aligned16(ps...);
}

// for (i = first element of a whole N-vector of this thread; ...): the vectors of [0, n - n % N), grid-striding; then
// TG_VECTOR_TAIL visits the last n % N elements one by one.
#define TG_VECTOR_LOOP(i, n, N)                                                                         \
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * (N); i + (N) <= (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x * (N))
#define TG_VECTOR_TAIL(i, n, N)                                                                            \
  for (int64_t i = (n) / (N) * (N) + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// Launches vec (kernel<..., N>) when `aligned`, else scalar (kernel<..., 1>), over n elements (grid for n / N
// threads), and checks the launch naming `launcher`. n <= 0 launches nothing.
template <int N, typename... KernelArgs, typename... Args>
void vector_kernel(const char* launcher, void (*vec)(int64_t, KernelArgs...), void (*scalar)(int64_t, KernelArgs...),
                   bool aligned, int64_t n, cudaStream_t stream, Args... args) {
  if (n <= 0) return;
  if (aligned)
    vec<<<grid_for((n + N - 1) / N), kThreads, 0, stream>>>(n, args...);
  else
    scalar<<<grid_for(n), kThreads, 0, stream>>>(n, args...);
  ::tg::detail::check_launch(launcher, __FILE__, __LINE__);
}

// Storage <-> f32. __float2half_rn / __float2bfloat16_rn round to nearest even (overflow to +-Inf for f16),
// as dtype.h's float_to_half / float_to_bf16 do; only NaN payloads may differ.
__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Calls fn(T{}) with T the storage type of dtype t (float, __half, __nv_bfloat16); any other dtype is an
// error naming `op`.
template <typename Fn>
void dispatch_float(DType t, const char* op, Fn&& fn) {
  switch (t) {
    case DType::kF32:
      return fn(float{});
    case DType::kF16:
      return fn(__half{});
    case DType::kBf16:
      return fn(__nv_bfloat16{});
    default:
      TG_THROW("{}: dtype {} is not supported by the CUDA backend (f32, f16, bf16)", op, dtype_name(t));
  }
}

}  // namespace tg::cuda_kernels
#endif

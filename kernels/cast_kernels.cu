// Mixed-precision kernels of the CUDA backend: cast between the compute dtypes (the per-step f16/bf16 copy of
// the f32 master weights, convolutions' transposed into cuDNN's filter layout in the same pass; activations at the
// net's ends) and unscale_and_check (a loss-scaled f16/bf16/f32
// gradient to f32, flagging a non-finite product for the dynamic loss scale; a table form for a layer's gradients,
// with their weight decay). Both convert through f32 with
// round to nearest even (src/backend/cuda/cuda_launch.h), 16 bytes per load and store when aligned; launchers in
// src/backend/cuda/cuda_kernels.h.
#include <cuda_runtime.h>

#include "src/backend/cuda/cuda_kernels.h"
#include "src/backend/cuda/cuda_launch.h"

namespace tg::cuda_kernels {
namespace {

// 16 bytes of the narrower type per load and store when both pointers are 16-byte aligned (vector_kernel).
template <typename D, typename S, int N>
__global__ void cast_kernel(int64_t n, const S* __restrict__ src, D* __restrict__ dst) {
  TG_VECTOR_LOOP(i, n, N) {
    const auto v = load_vec<N>(src, i);
    Vec<D, N> o;
#pragma unroll
    for (int k = 0; k < N; ++k) o.v[k] = from_f32<D>(to_f32(v.v[k]));
    store_vec(dst, i, o);
  }
  TG_VECTOR_TAIL(i, n, N) dst[i] = from_f32<D>(to_f32(src[i]));
}

// The source index of output element i of a transposing table item: output (c, r) of the (cols x rows) result
// from input (r, c) of the (rows x cols) source; i itself for an item in order (rows = 0).
__device__ __forceinline__ int64_t table_source(int64_t i, int64_t rows, int64_t cols) {
  return rows > 0 ? (i % rows) * cols + i / rows : i;
}

// The most elements of a table's items (its launch's grid width).
int64_t most_elements(const int64_t* n, int count) {
  int64_t most = 0;
  for (int k = 0; k < count; ++k) most = n[k] > most ? n[k] : most;
  return most;
}

// A table of casts: block row y converts pair y, its blocks grid-striding over that pair's elements. A transposing
// pair (rows > 0) writes in order and reads element (r, o) of the (rows x cols) source for output (o, r).
template <typename D, typename S>
__global__ void cast_table_kernel(CastTable t) {
  const int k = blockIdx.y;
  const S* __restrict__ src = static_cast<const S*>(t.src[k]);
  D* __restrict__ dst = static_cast<D*>(t.dst[k]);
  const int64_t n = t.n[k], rows = t.rows[k], cols = rows > 0 ? n / rows : 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = from_f32<D>(to_f32(src[table_source(i, rows, cols)]));
}

// Every thread that sees a non-finite product writes 1: a benign race (all write the same value), no atomics.
// dst may be src (f32): each element is read before it is written.
template <typename S, int N>
__global__ void unscale_and_check_kernel(int64_t n, const S* __restrict__ src, float scale, float* __restrict__ dst,
                                         int32_t* found) {
  bool bad = false;
  TG_VECTOR_LOOP(i, n, N) {
    const auto v = load_vec<N>(src, i);
    Vec<float, N> o;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      o.v[k] = to_f32(v.v[k]) * scale;
      bad |= !isfinite(o.v[k]);
    }
    store_vec(dst, i, o);
  }
  TG_VECTOR_TAIL(i, n, N) {
    const float v = to_f32(src[i]) * scale;
    dst[i] = v;
    bad |= !isfinite(v);
  }
  if (bad) *found = 1;
}

// The table form: block row y unscales tensor y (its blocks grid-striding over it; a transposing one writes in order
// and reads across), then adds its weight decay. The product is rounded on its own (__fmul_rn: never contracted
// into the decay's add), as unscale_and_check_kernel writes it before axpy_kernel reads it. src may be dst (f32, in
// order).
template <typename S>
__global__ void unscale_table_kernel(UnscaleTable t, float scale, int32_t* found) {
  const int k = blockIdx.y;
  const S* src = static_cast<const S*>(t.src[k]);
  float* dst = t.dst[k];
  const float* w = t.decayed[k];
  const float decay = t.decay[k];
  const int64_t n = t.n[k], rows = t.rows[k], cols = rows > 0 ? n / rows : 0;
  bool bad = false;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = __fmul_rn(to_f32(src[table_source(i, rows, cols)]), scale);
    bad |= !isfinite(v);
    float o = v;
    if (w) o += decay * w[i];
    dst[i] = o;
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
      constexpr int N = vec_width<D, S>();
      vector_kernel<N>("cast", cast_kernel<D, S, N>, cast_kernel<D, S, 1>, aligned16(src, dst), n, stream,
                       static_cast<const S*>(src), static_cast<D*>(dst));
    });
  });
}

void cast_table(DType dst_t, DType src_t, const CastTable& table, cudaStream_t stream) {
  if (table.count <= 0) return;
  const int64_t most = most_elements(table.n, table.count);
  if (most == 0) return;
  dispatch_float(dst_t, "cast_table (destination)", [&](auto dtag) {
    using D = decltype(dtag);
    dispatch_float(src_t, "cast_table (source)", [&](auto stag) {
      using S = decltype(stag);
      const dim3 grid(grid_for(most), static_cast<unsigned>(table.count));
      cast_table_kernel<D, S><<<grid, kThreads, 0, stream>>>(table);
      ::tg::detail::check_launch("cast_table", __FILE__, __LINE__);
    });
  });
}

void unscale_and_check(DType src_t, const void* src, float scale, float* dst, int32_t* found, int64_t n,
                       cudaStream_t stream) {
  dispatch_float(src_t, "unscale_and_check", [&](auto tag) {
    using S = decltype(tag);
    constexpr int N = vec_width<S, float>();
    vector_kernel<N>("unscale_and_check", unscale_and_check_kernel<S, N>, unscale_and_check_kernel<S, 1>,
                     aligned16(src, dst), n, stream, static_cast<const S*>(src), scale, dst, found);
  });
}

void unscale_and_check_table(DType src_t, const UnscaleTable& table, float scale, int32_t* found, cudaStream_t stream) {
  if (table.count <= 0) return;
  const int64_t most = most_elements(table.n, table.count);
  if (most == 0) return;
  dispatch_float(src_t, "unscale_and_check_table", [&](auto tag) {
    using S = decltype(tag);
    const dim3 grid(grid_for(most), static_cast<unsigned>(table.count));
    unscale_table_kernel<S><<<grid, kThreads, 0, stream>>>(table, scale, found);
    ::tg::detail::check_launch("unscale_and_check_table", __FILE__, __LINE__);
  });
}

}  // namespace tg::cuda_kernels

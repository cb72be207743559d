// The loopback device's reduction: dst[i] = ((s0[i] op s1[i]) op s2[i]) ..., one thread per element (grid-stride),
// each combination rounded as the host's reduce_into: fp32 adds (no contraction: built with -fmad=false), NaN wins a
// max, integer sums wrap, fp16/bf16 sums add in fp32 and round to nearest even once per pair.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "src/comm/cuda_loopback_reduce.h"

namespace tg::comm_detail {

namespace {

struct F32Sum {
  using T = float;
  __device__ static T combine(T a, T b) { return a + b; }
};
struct F32Max {
  using T = float;
  __device__ static T combine(T a, T b) { return (b > a || b != b) ? b : a; }
};
struct I32Sum {
  using T = int32_t;
  __device__ static T combine(T a, T b) {
    return static_cast<int32_t>(static_cast<uint32_t>(a) + static_cast<uint32_t>(b));
  }
};
struct I32Max {
  using T = int32_t;
  __device__ static T combine(T a, T b) { return a > b ? a : b; }
};
struct I8Sum {
  using T = int8_t;
  __device__ static T combine(T a, T b) {
    return static_cast<int8_t>(static_cast<uint8_t>(static_cast<uint8_t>(a) + static_cast<uint8_t>(b)));
  }
};
struct I8Max {
  using T = int8_t;
  __device__ static T combine(T a, T b) { return a > b ? a : b; }
};
struct F16Sum {
  using T = __half;
  __device__ static T combine(T a, T b) { return __float2half_rn(__half2float(a) + __half2float(b)); }
};
struct Bf16Sum {
  using T = __nv_bfloat16;
  __device__ static T combine(T a, T b) { return __float2bfloat16_rn(__bfloat162float(a) + __bfloat162float(b)); }
};

template <typename Op>
__global__ void loopback_reduce_kernel(typename Op::T* dst, LoopbackSources srcs, int64_t count) {
  using T = typename Op::T;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    T acc = static_cast<const T*>(srcs.p[0])[i];
    for (int s = 1; s < srcs.n; ++s) acc = Op::combine(acc, static_cast<const T*>(srcs.p[s])[i]);
    dst[i] = acc;  // after every source's element i was read: dst may be one of them
  }
}

template <typename Op>
int launch(void* dst, const LoopbackSources& srcs, int64_t count, cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((count + kThreads - 1) / kThreads, 4096);
  loopback_reduce_kernel<Op>
      <<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(static_cast<typename Op::T*>(dst), srcs, count);
  return cudaGetLastError();
}

}  // namespace

int launch_loopback_reduce(void* dst, const LoopbackSources& srcs, int64_t count, LoopbackReduceKind kind,
                           void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (kind) {
    case LoopbackReduceKind::kF32Sum:
      return launch<F32Sum>(dst, srcs, count, s);
    case LoopbackReduceKind::kF32Max:
      return launch<F32Max>(dst, srcs, count, s);
    case LoopbackReduceKind::kI32Sum:
      return launch<I32Sum>(dst, srcs, count, s);
    case LoopbackReduceKind::kI32Max:
      return launch<I32Max>(dst, srcs, count, s);
    case LoopbackReduceKind::kI8Sum:
      return launch<I8Sum>(dst, srcs, count, s);
    case LoopbackReduceKind::kI8Max:
      return launch<I8Max>(dst, srcs, count, s);
    case LoopbackReduceKind::kF16Sum:
      return launch<F16Sum>(dst, srcs, count, s);
    case LoopbackReduceKind::kBf16Sum:
      return launch<Bf16Sum>(dst, srcs, count, s);
  }
  return cudaErrorInvalidValue;
}

}  // namespace tg::comm_detail

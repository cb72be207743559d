// CUDA kernels of the ternary gradient codec: scaler (one pass: sum, sum of squares and max|g| per block,
// then one block combines the partials and applies ternary_scaler_from_stats), encode (one thread per Philox
// block of 8 elements, 2 packed bytes), unpack, code sums, decode from int8 sums and from gathered packed
// buffers. The per-element math is the TG_HOST_DEVICE code of terngrad/math/ternary_math.h, so codes and
// decoded values are the CPU's bit for bit (-fmad=false); the scaler uses the same formula over double sums
// added in another order (a fixed grid and tree: the same input always gives the same bits on a device).
// Launchers are declared in terngrad/compress/ternary_cuda.h.
#include <cuda_runtime.h>

#include "terngrad/backend/cuda_check.h"
#include "terngrad/compress/ternary_cuda.h"
#include "terngrad/math/ternary_math.h"

namespace tg {

namespace {

constexpr int kThreads = 256;
constexpr int kScalerBlocks = 512;  // partial results of the scaler's pass

inline cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

inline int grid_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  if (b > 65535LL * 32) b = 65535LL * 32;  // grid-stride loops cover the rest
  return static_cast<int>(b < 1 ? 1 : b);
}

// Workspace layout: partial sums and sums of squares (kScalerBlocks doubles each), partial max bits
// (kScalerBlocks uint32).
struct ScalerWorkspace {
  double* partial_sum;
  double* partial_sumsq;
  unsigned* partial_max;
};

inline ScalerWorkspace scaler_workspace(void* ws) {
  char* p = static_cast<char*>(ws);
  ScalerWorkspace w;
  w.partial_sum = reinterpret_cast<double*>(p);
  w.partial_sumsq = reinterpret_cast<double*>(p + sizeof(double) * kScalerBlocks);
  w.partial_max = reinterpret_cast<unsigned*>(p + 2 * sizeof(double) * kScalerBlocks);
  return w;
}

// Block tree reduction of (sum, sumsq, max bits); thread 0 holds the result. The max is over the bits of
// |g|: for non-negative floats the integer order is the float order and every NaN is above +Inf, so a NaN
// anywhere wins (as on the CPU).
__device__ void block_reduce(double& sum, double& sumsq, unsigned& mx) {
  __shared__ double s_sum[kThreads];
  __shared__ double s_sumsq[kThreads];
  __shared__ unsigned s_max[kThreads];
  s_sum[threadIdx.x] = sum;
  s_sumsq[threadIdx.x] = sumsq;
  s_max[threadIdx.x] = mx;
  __syncthreads();
  for (int o = kThreads / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) {
      s_sum[threadIdx.x] += s_sum[threadIdx.x + o];
      s_sumsq[threadIdx.x] += s_sumsq[threadIdx.x + o];
      s_max[threadIdx.x] = max(s_max[threadIdx.x], s_max[threadIdx.x + o]);
    }
    __syncthreads();
  }
  sum = s_sum[0];
  sumsq = s_sumsq[0];
  mx = s_max[0];
}

// The one pass over g: per-block sum, sum of squares (double; each square is exact) and max bits of |g|.
__global__ void scaler_partials(const float* g, int64_t n, ScalerWorkspace w) {
  double sum = 0.0, sumsq = 0.0;
  unsigned mx = 0;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const float v = g[i];
    const double d = v;
    sum += d;
    sumsq += d * d;
    mx = max(mx, __float_as_uint(v) & 0x7FFFFFFFu);
  }
  block_reduce(sum, sumsq, mx);
  if (threadIdx.x == 0) {
    w.partial_sum[blockIdx.x] = sum;
    w.partial_sumsq[blockIdx.x] = sumsq;
    w.partial_max[blockIdx.x] = mx;
  }
}

// One block: the partials combined, then s = ternary_scaler_from_stats(sigma, max|g|, c) (NaN if not finite).
__global__ void scaler_finish(int64_t n, ScalerWorkspace w, float clip_factor, float* scaler) {
  double sum = 0.0, sumsq = 0.0;
  unsigned mx = 0;
  for (int i = threadIdx.x; i < kScalerBlocks; i += blockDim.x) {
    sum += w.partial_sum[i];
    sumsq += w.partial_sumsq[i];
    mx = max(mx, w.partial_max[i]);
  }
  block_reduce(sum, sumsq, mx);
  if (threadIdx.x == 0)
    *scaler = ternary_scaler_from_stats(ternary_sigma_from_sums(sum, sumsq, n), __uint_as_float(mx), clip_factor);
}

__global__ void zero_scaler(float* scaler) { *scaler = 0.f; }

// One thread per Philox block: elements 8b .. 8b+7, packed bytes 2b and 2b + 1 (the second only if it exists).
__global__ void encode_kernel(const float* g, int64_t n, const float* scaler, PhiloxKey key, uint32_t step,
                              uint32_t tensor, uint8_t* packed) {
  const int64_t nbytes = (n + 3) / 4, blocks = (n + kTernaryBlockElements - 1) / kTernaryBlockElements;
  const float s = *scaler;
  for (int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; b < blocks; b += (int64_t)gridDim.x * blockDim.x) {
    const uint32_t bits = ternarize_pack_block(g, n, b, s, key, step, tensor);
    packed[2 * b] = static_cast<uint8_t>(bits);
    if (2 * b + 1 < nbytes) packed[2 * b + 1] = static_cast<uint8_t>(bits >> 8);
  }
}

__global__ void unpack_kernel(const uint8_t* packed, int64_t n, int8_t* codes) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    codes[i] = static_cast<int8_t>(unpack_ternary(packed, i));
}

__device__ int code_sum(const uint8_t* packed, int64_t stride, int num_workers, int64_t i) {
  int sum = 0;
  for (int w = 0; w < num_workers; ++w) sum += unpack_ternary(packed + w * stride, i);
  return sum;
}

__global__ void sum_codes_kernel(const uint8_t* packed, int64_t stride, int num_workers, int64_t n, int8_t* code_sums) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    code_sums[i] = static_cast<int8_t>(code_sum(packed, stride, num_workers, i));
}

__global__ void decode_sums_kernel(const int8_t* sums, int64_t n, const float* scaler, int num_workers, float* g) {
  const float s = *scaler;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    g[i] = ternary_decode_value(s, sums[i], num_workers);
}

__global__ void decode_gathered_kernel(const uint8_t* gathered, int64_t stride, int num_workers, int64_t n,
                                       const float* scaler, float* g) {
  const float s = *scaler;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    g[i] = ternary_decode_value(s, code_sum(gathered, stride, num_workers, i), num_workers);
}

}  // namespace

size_t ternary_scaler_workspace_bytes_cuda() { return (2 * sizeof(double) + sizeof(unsigned)) * kScalerBlocks; }

void ternary_scaler_cuda(const float* g, int64_t n, float clip_factor, float* scaler, void* workspace, void* stream) {
  cudaStream_t st = as_stream(stream);
  if (n <= 0) {
    zero_scaler<<<1, 1, 0, st>>>(scaler);
    TG_CUDA_CHECK_LAUNCH();
    return;
  }
  const ScalerWorkspace w = scaler_workspace(workspace);
  scaler_partials<<<kScalerBlocks, kThreads, 0, st>>>(g, n, w);
  TG_CUDA_CHECK_LAUNCH();
  scaler_finish<<<1, kThreads, 0, st>>>(n, w, clip_factor, scaler);
  TG_CUDA_CHECK_LAUNCH();
}

void ternary_encode_cuda(const float* g, int64_t n, const float* scaler, PhiloxKey key, uint32_t step, uint32_t tensor,
                         uint8_t* packed, void* stream) {
  if (n <= 0) return;
  const int64_t blocks = (n + kTernaryBlockElements - 1) / kTernaryBlockElements;
  encode_kernel<<<grid_for(blocks), kThreads, 0, as_stream(stream)>>>(g, n, scaler, key, step, tensor, packed);
  TG_CUDA_CHECK_LAUNCH();
}

void ternary_unpack_cuda(const uint8_t* packed, int64_t n, int8_t* codes, void* stream) {
  if (n <= 0) return;
  unpack_kernel<<<grid_for(n), kThreads, 0, as_stream(stream)>>>(packed, n, codes);
  TG_CUDA_CHECK_LAUNCH();
}

void ternary_sum_codes_cuda(const uint8_t* packed, int64_t stride, int num_workers, int64_t n, int8_t* code_sums,
                            void* stream) {
  TG_CHECK(num_workers >= 1 && num_workers <= 127, "ternary code sums: {} workers (an int8 sum holds 1 to 127)",
           num_workers);
  if (n <= 0) return;
  sum_codes_kernel<<<grid_for(n), kThreads, 0, as_stream(stream)>>>(packed, stride, num_workers, n, code_sums);
  TG_CUDA_CHECK_LAUNCH();
}

void ternary_decode_sums_cuda(const int8_t* code_sums, int64_t n, const float* scaler, int num_workers, float* g,
                              void* stream) {
  if (n <= 0) return;
  decode_sums_kernel<<<grid_for(n), kThreads, 0, as_stream(stream)>>>(code_sums, n, scaler, num_workers, g);
  TG_CUDA_CHECK_LAUNCH();
}

void ternary_decode_gathered_cuda(const uint8_t* gathered, int64_t stride, int num_workers, int64_t n,
                                  const float* scaler, float* g, void* stream) {
  if (n <= 0) return;
  decode_gathered_kernel<<<grid_for(n), kThreads, 0, as_stream(stream)>>>(gathered, stride, num_workers, n, scaler, g);
  TG_CUDA_CHECK_LAUNCH();
}

}  // namespace tg

// CUDA kernels of the ternary gradient codec: scaler (two-pass reduction), encode (one thread per packed
// byte, one Philox block per thread), unpack, decode from int8 sums and from gathered packed buffers. The
// per-element math is the TG_HOST_DEVICE code of terngrad/math/ternary_math.h, so the codes are the CPU's
// bit for bit (-fmad=false). Launchers are declared in terngrad/compress/ternary_cuda.h.
#include <cuda_runtime.h>

#include <cfloat>

#include "terngrad/backend/cuda_check.h"
#include "terngrad/compress/ternary_cuda.h"
#include "terngrad/math/ternary_math.h"

namespace tg {

namespace {

constexpr int kThreads = 256;
constexpr int kScalerBlocks = 512;  // partial results per pass

inline cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

inline int grid_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  if (b > 65535LL * 32) b = 65535LL * 32;  // grid-stride loops cover the rest
  return static_cast<int>(b < 1 ? 1 : b);
}

// Workspace layout: partial sums (kScalerBlocks doubles), partial max (kScalerBlocks floats), mean (1 double).
struct ScalerWorkspace {
  double* partial_sum;
  float* partial_max;
  double* mean;
};

inline ScalerWorkspace scaler_workspace(void* ws) {
  char* p = static_cast<char*>(ws);
  ScalerWorkspace w;
  w.partial_sum = reinterpret_cast<double*>(p);
  w.partial_max = reinterpret_cast<float*>(p + sizeof(double) * kScalerBlocks);
  w.mean = reinterpret_cast<double*>(p + (sizeof(double) + sizeof(float)) * kScalerBlocks);
  return w;
}

// Block reduction of (sum, max) in shared memory; thread 0 holds the result.
__device__ void block_reduce(double& sum, float& mx) {
  __shared__ double s_sum[kThreads];
  __shared__ float s_max[kThreads];
  s_sum[threadIdx.x] = sum;
  s_max[threadIdx.x] = mx;
  __syncthreads();
  for (int o = kThreads / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) {
      s_sum[threadIdx.x] += s_sum[threadIdx.x + o];
      float other = s_max[threadIdx.x + o];
      // NaN propagates: a NaN on either side wins.
      if (other > s_max[threadIdx.x] || isnan(other)) s_max[threadIdx.x] = other;
    }
    __syncthreads();
  }
  sum = s_sum[0];
  mx = s_max[0];
}

// Pass 1: per-block sum of g and max |g|.
__global__ void scaler_pass1(const float* g, int64_t n, double* partial_sum, float* partial_max) {
  double sum = 0.0;
  float mx = 0.f;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    float v = g[i];
    sum += v;
    float a = fabsf(v);
    if (a > mx || isnan(a)) mx = a;
  }
  block_reduce(sum, mx);
  if (threadIdx.x == 0) {
    partial_sum[blockIdx.x] = sum;
    partial_max[blockIdx.x] = mx;
  }
}

// Finish pass 1: mean into *mean, max |g| into partial_max[0].
__global__ void scaler_finish1(int64_t n, double* partial_sum, float* partial_max, double* mean) {
  double sum = 0.0;
  float mx = 0.f;
  for (int i = threadIdx.x; i < kScalerBlocks; i += blockDim.x) {
    sum += partial_sum[i];
    float m = partial_max[i];
    if (m > mx || isnan(m)) mx = m;
  }
  block_reduce(sum, mx);
  if (threadIdx.x == 0) {
    *mean = sum / static_cast<double>(n);
    partial_max[0] = mx;
  }
}

// Pass 2: per-block sum of (g - mean)^2 (partial_max untouched: slot 0 holds max |g|).
__global__ void scaler_pass2(const float* g, int64_t n, const double* mean, double* partial_sum) {
  const double m = *mean;
  double ss = 0.0;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    double d = static_cast<double>(g[i]) - m;
    ss += d * d;
  }
  float unused = 0.f;
  block_reduce(ss, unused);
  if (threadIdx.x == 0) partial_sum[blockIdx.x] = ss;
}

__global__ void scaler_finish2(int64_t n, const double* partial_sum, const float* partial_max, float clip_factor,
                               float* scaler) {
  double ss = 0.0;
  for (int i = threadIdx.x; i < kScalerBlocks; i += blockDim.x) ss += partial_sum[i];
  float unused = 0.f;
  block_reduce(ss, unused);
  if (threadIdx.x == 0) {
    const float max_abs = partial_max[0];
    const float sigma = static_cast<float>(sqrt(ss / static_cast<double>(n)));
    *scaler = (isnan(max_abs) || isnan(sigma)) ? nanf("") : ternary_scaler(sigma, max_abs, clip_factor);
  }
}

__global__ void zero_scaler(float* scaler) { *scaler = 0.f; }

__global__ void encode_kernel(const float* g, int64_t n, const float* scaler, PhiloxKey key, uint32_t step,
                              uint32_t tensor, uint8_t* packed) {
  const int64_t nbytes = (n + 3) / 4;
  const float s = *scaler;
  for (int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; b < nbytes; b += (int64_t)gridDim.x * blockDim.x)
    packed[b] = ternarize_pack_byte(g, n, b, s, key, step, tensor);
}

__global__ void unpack_kernel(const uint8_t* packed, int64_t n, int8_t* codes) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    codes[i] = static_cast<int8_t>(unpack_ternary(packed, i));
}

__global__ void decode_sums_kernel(const int8_t* sums, int64_t n, const float* scaler, int num_workers, float* g) {
  const float s = *scaler;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    g[i] = ternary_decode_value(s, sums[i], num_workers);
}

__global__ void decode_gathered_kernel(const uint8_t* gathered, int64_t stride, int num_workers, int64_t n,
                                       const float* scaler, float* g) {
  const float s = *scaler;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int sum = 0;
    for (int w = 0; w < num_workers; ++w) sum += unpack_ternary(gathered + w * stride, i);
    g[i] = ternary_decode_value(s, sum, num_workers);
  }
}

}  // namespace

size_t ternary_scaler_workspace_bytes_cuda() {
  return (sizeof(double) + sizeof(float)) * kScalerBlocks + sizeof(double);
}

void ternary_scaler_cuda(const float* g, int64_t n, float clip_factor, float* scaler, void* workspace, void* stream) {
  cudaStream_t st = as_stream(stream);
  if (n <= 0) {
    zero_scaler<<<1, 1, 0, st>>>(scaler);
    TG_CUDA_CHECK_LAUNCH();
    return;
  }
  ScalerWorkspace w = scaler_workspace(workspace);
  scaler_pass1<<<kScalerBlocks, kThreads, 0, st>>>(g, n, w.partial_sum, w.partial_max);
  TG_CUDA_CHECK_LAUNCH();
  scaler_finish1<<<1, kThreads, 0, st>>>(n, w.partial_sum, w.partial_max, w.mean);
  TG_CUDA_CHECK_LAUNCH();
  scaler_pass2<<<kScalerBlocks, kThreads, 0, st>>>(g, n, w.mean, w.partial_sum);
  TG_CUDA_CHECK_LAUNCH();
  scaler_finish2<<<1, kThreads, 0, st>>>(n, w.partial_sum, w.partial_max, clip_factor, scaler);
  TG_CUDA_CHECK_LAUNCH();
}

void ternary_encode_cuda(const float* g, int64_t n, const float* scaler, PhiloxKey key, uint32_t step, uint32_t tensor,
                         uint8_t* packed, void* stream) {
  if (n <= 0) return;
  encode_kernel<<<grid_for((n + 3) / 4), kThreads, 0, as_stream(stream)>>>(g, n, scaler, key, step, tensor, packed);
  TG_CUDA_CHECK_LAUNCH();
}

void ternary_unpack_cuda(const uint8_t* packed, int64_t n, int8_t* codes, void* stream) {
  if (n <= 0) return;
  unpack_kernel<<<grid_for(n), kThreads, 0, as_stream(stream)>>>(packed, n, codes);
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

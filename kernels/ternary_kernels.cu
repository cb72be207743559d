// CUDA kernels of the gradient codings: ternary scalers of a table of up to 64 tensors (one warp per chunk of
// ternary_math.h's fixed summation order, up to 2048 chunks a tensor, then one block per tensor combines its chunks
// pairwise in shared memory and applies ternary_scaler_from_stats; per-bucket scalers: blocks over the buckets for
// their max|g|: 2 or 3 launches for the table), encode (one thread per Philox
// block of 8 elements read as two 16-byte loads when aligned, 2 packed bytes; an optional zero-code count; a table form
// encodes up to Backend::kEncodeTable tensors in one launch), unpack, code sums, decode from int8 sums and from
// gathered packed buffers; fp16/fp32 sums, averages and decodes. The per-element math is the TG_HOST_DEVICE code of
// terngrad/math/ternary_math.h and terngrad/core/dtype.h, so every result is the CPU's bit for bit (-fmad=false; fp16
// NaN payloads aside), the scaler included: its double sums are added in the CPU's order. Launchers are declared in
// terngrad/backend/ternary_cuda.h.
#include <cuda_runtime.h>

#include <cstdint>

#include "src/backend/cuda/cuda_launch.h"
#include "terngrad/backend/cuda_check.h"
#include "terngrad/backend/ternary_cuda.h"
#include "terngrad/math/optim_math.h"
#include "terngrad/math/ternary_math.h"

namespace tg {

namespace {

constexpr int kThreads = 256;
constexpr int kWarp = 32;
constexpr int kStatsPrefetch = 32;  // loads in flight per lane of the scaler's pass (a lane's adds are sequential)
static_assert(kTernaryStatsLanes == kWarp, "one warp lane per accumulator lane of the scaler's sums");
constexpr int kEncodeMaxGrid = 4096;  // grid-stride beyond: bounds the zero count's atomics

inline cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

inline int grid_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  if (b > 65535LL * 32) b = 65535LL * 32;  // grid-stride loops cover the rest
  return static_cast<int>(b < 1 ? 1 : b);
}

// The table form of the scaler (every scaler goes through it; one tensor is a table of one): up to
// kScalerTableCuda tensors, their chunks numbered one after another (tensor k's are [first_chunk[k],
// first_chunk[k + 1])), the bucket maxima's CUDA blocks likewise (first_bucket_block; 0 blocks for a tensor of one
// scaler). The table travels in the kernels' parameters.
struct ScalerTable {
  float* g[kScalerTableCuda];  // written only where decayed or residual is given
  const float* decayed[kScalerTableCuda];
  const float* residual[kScalerTableCuda];
  float* scaler[kScalerTableCuda];
  int64_t n[kScalerTableCuda];
  float decay[kScalerTableCuda];
  uint32_t bucket[kScalerTableCuda];  // <= kMaxScalerBucket (2^30)
  int first_chunk[kScalerTableCuda + 1];
  int first_bucket_block[kScalerTableCuda + 1];
  int count;
};

// Workspace layout: per chunk of the table the sum and sum of squares (doubles) and the max bits of |g|
// (uint32), kScalerTableMaxChunks of each; then per tensor its sigma (a double) and max bits (per-bucket scalers:
// what the buckets' kernel reads).
constexpr int kScalerTableMaxChunks = kScalerTableCuda * kTernaryStatsMaxChunks;
struct ScalerWorkspace {
  double* partial_sum;
  double* partial_sumsq;
  double* sigma;
  unsigned* partial_max;
  unsigned* max_bits;
};

inline ScalerWorkspace scaler_workspace(void* ws) {
  char* p = static_cast<char*>(ws);
  ScalerWorkspace w;
  w.partial_sum = reinterpret_cast<double*>(p);
  w.partial_sumsq = w.partial_sum + kScalerTableMaxChunks;
  w.sigma = w.partial_sumsq + kScalerTableMaxChunks;
  w.partial_max = reinterpret_cast<unsigned*>(w.sigma + kScalerTableCuda);
  w.max_bits = w.partial_max + kScalerTableMaxChunks;
  return w;
}

// The table entry a CUDA block belongs to: the k with first[k] <= block < first[k + 1].
__device__ __forceinline__ int table_entry(const int* first, int block) {
  int k = 0;
  while (block >= first[k + 1]) ++k;
  return k;
}

// One lane's share of chunk [b, e) in ternary_math.h's order: elements b + lane, b + lane + 32, ... in index order
// from 0.0 (the CPU's accumulator lane), loads issued kStatsPrefetch at a time so a warp keeps several lines in
// flight while its adds stay in order. Each square is exact in double. The max is over the bits of |g|: for
// non-negative floats the integer order is the float order and every NaN is above +Inf, so a NaN anywhere wins (as
// on the CPU). Adds first, stored back (as the CPU's stats_body): kDecay (weight decay) g[i] += decay * wd[i] (the
// product rounded first, as axpy), then kResidual (error feedback) g[i] += r[i].
template <bool kDecay, bool kResidual>
__device__ __forceinline__ void chunk_lane_sums(float* g, const float* wd, float decay, const float* r, int64_t b,
                                                int64_t e, int lane, double& sum, double& sumsq, unsigned& mx) {
  for (int64_t base = b; base < e; base += int64_t{kWarp} * kStatsPrefetch) {
    float v[kStatsPrefetch];
#pragma unroll
    for (int u = 0; u < kStatsPrefetch; ++u) {
      const int64_t i = base + int64_t{kWarp} * u + lane;
      v[u] = i < e ? g[i] : 0.f;
      if ((kDecay || kResidual) && i < e) {
        if (kDecay) v[u] = v[u] + decay * wd[i];
        if (kResidual) v[u] = v[u] + r[i];
        g[i] = v[u];
      }
    }
#pragma unroll
    for (int u = 0; u < kStatsPrefetch; ++u) {
      if (base + int64_t{kWarp} * u + lane < e) {
        const double d = v[u];
        sum += d;
        sumsq += d * d;
        mx = max(mx, __float_as_uint(v[u]) & 0x7FFFFFFFu);
      }
    }
  }
}

// Block c (one warp) sums chunk c of the table: chunk j = c - first_chunk[k] of tensor k, elements [j * chunk,
// min(n, (j + 1) * chunk)); then the lanes combine pairwise, lane l += lane l + w for w = 16, 8, 4, 2, 1 (a shuffle
// down by w gives lane l the value of lane l + w; lanes >= w compute values nobody reads).
__global__ void scaler_chunks(ScalerTable t, ScalerWorkspace w) {
  const int c = blockIdx.x;
  const int k = table_entry(t.first_chunk, c);
  const int lane = threadIdx.x;
  const int64_t n = t.n[k], chunk = ternary_stats_chunk(n);
  const int64_t b = static_cast<int64_t>(c - t.first_chunk[k]) * chunk, e = b + chunk < n ? b + chunk : n;
  double sum = 0.0, sumsq = 0.0;
  unsigned mx = 0;
  float* g = t.g[k];
  const float *wd = t.decayed[k], *r = t.residual[k];
  if (wd && r) {
    chunk_lane_sums<true, true>(g, wd, t.decay[k], r, b, e, lane, sum, sumsq, mx);
  } else if (wd) {
    chunk_lane_sums<true, false>(g, wd, t.decay[k], nullptr, b, e, lane, sum, sumsq, mx);
  } else if (r) {
    chunk_lane_sums<false, true>(g, nullptr, 0.f, r, b, e, lane, sum, sumsq, mx);
  } else {
    chunk_lane_sums<false, false>(g, nullptr, 0.f, nullptr, b, e, lane, sum, sumsq, mx);
  }
  for (int off = kWarp / 2; off >= 1; off >>= 1) {
    sum += __shfl_down_sync(0xffffffffu, sum, off);
    sumsq += __shfl_down_sync(0xffffffffu, sumsq, off);
    mx = max(mx, __shfl_down_sync(0xffffffffu, mx, off));
  }
  if (lane == 0) {
    w.partial_sum[c] = sum;
    w.partial_sumsq[c] = sumsq;
    w.partial_max[c] = mx;
  }
}

// Block k (kFinishThreads threads) finishes tensor k: its chunks' partials combined pairwise (chunk j += chunk
// j + h for h = span/2 ... 1, missing chunks 0.0; as tensor_stats_cpu does) in shared memory, then s =
// ternary_scaler_from_stats(sigma, max|g|, c) (NaN if not finite); 0 for n = 0. A tensor of several scalers
// leaves its sigma and max bits for the buckets' kernel.
constexpr int kFinishThreads = 1024;
static_assert(kTernaryStatsMaxChunks % kFinishThreads == 0, "each thread loads the same number of chunks");
__global__ void __launch_bounds__(kFinishThreads) scaler_finish(ScalerTable t, ScalerWorkspace w, float clip_factor) {
  __shared__ double sum[kTernaryStatsMaxChunks], sumsq[kTernaryStatsMaxChunks];
  __shared__ unsigned mx[kTernaryStatsMaxChunks];
  const int k = blockIdx.x;
  const int64_t n = t.n[k];
  if (n <= 0) {  // the whole block: no chunks, one scaler of 0
    if (threadIdx.x == 0) t.scaler[k][0] = 0.f;
    return;
  }
  const int first = t.first_chunk[k], chunks = t.first_chunk[k + 1] - first;
  const int span = ternary_stats_span(chunks);
  for (int j = threadIdx.x; j < span; j += kFinishThreads) {
    const bool in = j < chunks;
    sum[j] = in ? w.partial_sum[first + j] : 0.0;
    sumsq[j] = in ? w.partial_sumsq[first + j] : 0.0;
    mx[j] = in ? w.partial_max[first + j] : 0u;
  }
  __syncthreads();
  for (int half = span / 2; half >= 1; half /= 2) {
    for (int j = threadIdx.x; j < half; j += kFinishThreads) {
      sum[j] += sum[j + half];
      sumsq[j] += sumsq[j + half];
      mx[j] = max(mx[j], mx[j + half]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const double sigma = ternary_sigma_from_sums(sum[0], sumsq[0], n);
    if (ternary_num_scalers(n, t.bucket[k]) == 1) {
      t.scaler[k][0] = ternary_scaler_from_stats(sigma, __uint_as_float(mx[0]), clip_factor);
    } else {  // per-bucket scalers: the buckets' kernel reads the tensor's statistics
      w.sigma[k] = sigma;
      w.max_bits[k] = mx[0];
    }
  }
}

// Per-bucket scalers: the CUDA blocks [first_bucket_block[k], first_bucket_block[k + 1]) of tensor k compute its
// buckets j, j + blocks, ...: the max of the bits of |g| over the bucket (an integer max, any order), then
// ternary_bucket_scaler with the tensor's statistics from scaler_finish.
constexpr int kBucketThreads = 256;
constexpr int kBucketMaxBlocks = 8192;  // per tensor; its blocks stride beyond
__global__ void __launch_bounds__(kBucketThreads)
    bucket_scalers_kernel(ScalerTable t, ScalerWorkspace w, float clip_factor) {
  __shared__ unsigned warp_max[kBucketThreads / kWarp];
  const int k = table_entry(t.first_bucket_block, blockIdx.x);
  const float* g = t.g[k];
  const int64_t n = t.n[k], bucket = t.bucket[k], buckets = ternary_num_scalers(n, bucket);
  const int blocks = t.first_bucket_block[k + 1] - t.first_bucket_block[k];
  const double sigma = w.sigma[k];
  const float tensor_max = __uint_as_float(w.max_bits[k]);
  for (int64_t j = blockIdx.x - t.first_bucket_block[k]; j < buckets; j += blocks) {
    const int64_t b = j * bucket, e = b + bucket < n ? b + bucket : n;
    unsigned mx = 0;
    for (int64_t i = b + threadIdx.x; i < e; i += kBucketThreads) mx = max(mx, __float_as_uint(g[i]) & 0x7FFFFFFFu);
    for (int off = kWarp / 2; off >= 1; off >>= 1) mx = max(mx, __shfl_down_sync(0xffffffffu, mx, off));
    if (threadIdx.x % kWarp == 0) warp_max[threadIdx.x / kWarp] = mx;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int q = 1; q < kBucketThreads / kWarp; ++q) mx = max(mx, warp_max[q]);
      t.scaler[k][j] = ternary_bucket_scaler(sigma, tensor_max, __uint_as_float(mx), clip_factor);
    }
    __syncthreads();
  }
}

// Philox block b of g (n elements) ternarized: its 16 packed bits, stored as bytes 2b and 2b + 1 (the second only
// if it exists); returns its zero codes (a non-zero code sets exactly one bit of its field, so a Philox block's
// zeros are its elements less the popcount of its fields). A whole block of a 16-byte aligned g is read with two
// 16-byte loads; the values then go through the same ternarize_pack_values as the CPU's.
// With a residual (error feedback), also residual[i] = ternary_residual_value(g[i], s, code i) of its elements.
__device__ __forceinline__ int encode_block(const float* __restrict__ g, int64_t n, bool aligned, int64_t b, float s,
                                            PhiloxKey key, uint32_t step, uint32_t tensor, uint8_t* __restrict__ packed,
                                            float* __restrict__ residual) {
  const int64_t first = b * kTernaryBlockElements, left = n - first;
  const int valid = left < kTernaryBlockElements ? static_cast<int>(left) : kTernaryBlockElements;
  float v[kTernaryBlockElements];
  if (aligned && valid == kTernaryBlockElements) {
    const float4 lo = __ldg(reinterpret_cast<const float4*>(g + first));
    const float4 hi = __ldg(reinterpret_cast<const float4*>(g + first) + 1);
    v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w, v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
  } else {
#pragma unroll
    for (int e = 0; e < kTernaryBlockElements; ++e) v[e] = e < valid ? g[first + e] : 0.f;
  }
  const uint32_t bits = ternarize_pack_values(v, valid, s, ternary_block(key, static_cast<uint64_t>(b), step, tensor));
  const int64_t nbytes = ternary_packed_bytes(n);
  packed[2 * b] = static_cast<uint8_t>(bits);
  if (2 * b + 1 < nbytes) packed[2 * b + 1] = static_cast<uint8_t>(bits >> 8);
  if (residual)
    for (int e = 0; e < valid; ++e)
      residual[first + e] = ternary_residual_value(v[e], s, ternary_code_of_field(bits >> (2 * e)));
  return valid - __popc(bits);
}

// The block's zero codes added once to *zero_count (all threads of the block call it).
__device__ __forceinline__ void add_block_zeros(int zeros, int32_t* zero_count) {
  for (int off = kWarp / 2; off >= 1; off >>= 1) zeros += __shfl_down_sync(0xffffffffu, zeros, off);
  __shared__ int warp_zeros[kThreads / kWarp];
  if (threadIdx.x % kWarp == 0) warp_zeros[threadIdx.x / kWarp] = zeros;
  __syncthreads();
  if (threadIdx.x == 0) {
    int total = 0;
    for (int k = 0; k < kThreads / kWarp; ++k) total += warp_zeros[k];
    atomicAdd(zero_count, total);
  }
}

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// One thread per Philox block: elements 8b .. 8b+7, packed bytes 2b and 2b + 1. With zero_count, each CUDA block
// adds its number of zero codes once.
// A Philox block's scaler: its 8 elements lie in one bucket (a bucket is a multiple of 8 elements).
__device__ __forceinline__ float block_scaler(const float* scaler, int64_t b, int64_t bucket) {
  return scaler[ternary_scaler_of(b * kTernaryBlockElements, bucket)];
}

__global__ void encode_kernel(const float* __restrict__ g, int64_t n, bool aligned, const float* scaler, int64_t bucket,
                              PhiloxKey key, uint32_t step, uint32_t tensor, uint8_t* __restrict__ packed,
                              int32_t* zero_count) {
  const int64_t blocks = (n + kTernaryBlockElements - 1) / kTernaryBlockElements;
  int zeros = 0;
  for (int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; b < blocks; b += (int64_t)gridDim.x * blockDim.x)
    zeros += encode_block(g, n, aligned, b, block_scaler(scaler, b, bucket), key, step, tensor, packed, nullptr);
  if (zero_count) add_block_zeros(zeros, zero_count);
}

// The table form: CUDA blocks [first_block[k], first_block[k + 1]) encode tensor k (grid-striding over its Philox
// blocks); the zero counts were set to 0 by zero_counts_kernel.
struct EncodeTable {
  const float* g[kEncodeTableCuda];
  const float* scaler[kEncodeTableCuda];
  uint8_t* packed[kEncodeTableCuda];
  int32_t* zero_count[kEncodeTableCuda];
  float* residual[kEncodeTableCuda];  // or null
  int64_t n[kEncodeTableCuda];
  uint32_t bucket[kEncodeTableCuda];  // <= kMaxScalerBucket (2^30): 32 bits keep the table under 4 KiB
  uint32_t tensor[kEncodeTableCuda];
  int first_block[kEncodeTableCuda + 1];
  uint64_t aligned_mask;  // bit k: g[k] is 16-byte aligned
  int count;
};

__global__ void zero_counts_kernel(EncodeTable t) {
  const int k = threadIdx.x;
  if (k < t.count && t.zero_count[k]) *t.zero_count[k] = 0;
}

__global__ void encode_table_kernel(EncodeTable t, PhiloxKey key, uint32_t step) {
  int k = 0;
  while (static_cast<int>(blockIdx.x) >= t.first_block[k + 1]) ++k;
  const int64_t n = t.n[k], blocks = (n + kTernaryBlockElements - 1) / kTernaryBlockElements;
  const int64_t stride = static_cast<int64_t>(t.first_block[k + 1] - t.first_block[k]) * blockDim.x;
  const bool aligned = (t.aligned_mask >> k) & 1u;
  int zeros = 0;
  for (int64_t b = static_cast<int64_t>(blockIdx.x - t.first_block[k]) * blockDim.x + threadIdx.x; b < blocks;
       b += stride)
    zeros += encode_block(t.g[k], n, aligned, b, block_scaler(t.scaler[k], b, t.bucket[k]), key, step, t.tensor[k],
                          t.packed[k], t.residual[k]);
  if (t.zero_count[k]) add_block_zeros(zeros, t.zero_count[k]);
}

__global__ void unpack_kernel(int64_t n, const uint8_t* packed, int8_t* codes) {
  TG_GRID_STRIDE_LOOP(i, n) codes[i] = static_cast<int8_t>(unpack_ternary(packed, i));
}

__device__ int code_sum(const uint8_t* packed, int64_t stride, int num_workers, int64_t i) {
  int sum = 0;
  for (int w = 0; w < num_workers; ++w) sum += unpack_ternary(packed + w * stride, i);
  return sum;
}

__global__ void sum_codes_kernel(int64_t n, const uint8_t* packed, int64_t stride, int num_workers, int8_t* code_sums) {
  TG_GRID_STRIDE_LOOP(i, n) code_sums[i] = static_cast<int8_t>(code_sum(packed, stride, num_workers, i));
}

__global__ void decode_sums_kernel(int64_t n, const int8_t* sums, const float* scaler, int64_t bucket, int num_workers,
                                   float* g) {
  TG_GRID_STRIDE_LOOP(i, n) g[i] = ternary_decode_value(scaler[ternary_scaler_of(i, bucket)], sums[i], num_workers);
}

__global__ void decode_gathered_kernel(int64_t n, const uint8_t* gathered, int64_t stride, int num_workers,
                                       const float* scaler, int64_t bucket, float* g) {
  TG_GRID_STRIDE_LOOP(i, n)
  g[i] = ternary_decode_value(scaler[ternary_scaler_of(i, bucket)], code_sum(gathered, stride, num_workers, i),
                              num_workers);
}

// A table of coded updates (kernel parameters): block row k updates tensor k.
struct CodedUpdateTable {
  float* w[kCodedUpdateTableCuda];
  const uint8_t* gathered[kCodedUpdateTableCuda];
  const int8_t* code_sums[kCodedUpdateTableCuda];
  const float* scaler[kCodedUpdateTableCuda];
  float* s1[kCodedUpdateTableCuda];
  float* s2[kCodedUpdateTableCuda];
  float* ema[kCodedUpdateTableCuda];
  int64_t stride[kCodedUpdateTableCuda];
  int64_t bucket[kCodedUpdateTableCuda];
  int64_t n[kCodedUpdateTableCuda];
  int num_workers[kCodedUpdateTableCuda];
  int count;
};

// The decode of element i of tensor blockIdx.y (gathered codes, or their int8 sums when code_sums is not null),
// then the update; the row's blocks grid-stride over the tensor.
__global__ void update_coded_kernel(CodedUpdateTable t, OptimizerStep step) {
  const int k = blockIdx.y;
  float* w = t.w[k];
  const uint8_t* gathered = t.gathered[k];
  const int8_t* code_sums = t.code_sums[k];
  const float* scaler = t.scaler[k];
  float *s1 = t.s1[k], *s2 = t.s2[k], *ema = t.ema[k];
  const int64_t stride = t.stride[k], bucket = t.bucket[k], n = t.n[k];
  const int num_workers = t.num_workers[k];
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int sum = code_sums ? code_sums[i] : code_sum(gathered, stride, num_workers, i);
    optimizer_update_one(step, w[i], ternary_decode_value(scaler[ternary_scaler_of(i, bucket)], sum, num_workers),
                         s1 ? s1 + i : nullptr, s2 ? s2 + i : nullptr);
    if (ema) ema_update_one(ema[i], w[i], step.ema_decay);
  }
}

// ---- fp16 and fp32 codings -----------------------------------------------------------------------------------
struct Inputs {  // the workers' gradients, by value in the kernel's parameters (1 KiB)
  const float* p[kCodecMaxInputsCuda];
  int count;
};

// Sum over the workers of their fp16-rounded values of element i, in fp32 in worker order (the CPU starts its
// accumulators at 0.f too).
__device__ float rounded_half_sum(const Inputs& xs, int64_t i) {
  float acc = 0.f;
  for (int w = 0; w < xs.count; ++w) acc += half_to_float(float_to_half(xs.p[w][i]));
  return acc;
}

__global__ void encode_f16_sum_kernel(int64_t n, Inputs xs, half_bits* out) {
  TG_GRID_STRIDE_LOOP(i, n) out[i] = float_to_half(rounded_half_sum(xs, i));
}

__global__ void average_f16_kernel(int64_t n, Inputs xs, float* out) {
  const float nf = static_cast<float>(xs.count);
  TG_GRID_STRIDE_LOOP(i, n) out[i] = half_to_float(float_to_half(rounded_half_sum(xs, i))) / nf;
}

// divide: out = sum / count (the average), else the sum.
__global__ void f32_sum_kernel(int64_t n, Inputs xs, bool divide, float* out) {
  const float nf = static_cast<float>(xs.count);
  TG_GRID_STRIDE_LOOP(i, n) {
    float acc = xs.p[0][i];
    for (int w = 1; w < xs.count; ++w) acc += xs.p[w][i];
    out[i] = divide ? acc / nf : acc;
  }
}

__global__ void max_scalers_kernel(int64_t n, Inputs xs, float* out) {
  TG_GRID_STRIDE_LOOP(i, n) {
    float m = 0.f;
    for (int w = 0; w < xs.count; ++w) {
      float s = xs.p[w][i];
      if (!isfinite(s)) s = INFINITY;
      m = m < s ? s : m;
    }
    out[i] = m;
  }
}

__global__ void decode_f16_sum_kernel(int64_t n, const half_bits* sum, int num_workers, float* g) {
  const float nf = static_cast<float>(num_workers);
  TG_GRID_STRIDE_LOOP(i, n) g[i] = half_to_float(sum[i]) / nf;
}

__global__ void decode_f32_sum_kernel(int64_t n, const float* sum, int num_workers, float* g) {
  const float nf = static_cast<float>(num_workers);
  TG_GRID_STRIDE_LOOP(i, n) g[i] = sum[i] / nf;
}

Inputs make_inputs(const float* const* xs, int count) {
  TG_CHECK(count >= 1 && count <= kCodecMaxInputsCuda, "codec sums: {} inputs (1 to {})", count, kCodecMaxInputsCuda);
  Inputs in{};
  for (int w = 0; w < count; ++w) in.p[w] = xs[w];
  in.count = count;
  return in;
}

}  // namespace

static_assert(sizeof(EncodeTable) <= 4096, "the table travels in the kernel's parameters");
static_assert(kEncodeTableCuda <= 64, "aligned_mask holds one bit per tensor");

static_assert(sizeof(ScalerTable) <= 4096, "the table travels in the kernels' parameters");

size_t ternary_scaler_workspace_bytes_cuda() {
  return (2 * sizeof(double) + sizeof(unsigned)) * kScalerTableMaxChunks +
         (sizeof(double) + sizeof(unsigned)) * kScalerTableCuda;
}

void ternary_scaler_table_cuda(const TernaryScalerCuda* items, int count, float clip_factor, void* workspace,
                               void* stream) {
  TG_CHECK(count >= 0 && count <= kScalerTableCuda, "ternary scaler table: {} tensors (0 to {})", count,
           kScalerTableCuda);
  if (count == 0) return;
  cudaStream_t st = as_stream(stream);
  ScalerTable t{};
  t.count = count;
  for (int k = 0; k < count; ++k) {
    const TernaryScalerCuda& it = items[k];
    TG_CHECK(it.bucket >= 0 && it.bucket <= UINT32_MAX, "ternary scaler table: bucket {}", it.bucket);
    t.g[k] = it.g, t.decayed[k] = it.decayed, t.residual[k] = it.residual, t.scaler[k] = it.scaler;
    t.n[k] = it.n, t.decay[k] = it.decay, t.bucket[k] = static_cast<uint32_t>(it.bucket);
    t.first_chunk[k + 1] = t.first_chunk[k] + (it.n > 0 ? ternary_stats_chunks(it.n) : 0);
    const int64_t buckets = it.n > 0 ? ternary_num_scalers(it.n, it.bucket) : 1;
    const int64_t blocks = buckets == 1 ? 0 : (buckets < kBucketMaxBlocks ? buckets : kBucketMaxBlocks);
    t.first_bucket_block[k + 1] = t.first_bucket_block[k] + static_cast<int>(blocks);
  }
  const ScalerWorkspace w = scaler_workspace(workspace);
  if (t.first_chunk[count] > 0) {
    scaler_chunks<<<t.first_chunk[count], kWarp, 0, st>>>(t, w);
    TG_CUDA_CHECK_LAUNCH();
  }
  scaler_finish<<<count, kFinishThreads, 0, st>>>(t, w, clip_factor);
  TG_CUDA_CHECK_LAUNCH();
  if (t.first_bucket_block[count] > 0) {
    bucket_scalers_kernel<<<t.first_bucket_block[count], kBucketThreads, 0, st>>>(t, w, clip_factor);
    TG_CUDA_CHECK_LAUNCH();
  }
}

void ternary_encode_cuda(const float* g, int64_t n, const float* scaler, PhiloxKey key, uint32_t step, uint32_t tensor,
                         uint8_t* packed, int32_t* zero_count, void* stream, int64_t bucket) {
  cudaStream_t st = as_stream(stream);
  if (zero_count) {
    TG_CHECK(n <= INT32_MAX, "ternary encode: {} elements overflow an int zero count", n);
    TG_CUDA_CHECK(cudaMemsetAsync(zero_count, 0, sizeof(int32_t), st));
  }
  if (n <= 0) return;
  const int64_t blocks = (n + kTernaryBlockElements - 1) / kTernaryBlockElements;
  const int grid = grid_for(blocks) < kEncodeMaxGrid ? grid_for(blocks) : kEncodeMaxGrid;
  encode_kernel<<<grid, kThreads, 0, st>>>(g, n, aligned16(g), scaler, bucket, key, step, tensor, packed, zero_count);
  TG_CUDA_CHECK_LAUNCH();
}

void ternary_encode_table_cuda(const TernaryEncodeCuda* items, int count, PhiloxKey key, uint32_t step, void* stream) {
  TG_CHECK(count >= 0 && count <= kEncodeTableCuda, "ternary encode table: {} tensors (0 to {})", count,
           kEncodeTableCuda);
  if (count == 0) return;
  cudaStream_t st = as_stream(stream);
  EncodeTable t{};
  t.count = count;
  bool counts = false;
  for (int k = 0; k < count; ++k) {
    const TernaryEncodeCuda& it = items[k];
    TG_CHECK(!it.zero_count || it.n <= INT32_MAX, "ternary encode: {} elements overflow an int zero count", it.n);
    t.g[k] = it.g, t.scaler[k] = it.scaler, t.packed[k] = it.packed, t.zero_count[k] = it.zero_count;
    t.residual[k] = it.residual;
    t.n[k] = it.n, t.tensor[k] = it.tensor, t.bucket[k] = static_cast<uint32_t>(it.bucket);
    if (aligned16(it.g)) t.aligned_mask |= uint64_t{1} << k;
    const int64_t blocks = (it.n + kTernaryBlockElements - 1) / kTernaryBlockElements;
    const int64_t grid = (blocks + kThreads - 1) / kThreads;
    t.first_block[k + 1] =
        t.first_block[k] + static_cast<int>(grid < 1 ? 1 : (grid > kEncodeMaxGrid ? kEncodeMaxGrid : grid));
    counts = counts || it.zero_count;
  }
  if (counts) {
    zero_counts_kernel<<<1, kEncodeTableCuda, 0, st>>>(t);
    TG_CUDA_CHECK_LAUNCH();
  }
  encode_table_kernel<<<t.first_block[count], kThreads, 0, st>>>(t, key, step);
  TG_CUDA_CHECK_LAUNCH();
}

void ternary_unpack_cuda(const uint8_t* packed, int64_t n, int8_t* codes, void* stream) {
  cuda_kernels::linear_kernel("unpack", unpack_kernel, n, as_stream(stream), packed, codes);
}

void ternary_sum_codes_cuda(const uint8_t* packed, int64_t stride, int num_workers, int64_t n, int8_t* code_sums,
                            void* stream) {
  TG_CHECK(num_workers >= 1 && num_workers <= kMaxCodeSumWorkers,
           "ternary code sums: {} workers (an int8 sum holds 1 to {})", num_workers, kMaxCodeSumWorkers);
  cuda_kernels::linear_kernel("sum_codes", sum_codes_kernel, n, as_stream(stream), packed, stride, num_workers,
                              code_sums);
}

void ternary_decode_sums_cuda(const int8_t* code_sums, int64_t n, const float* scaler, int num_workers, float* g,
                              void* stream, int64_t bucket) {
  cuda_kernels::linear_kernel("decode_sums", decode_sums_kernel, n, as_stream(stream), code_sums, scaler, bucket,
                              num_workers, g);
}

void ternary_decode_gathered_cuda(const uint8_t* gathered, int64_t stride, int num_workers, int64_t n,
                                  const float* scaler, float* g, void* stream, int64_t bucket) {
  cuda_kernels::linear_kernel("decode_gathered", decode_gathered_kernel, n, as_stream(stream), gathered, stride,
                              num_workers, scaler, bucket, g);
}

static_assert(sizeof(CodedUpdateTable) <= 4096 - sizeof(OptimizerStep), "the table travels in the kernel's parameters");

void optimizer_update_coded_table_cuda(const OptimizerStep& step, const CodedUpdateCuda* items, int count,
                                       void* stream) {
  TG_CHECK(count >= 0 && count <= kCodedUpdateTableCuda, "coded update table: {} tensors (0 to {})", count,
           kCodedUpdateTableCuda);
  CodedUpdateTable t{};
  int64_t most = 0;
  for (int k = 0; k < count; ++k) {
    const CodedUpdateCuda& it = items[k];
    t.w[k] = it.w, t.gathered[k] = it.gathered, t.code_sums[k] = it.code_sums, t.scaler[k] = it.scaler;
    t.s1[k] = it.s1, t.s2[k] = it.s2, t.ema[k] = it.ema;
    t.stride[k] = it.stride, t.bucket[k] = it.bucket, t.n[k] = it.n, t.num_workers[k] = it.num_workers;
    most = it.n > most ? it.n : most;
  }
  t.count = count;
  if (most == 0) return;
  const dim3 grid(grid_for(most), static_cast<unsigned>(count));
  update_coded_kernel<<<grid, kThreads, 0, as_stream(stream)>>>(t, step);
  TG_CUDA_CHECK_LAUNCH();
}

// ---- fp16 and fp32 codings ------------------------------------------------------------------------------------
void encode_f16_sum_cuda(const float* const* xs, int count, int64_t n, half_bits* out, void* stream) {
  const Inputs in = make_inputs(xs, count);
  cuda_kernels::linear_kernel("encode_f16_sum", encode_f16_sum_kernel, n, as_stream(stream), in, out);
}

void encode_f32_sum_cuda(const float* const* xs, int count, int64_t n, float* out, void* stream) {
  const Inputs in = make_inputs(xs, count);
  cuda_kernels::linear_kernel("encode_f32_sum", f32_sum_kernel, n, as_stream(stream), in, false, out);
}

void average_f16_cuda(const float* const* xs, int count, int64_t n, float* out, void* stream) {
  const Inputs in = make_inputs(xs, count);
  cuda_kernels::linear_kernel("average_f16", average_f16_kernel, n, as_stream(stream), in, out);
}

void average_f32_cuda(const float* const* xs, int count, int64_t n, float* out, void* stream) {
  const Inputs in = make_inputs(xs, count);
  if (n <= 0) return;
  if (count == 1) {  // g / 1 is g
    if (xs[0] != out)
      TG_CUDA_CHECK(cudaMemcpyAsync(out, xs[0], static_cast<size_t>(n) * sizeof(float), cudaMemcpyDeviceToDevice,
                                    as_stream(stream)));
    return;
  }
  cuda_kernels::linear_kernel("average_f32", f32_sum_kernel, n, as_stream(stream), in, true, out);
}

void max_scalers_cuda(const float* const* xs, int count, int64_t n, float* out, void* stream) {
  const Inputs in = make_inputs(xs, count);
  cuda_kernels::linear_kernel("max_scalers", max_scalers_kernel, n, as_stream(stream), in, out);
}

void decode_f16_sum_cuda(const half_bits* sum, int64_t n, int num_workers, float* g, void* stream) {
  TG_CHECK(num_workers >= 1, "fp16 decode: {} workers", num_workers);
  cuda_kernels::linear_kernel("decode_f16_sum", decode_f16_sum_kernel, n, as_stream(stream), sum, num_workers, g);
}

void decode_f32_sum_cuda(const float* sum, int64_t n, int num_workers, float* g, void* stream) {
  TG_CHECK(num_workers >= 1, "fp32 decode: {} workers", num_workers);
  cuda_kernels::linear_kernel("decode_f32_sum", decode_f32_sum_kernel, n, as_stream(stream), sum, num_workers, g);
}

}  // namespace tg

// Batch normalization kernels of the CUDA backend, the CPU backend's loops (src/backend/cpu/cpu_batch_norm.cc)
// on the GPU: x is (rows = N*H*W, C) with channels contiguous (NHWC). The rows are cut into the CPU's fixed
// chunks (batch_norm_math.h); one thread sums one (chunk, channel) in double over the chunk's rows in order, a
// second kernel one (group of chunks, channel) in chunk order, and a third adds each channel's group sums in group
// order: batch_norm_math.h's order, exactly as the CPU adds. With -fmad=false
// (no contraction, as the CPU build's -ffp-contract=off) the statistics, the per-channel coefficients and
// every output are the CPU's bits for any shape, with plain int64 indexing (no 32-bit limits on rows).
//
// Scratch (from the caller's arena, batch_norm_scratch_bytes): partial (chunks, 2, C) doubles, groups (groups, 2,
// C) doubles, then five (C) float vectors: scale, shift, inv_std, mean_dy_xhat, y_shift (the CPU's BnScratch, same
// names). A fused ReLU (BatchNormDesc::relu): the forwards write max(y, 0); the backward takes that output's dy
// and keeps it where the forward's y (recomputed from x with the forward's scale and shift) is > 0.
// x, y, dy, dx have the compute dtype T (f32, f16, bf16), read as f32 and rounded once when stored; the
// statistics, gamma, beta and their gradients are f32 (the f32 instantiation is the CPU's bits).
#include <cuda_runtime.h>

#include <algorithm>

#include "src/backend/cuda/cuda_kernels.h"
#include "src/backend/cuda/cuda_launch.h"
#include "terngrad/math/activation_math.h"
#include "terngrad/math/batch_norm_math.h"

namespace tg::cuda_kernels {
namespace {

constexpr int kTileC = 32;       // channels per block (one warp across a row: coalesced)
constexpr int kTileY = 8;        // chunks (pass 1) or rows (element-wise) per block
constexpr int kTileChunks = 64;  // chunk sums staged in shared memory per step of the ordered sum

struct Scratch {
  double* partial;                                          // (chunks, 2, C)
  double* groups;                                           // (groups, 2, C): the chunks' sums added per group
  float *scale, *shift, *inv_std, *mean_dy_xhat, *y_shift;  // (C) each
};

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

Scratch carve(void* base, int64_t chunks, int64_t c) {
  char* p = static_cast<char*>(base);
  Scratch s;
  s.partial = reinterpret_cast<double*>(p);
  p += align256(static_cast<size_t>(chunks * 2 * c) * sizeof(double));
  s.groups = reinterpret_cast<double*>(p);
  p += align256(static_cast<size_t>(bn_num_groups(chunks) * 2 * c) * sizeof(double));
  float** vecs[] = {&s.scale, &s.shift, &s.inv_std, &s.mean_dy_xhat, &s.y_shift};
  for (float** v : vecs) {
    *v = reinterpret_cast<float*>(p);
    p += align256(static_cast<size_t>(c) * sizeof(float));
  }
  return s;
}

__device__ inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// The batch norm's own output gradient at one element: dy, or with a fused ReLU (y_shift not null) dy where the
// forward's rounded y = x * scale + shift is > 0 (relu_backward's bits).
template <typename T>
__device__ inline float grad_of(float xv, float dv, int64_t j, const float* __restrict__ y_scale,
                                const float* __restrict__ y_shift) {
  if (y_shift == nullptr) return dv;
  return relu_grad_one(to_f32(from_f32<T>(xv * y_scale[j] + y_shift[j])), dv);
}

enum Pass1 { kSumX = 0, kSumSqDev = 1, kSumDy = 2 };

// Block (kTileC, kTileY): thread (tx, ty) sums channel blockIdx.y*32+tx over chunk blockIdx.x*8+ty.
//   kSumX:     partial[k][0][j] = sum x
//   kSumSqDev: partial[k][1][j] = sum double(x - mean)^2
//   kSumDy:    partial[k][0][j] = sum dy, partial[k][1][j] = sum double(dy * x^), x^ = (x - mean) * inv_std
//              (dy: grad_of's, y_scale/y_shift null without a fused ReLU)
template <int kPass, typename T>
__global__ void chunk_sums_kernel(const T* __restrict__ x, const T* __restrict__ dy, const float* __restrict__ mean,
                                  const float* __restrict__ inv_std, int64_t rows, int64_t c,
                                  double* __restrict__ partial, const float* __restrict__ y_scale = nullptr,
                                  const float* __restrict__ y_shift = nullptr) {
  const int64_t j = static_cast<int64_t>(blockIdx.y) * kTileC + threadIdx.x;
  const int64_t k = static_cast<int64_t>(blockIdx.x) * kTileY + threadIdx.y;
  if (j >= c || k >= bn_num_chunks(rows)) return;
  const int64_t r0 = k * kBnChunkRows, r1 = min64(rows, r0 + kBnChunkRows);
  double a0 = 0.0, a1 = 0.0;
  const float m = kPass == kSumX ? 0.f : mean[j];
  const float is = kPass == kSumDy ? inv_std[j] : 0.f;
  for (int64_t r = r0; r < r1; ++r) {
    const float xv = to_f32(x[r * c + j]);
    if (kPass == kSumX) {
      a0 += xv;
    } else if (kPass == kSumSqDev) {
      const double t = static_cast<double>(xv - m);
      a1 += t * t;
    } else {
      const float dv = grad_of<T>(xv, to_f32(dy[r * c + j]), j, y_scale, y_shift);
      const float xhat = (xv - m) * is;
      a0 += dv;
      a1 += static_cast<double>(dv * xhat);
    }
  }
  if (kPass != kSumSqDev) partial[(k * 2 + 0) * c + j] = a0;
  if (kPass != kSumX) partial[(k * 2 + 1) * c + j] = a1;
}

// Block (kTileC, kTileY): thread (tx, ty) adds slots [kFirst, kFirst + kSlots) of the chunk sums of channel
// blockIdx.y*32+tx over group blockIdx.x*8+ty, in chunk order from 0 (batch_norm_math.h), into groups.
template <int kFirst, int kSlots>
__global__ void group_sums_kernel(const double* __restrict__ partial, int64_t chunks, int64_t c,
                                  double* __restrict__ groups) {
  const int64_t j = static_cast<int64_t>(blockIdx.y) * kTileC + threadIdx.x;
  const int64_t g = static_cast<int64_t>(blockIdx.x) * kTileY + threadIdx.y;
  if (j >= c || g >= bn_num_groups(chunks)) return;
  double acc[kSlots];
  for (int s = 0; s < kSlots; ++s) acc[s] = 0.0;
  for (int64_t k = g * kBnGroupChunks, k1 = min64(chunks, k + kBnGroupChunks); k < k1; ++k)
    for (int s = 0; s < kSlots; ++s) acc[s] += partial[(k * 2 + kFirst + s) * c + j];
  for (int s = 0; s < kSlots; ++s) groups[(g * 2 + kFirst + s) * c + j] = acc[s];
}

// Adds slots [kFirst, kFirst + kSlots) of the group sums of channel j in group order (the CPU's order), staging
// kTileChunks groups at a time in shared memory; the block's row ty == 0 holds the results.
template <int kFirst, int kSlots>
__device__ void ordered_sums(const double* __restrict__ sums, int64_t count, int64_t c, int64_t j,
                             double (&acc)[kSlots]) {
  __shared__ double tile[kSlots][kTileChunks][kTileC];
  for (int s = 0; s < kSlots; ++s) acc[s] = 0.0;
  for (int64_t k0 = 0; k0 < count; k0 += kTileChunks) {
    for (int kk = threadIdx.y; kk < kTileChunks; kk += kTileY)
      for (int s = 0; s < kSlots; ++s)
        tile[s][kk][threadIdx.x] = (k0 + kk < count && j < c) ? sums[((k0 + kk) * 2 + kFirst + s) * c + j] : 0.0;
    __syncthreads();
    if (threadIdx.y == 0) {
      const int n = static_cast<int>(min64(kTileChunks, count - k0));
      for (int kk = 0; kk < n; ++kk)
        for (int s = 0; s < kSlots; ++s) acc[s] += tile[s][kk][threadIdx.x];
    }
    __syncthreads();
  }
}

// mean[j] = sum x / rows
__global__ void finish_mean_kernel(const double* __restrict__ groups, int64_t rows, int64_t c, float* mean) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kTileC + threadIdx.x;
  double acc[1];
  ordered_sums<0, 1>(groups, bn_num_groups(bn_num_chunks(rows)), c, j, acc);
  if (threadIdx.y == 0 && j < c) mean[j] = static_cast<float>(acc[0] / static_cast<double>(rows));
}

// The moving statistics a training forward updates (Backend's BatchNormMoving; null pointers: none).
struct Moving {
  float *mean, *var;
  float decay;
};

// var[j] = sum (x - mean)^2 / rows; scale = gamma * inv_std, shift = beta - mean * scale; the moving statistics.
__global__ void finish_var_kernel(const double* __restrict__ groups, int64_t rows, int64_t c, float epsilon,
                                  const float* __restrict__ gamma, const float* __restrict__ beta,
                                  const float* __restrict__ mean, float* var, Moving moving, Scratch s) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kTileC + threadIdx.x;
  double acc[1];
  ordered_sums<1, 1>(groups, bn_num_groups(bn_num_chunks(rows)), c, j, acc);
  if (threadIdx.y != 0 || j >= c) return;
  const float v = static_cast<float>(acc[0] / static_cast<double>(rows));
  var[j] = v;
  const float inv_std = 1.f / sqrtf(v + epsilon);
  s.scale[j] = (gamma ? gamma[j] : 1.f) * inv_std;
  s.shift[j] = beta[j] - mean[j] * s.scale[j];
  if (moving.mean) moving.mean[j] = bn_moving_update(moving.mean[j], mean[j], moving.decay);
  if (moving.var) moving.var[j] = bn_moving_update(moving.var[j], v, moving.decay);
}

// Inference coefficients from given statistics (one thread per channel).
__global__ void inference_coef_kernel(int64_t c, float epsilon, const float* __restrict__ gamma,
                                      const float* __restrict__ beta, const float* __restrict__ mean,
                                      const float* __restrict__ var, Scratch s) {
  TG_GRID_STRIDE_LOOP(j, c) {
    const float inv_std = 1.f / sqrtf(var[j] + epsilon);
    s.scale[j] = (gamma ? gamma[j] : 1.f) * inv_std;
    s.shift[j] = beta[j] - mean[j] * s.scale[j];
  }
}

// inv_std; with a fused ReLU (beta not null) also the forward's scale and shift for its mask.
__global__ void inv_std_kernel(int64_t c, float epsilon, const float* __restrict__ var, const float* __restrict__ gamma,
                               const float* __restrict__ beta, const float* __restrict__ mean, Scratch s) {
  TG_GRID_STRIDE_LOOP(j, c) {
    s.inv_std[j] = 1.f / sqrtf(var[j] + epsilon);
    if (beta) {
      s.scale[j] = (gamma ? gamma[j] : 1.f) * s.inv_std[j];
      s.y_shift[j] = beta[j] - mean[j] * s.scale[j];
    }
  }
}

// dbeta = sum dy, dgamma = sum dy * x^ (each optional); scale = gamma * inv_std, shift = mean dy,
// mean_dy_xhat = sum dy * x^ / rows.
__global__ void finish_backward_kernel(const double* __restrict__ groups, int64_t rows, int64_t c,
                                       const float* __restrict__ gamma, float* dgamma, float* dbeta, Scratch s) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kTileC + threadIdx.x;
  double acc[2];
  ordered_sums<0, 2>(groups, bn_num_groups(bn_num_chunks(rows)), c, j, acc);
  if (threadIdx.y != 0 || j >= c) return;
  if (dbeta) dbeta[j] = static_cast<float>(acc[0]);
  if (dgamma) dgamma[j] = static_cast<float>(acc[1]);
  s.scale[j] = (gamma ? gamma[j] : 1.f) * s.inv_std[j];
  s.shift[j] = static_cast<float>(acc[0] / static_cast<double>(rows));
  s.mean_dy_xhat[j] = static_cast<float>(acc[1] / static_cast<double>(rows));
}

// Element-wise passes over the (rows, C) elements as one flat array: each thread takes N consecutive elements (16
// bytes of T when C is a multiple of N and the tensors are 16-byte aligned, so a vector never leaves its row; else
// N = 1), channel j = i % C; each element is computed as the CPU computes it (the same bits either way).
// kRelu: max(y, 0) of the rounded y, relu_forward's bits (a ReLU fused into the output: one pass fewer).
template <typename T, int N, bool kRelu>
__global__ void affine_kernel(int64_t n, const T* __restrict__ x, T* __restrict__ y, int64_t c, Scratch s) {
  TG_VECTOR_LOOP(i, n, N) {
    const int64_t j0 = i % c;
    const auto vx = load_vec<N>(x, i);
    Vec<T, N> o;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const T v = from_f32<T>(to_f32(vx.v[k]) * s.scale[j0 + k] + s.shift[j0 + k]);
      o.v[k] = kRelu ? from_f32<T>(relu_one(to_f32(v))) : v;
    }
    store_vec(y, i, o);
  }
}

// dx = scale * (dy - mean_dy - x^ * mean_dy_xhat), dy as grad_of takes it (relu: with the forward's scale, which
// is this scale, and y_shift).
template <typename T, int N>
__global__ void backward_dx_kernel(int64_t n, const T* __restrict__ x, const T* __restrict__ dy,
                                   const float* __restrict__ mean, T* __restrict__ dx, int64_t c, bool relu,
                                   Scratch s) {
  TG_VECTOR_LOOP(i, n, N) {
    const int64_t j0 = i % c;
    const auto vx = load_vec<N>(x, i), vdy = load_vec<N>(dy, i);
    Vec<T, N> o;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const int64_t j = j0 + k;
      const float xv = to_f32(vx.v[k]);
      const float xhat = (xv - mean[j]) * s.inv_std[j];
      const float g = grad_of<T>(xv, to_f32(vdy.v[k]), j, s.scale, relu ? s.y_shift : nullptr);
      o.v[k] = from_f32<T>(s.scale[j] * (g - s.shift[j] - xhat * s.mean_dy_xhat[j]));
    }
    store_vec(dx, i, o);
  }
}

// Whether the element-wise passes over (rows, C) of T take 16-byte vectors.
template <typename T>
bool bn_vectors(int64_t c, const void* a, const void* b, const void* d = nullptr) {
  return c % vec_width<T>() == 0 && aligned16(a, b) && (d == nullptr || aligned16(d));
}

template <typename T>
void affine(const T* x, T* y, int64_t rows, int64_t c, bool relu, const Scratch& s, cudaStream_t stream,
            const char* op) {
  constexpr int N = vec_width<T>();
  if (relu)
    vector_kernel<N>(op, affine_kernel<T, N, true>, affine_kernel<T, 1, true>, bn_vectors<T>(c, x, y), rows * c, stream,
                     x, y, c, s);
  else
    vector_kernel<N>(op, affine_kernel<T, N, false>, affine_kernel<T, 1, false>, bn_vectors<T>(c, x, y), rows * c,
                     stream, x, y, c, s);
}

dim3 chunk_grid(int64_t rows, int64_t c) {
  return dim3(static_cast<unsigned>((bn_num_chunks(rows) + kTileY - 1) / kTileY),
              static_cast<unsigned>((c + kTileC - 1) / kTileC));
}
unsigned channel_blocks(int64_t c) { return static_cast<unsigned>((c + kTileC - 1) / kTileC); }
const dim3 kBlock(kTileC, kTileY);

// The groups' sums of slots [kFirst, kFirst + kSlots) of the chunk sums (group_sums_kernel).
template <int kFirst, int kSlots>
void group_sums(const Scratch& s, int64_t rows, int64_t c, cudaStream_t stream, const char* op) {
  const int64_t groups = bn_num_groups(bn_num_chunks(rows));
  const dim3 grid(static_cast<unsigned>((groups + kTileY - 1) / kTileY), channel_blocks(c));
  group_sums_kernel<kFirst, kSlots><<<grid, kBlock, 0, stream>>>(s.partial, bn_num_chunks(rows), c, s.groups);
  TG_CUDA_CHECK_LAUNCH_OF(op);
}

}  // namespace

size_t batch_norm_scratch_bytes(int64_t rows, int64_t c) {
  return align256(static_cast<size_t>(bn_num_chunks(rows) * 2 * c) * sizeof(double)) +
         align256(static_cast<size_t>(bn_num_groups(bn_num_chunks(rows)) * 2 * c) * sizeof(double)) +
         5 * align256(static_cast<size_t>(c) * sizeof(float));
}

void batch_norm_forward_training(DType t, const void* x, const float* gamma, const float* beta, void* y, float* mean,
                                 float* var, float* moving_mean, float* moving_var, float decay, int64_t rows,
                                 int64_t c, float epsilon, bool relu, void* scratch, cudaStream_t stream) {
  if (rows == 0 || c == 0) return;
  const Scratch s = carve(scratch, bn_num_chunks(rows), c);
  TG_CHECK(c <= int64_t{65535} * kTileC, "batch norm: {} channels exceed the launch grid", c);
  dispatch_float(t, "batch_norm_forward_training", [&](auto tag) {
    using T = decltype(tag);
    const T* xt = static_cast<const T*>(x);
    chunk_sums_kernel<kSumX, T>
        <<<chunk_grid(rows, c), kBlock, 0, stream>>>(xt, nullptr, nullptr, nullptr, rows, c, s.partial);
    TG_CUDA_CHECK_LAUNCH_OF("batch_norm_forward_training");
    group_sums<0, 1>(s, rows, c, stream, "batch_norm_forward_training");
    finish_mean_kernel<<<channel_blocks(c), kBlock, 0, stream>>>(s.groups, rows, c, mean);
    TG_CUDA_CHECK_LAUNCH_OF("batch_norm_forward_training");
    chunk_sums_kernel<kSumSqDev, T>
        <<<chunk_grid(rows, c), kBlock, 0, stream>>>(xt, nullptr, mean, nullptr, rows, c, s.partial);
    TG_CUDA_CHECK_LAUNCH_OF("batch_norm_forward_training");
    group_sums<1, 1>(s, rows, c, stream, "batch_norm_forward_training");
    finish_var_kernel<<<channel_blocks(c), kBlock, 0, stream>>>(s.groups, rows, c, epsilon, gamma, beta, mean, var,
                                                                Moving{moving_mean, moving_var, decay}, s);
    TG_CUDA_CHECK_LAUNCH_OF("batch_norm_forward_training");
    affine(xt, static_cast<T*>(y), rows, c, relu, s, stream, "batch_norm_forward_training");
  });
}

void batch_norm_forward_inference(DType t, const void* x, const float* gamma, const float* beta, const float* mean,
                                  const float* var, void* y, int64_t rows, int64_t c, float epsilon, bool relu,
                                  void* scratch, cudaStream_t stream) {
  if (rows == 0 || c == 0) return;
  const Scratch s = carve(scratch, bn_num_chunks(rows), c);
  linear_kernel("batch_norm_forward_inference", inference_coef_kernel, c, stream, epsilon, gamma, beta, mean, var, s);
  dispatch_float(t, "batch_norm_forward_inference", [&](auto tag) {
    using T = decltype(tag);
    affine(static_cast<const T*>(x), static_cast<T*>(y), rows, c, relu, s, stream, "batch_norm_forward_inference");
  });
}

void batch_norm_backward(DType t, const void* x, const float* gamma, const float* beta, const float* mean,
                         const float* var, const void* dy, void* dx, float* dgamma, float* dbeta, int64_t rows,
                         int64_t c, float epsilon, bool relu, void* scratch, cudaStream_t stream) {
  if (rows == 0 || c == 0) return;
  const Scratch s = carve(scratch, bn_num_chunks(rows), c);
  TG_CHECK(c <= int64_t{65535} * kTileC, "batch norm: {} channels exceed the launch grid", c);
  linear_kernel("batch_norm_backward", inv_std_kernel, c, stream, epsilon, var, gamma, relu ? beta : nullptr, mean, s);
  dispatch_float(t, "batch_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    const T *xt = static_cast<const T*>(x), *dyt = static_cast<const T*>(dy);
    chunk_sums_kernel<kSumDy, T><<<chunk_grid(rows, c), kBlock, 0, stream>>>(
        xt, dyt, mean, s.inv_std, rows, c, s.partial, relu ? s.scale : nullptr, relu ? s.y_shift : nullptr);
    TG_CUDA_CHECK_LAUNCH_OF("batch_norm_backward");
    group_sums<0, 2>(s, rows, c, stream, "batch_norm_backward");
    finish_backward_kernel<<<channel_blocks(c), kBlock, 0, stream>>>(s.groups, rows, c, gamma, dgamma, dbeta, s);
    TG_CUDA_CHECK_LAUNCH_OF("batch_norm_backward");
    if (!dx) return;
    constexpr int N = vec_width<T>();
    vector_kernel<N>("batch_norm_backward", backward_dx_kernel<T, N>, backward_dx_kernel<T, 1>,
                     bn_vectors<T>(c, xt, dyt, dx), rows * c, stream, xt, dyt, mean, static_cast<T*>(dx), c, relu, s);
  });
}

}  // namespace tg::cuda_kernels

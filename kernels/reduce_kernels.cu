// Reductions of the CUDA backend: sum and sum of squares in double, max |x|, and per-column sums of a
// row-major matrix (bias gradients). All are two-pass with a grid that depends only on the sizes and a
// fixed tree inside blocks, so the same input always gives the same bits (no atomics). The column sums use
// a 2-D grid (column tiles x row slabs), so a bias gradient of 64 channels over 400k rows fills the GPU.
// Inputs have any compute dtype T (f32, f16, bf16), read as f32; the column sums are stored as T.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "src/backend/cuda/cuda_kernels.h"
#include "src/backend/cuda/cuda_launch.h"

namespace tg::cuda_kernels {
namespace {

constexpr int kReduceThreads = 256;

struct SumOp {
  __device__ static double identity() { return 0.0; }
  __device__ static double combine(double a, double b) { return a + b; }
};
struct MaxAbsOp {  // values are |x| >= 0; NaN wins
  __device__ static double identity() { return 0.0; }
  __device__ static double combine(double a, double b) { return (isnan(a) || isnan(b)) ? NAN : fmax(a, b); }
};

// Tree reduction of one value per thread over a block of kReduceThreads; thread 0 gets the result.
template <typename Op>
__device__ double block_reduce(double v) {
  __shared__ double shared[kReduceThreads];
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int s = kReduceThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) shared[threadIdx.x] = Op::combine(shared[threadIdx.x], shared[threadIdx.x + s]);
    __syncthreads();
  }
  return shared[0];
}

// mode 0: x, 1: x^2, 2: |x|
template <typename Op, int kMode, typename T>
__global__ void reduce_pass1(const T* x, int64_t n, double* partials) {
  double acc = Op::identity();
  TG_GRID_STRIDE_LOOP(i, n) {
    const float xi = to_f32(x[i]);
    double v = kMode == 0   ? static_cast<double>(xi)
               : kMode == 1 ? static_cast<double>(xi) * static_cast<double>(xi)
                            : static_cast<double>(fabsf(xi));
    acc = Op::combine(acc, v);
  }
  double total = block_reduce<Op>(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

template <typename Op>
__global__ void reduce_pass2(const double* partials, int count, double* result) {
  double acc = Op::identity();
  for (int i = threadIdx.x; i < count; i += kReduceThreads) acc = Op::combine(acc, partials[i]);
  double total = block_reduce<Op>(acc);
  if (threadIdx.x == 0) *result = total;
}

unsigned reduce_blocks(int64_t n) {
  return static_cast<unsigned>(
      std::clamp<int64_t>((n + 4 * kReduceThreads - 1) / (4 * kReduceThreads), 1, kReduceMaxBlocks));
}

// ---- reduce_into over a table of tensors ---------------------------------------------------------------------
// Blocks of tensor k: table_blocks(n[k]); block b belongs to the tensor whose range of block numbers holds it.
struct TableLayout {
  int first_block[kReduceTable + 1];
};

__host__ __device__ inline int table_blocks(int64_t n) {
  const int64_t b = (n + 4 * kReduceThreads - 1) / (4 * kReduceThreads);
  return b < 1 ? 1 : (b > kReduceTableBlocks ? kReduceTableBlocks : static_cast<int>(b));
}

template <bool kSquares>
__global__ void reduce_table_pass1(ReduceTable t, TableLayout l, double* partials) {
  const int b = blockIdx.x;
  int k = 0;
  while (b >= l.first_block[k + 1]) ++k;
  const int nb = l.first_block[k + 1] - l.first_block[k];
  const float* __restrict__ x = t.x[k];
  const int64_t n = t.n[k];
  double acc = 0.0;
  for (int64_t i = static_cast<int64_t>(b - l.first_block[k]) * kReduceThreads + threadIdx.x; i < n;
       i += static_cast<int64_t>(nb) * kReduceThreads) {
    const double v = x[i];
    acc += kSquares ? v * v : v;
  }
  const double total = block_reduce<SumOp>(acc);
  if (threadIdx.x == 0) partials[b] = total;
}

// One block: per tensor in table order, its partials by a fixed tree, then running += w[k] * that.
__global__ void reduce_table_pass2(ReduceTable t, TableLayout l, const double* partials, bool first, bool last,
                                   double* running, float* out) {
  double acc = first ? 0.0 : *running;
  for (int k = 0; k < t.count; ++k) {
    double v = 0.0;
    for (int i = l.first_block[k] + threadIdx.x; i < l.first_block[k + 1]; i += kReduceThreads) v += partials[i];
    const double total = block_reduce<SumOp>(v);
    acc += static_cast<double>(t.w[k]) * total;
    __syncthreads();  // block_reduce's shared memory is reused by the next tensor
  }
  if (threadIdx.x == 0) {
    if (last)
      *out = static_cast<float>(acc);
    else
      *running = acc;
  }
}

// Column sums, pass 1: block (32, 8) sums 32 columns over one slab of kSlabRows rows (blockIdx.y): thread
// (tx, ty) walks rows ty, ty+8, ... of the slab in double, then a fixed tree over ty.
constexpr int64_t kSlabRows = 512;
constexpr int64_t kMaxSlabs = 4096;

int64_t column_slabs(int64_t rows) { return std::clamp<int64_t>((rows + kSlabRows - 1) / kSlabRows, 1, kMaxSlabs); }

template <typename T>
__global__ void column_sum_pass1(const T* __restrict__ x, int64_t rows, int64_t cols, int64_t rows_per_slab,
                                 double* __restrict__ partials) {
  __shared__ double shared[8][33];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_slab;
  const int64_t r1 = rows < r0 + rows_per_slab ? rows : r0 + rows_per_slab;
  double acc = 0.0;
  if (col < cols)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += 8) acc += to_f32(x[r * cols + col]);
  shared[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  for (int s = 4; s > 0; s >>= 1) {
    if (threadIdx.y < s) shared[threadIdx.y][threadIdx.x] += shared[threadIdx.y + s][threadIdx.x];
    __syncthreads();
  }
  if (threadIdx.y == 0 && col < cols) partials[static_cast<int64_t>(blockIdx.y) * cols + col] = shared[0][threadIdx.x];
}

// Pass 2: block (32, 32) per 32 columns: thread (tx, ty) adds slabs ty, ty+32, ... in order, then a fixed
// tree over ty.
template <typename T>
__global__ void column_sum_pass2(const double* __restrict__ partials, int64_t slabs, int64_t cols, T* out) {
  __shared__ double shared[32][33];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  double acc = 0.0;
  if (col < cols)
    for (int64_t k = threadIdx.y; k < slabs; k += 32) acc += partials[k * cols + col];
  shared[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  for (int s = 16; s > 0; s >>= 1) {
    if (threadIdx.y < s) shared[threadIdx.y][threadIdx.x] += shared[threadIdx.y + s][threadIdx.x];
    __syncthreads();
  }
  if (threadIdx.y == 0 && col < cols) out[col] = from_f32<T>(static_cast<float>(shared[0][threadIdx.x]));
}

}  // namespace

void reduce_sum_f64(DType t, const void* x, int64_t n, bool squares, double* partials, double* result,
                    cudaStream_t stream) {
  const unsigned blocks = reduce_blocks(n);
  dispatch_float(t, squares ? "sum_squares" : "sum", [&](auto tag) {
    using T = decltype(tag);
    const T* xt = static_cast<const T*>(x);
    if (squares)
      reduce_pass1<SumOp, 1><<<blocks, kReduceThreads, 0, stream>>>(xt, n, partials);
    else
      reduce_pass1<SumOp, 0><<<blocks, kReduceThreads, 0, stream>>>(xt, n, partials);
    TG_CUDA_CHECK_LAUNCH_OF(squares ? "sum_squares" : "sum");
  });
  reduce_pass2<SumOp><<<1, kReduceThreads, 0, stream>>>(partials, static_cast<int>(blocks), result);
  TG_CUDA_CHECK_LAUNCH();
}

void reduce_max_abs(DType t, const void* x, int64_t n, double* partials, double* result, cudaStream_t stream) {
  const unsigned blocks = reduce_blocks(n);
  dispatch_float(t, "max_abs", [&](auto tag) {
    using T = decltype(tag);
    reduce_pass1<MaxAbsOp, 2><<<blocks, kReduceThreads, 0, stream>>>(static_cast<const T*>(x), n, partials);
    TG_CUDA_CHECK_LAUNCH_OF("max_abs");
  });
  reduce_pass2<MaxAbsOp><<<1, kReduceThreads, 0, stream>>>(partials, static_cast<int>(blocks), result);
  TG_CUDA_CHECK_LAUNCH();
}

size_t reduce_table_scratch_bytes() { return sizeof(double) * kReduceTable * kReduceTableBlocks; }

void reduce_table(const ReduceTable& t, bool squares, bool first, bool last, double* running, float* out, void* scratch,
                  cudaStream_t stream) {
  TableLayout l{};
  for (int k = 0; k < t.count; ++k) l.first_block[k + 1] = l.first_block[k] + table_blocks(t.n[k]);
  for (int k = t.count; k < kReduceTable; ++k) l.first_block[k + 1] = l.first_block[k];
  auto* partials = static_cast<double*>(scratch);
  if (l.first_block[t.count] > 0) {
    if (squares)
      reduce_table_pass1<true><<<l.first_block[t.count], kReduceThreads, 0, stream>>>(t, l, partials);
    else
      reduce_table_pass1<false><<<l.first_block[t.count], kReduceThreads, 0, stream>>>(t, l, partials);
    TG_CUDA_CHECK_LAUNCH_OF("reduce_into");
  }
  reduce_table_pass2<<<1, kReduceThreads, 0, stream>>>(t, l, partials, first, last, running, out);
  TG_CUDA_CHECK_LAUNCH_OF("reduce_into");
}

size_t column_sum_scratch_bytes(int64_t rows, int64_t cols) {
  return static_cast<size_t>(column_slabs(rows) * std::max<int64_t>(cols, 1)) * sizeof(double);
}

void column_sum(DType t, const void* x, int64_t rows, int64_t cols, void* out, void* scratch, cudaStream_t stream) {
  if (cols == 0) return;
  const int64_t slabs = column_slabs(rows);
  const int64_t rows_per_slab = std::max<int64_t>(1, (rows + slabs - 1) / slabs);
  const unsigned col_blocks = static_cast<unsigned>((cols + 31) / 32);
  auto* partials = static_cast<double*>(scratch);
  dispatch_float(t, "column_sum", [&](auto tag) {
    using T = decltype(tag);
    column_sum_pass1<<<dim3(col_blocks, static_cast<unsigned>(slabs)), dim3(32, 8), 0, stream>>>(
        static_cast<const T*>(x), rows, cols, rows_per_slab, partials);
    TG_CUDA_CHECK_LAUNCH_OF("column_sum");
    column_sum_pass2<<<col_blocks, dim3(32, 32), 0, stream>>>(partials, slabs, cols, static_cast<T*>(out));
    TG_CUDA_CHECK_LAUNCH_OF("column_sum");
  });
}

}  // namespace tg::cuda_kernels

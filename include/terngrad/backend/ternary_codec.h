// CPU implementation of the per-tensor operations of the gradient codings over host memory: ternary (built on
// the shared math of terngrad/math/ternary_math.h, the definitions: scaler, codes, packed format, decode) and the
// fp16/fp32 sums and averages. kernels/ternary_kernels.cu has the same operations for CUDA
// (terngrad/backend/ternary_cuda.h). Both are compiled into the backend library (src/backend/cpu/ternary_codec.cc
// and dense_codec.cc, kernels/), whose codec ops (Backend::ternary_scaler ..., terngrad/backend/backend.h) call them;
// the tests and the codec benchmark call these functions directly.
//
// Every function runs on the calling thread's compute team (terngrad/core/parallel.h: call it from the
// compute thread) with vectorized loops (AVX-512, AVX2 or baseline, picked at run time), and gives the same
// bits at any thread count and on any instruction set: reductions are over fixed chunks of the tensor (their
// size depends on n only), combined in chunk order; everything else is element-wise.
#pragma once

#include <cstdint>

#include "terngrad/core/dtype.h"
#include "terngrad/core/enum_names.h"
#include "terngrad/core/philox.h"

namespace tg {

// Instruction-set paths of the CPU backend's own vector loops: the codec's and the LRN backward's (each gives
// the same bits on every path). Auto picks the best the CPU has, lowered as oneDNN's is by ONEDNN_MAX_CPU_ISA /
// DNNL_MAX_CPU_ISA (read from the variable); tests and benchmarks force one with set_ternary_codec_isa (clamped to
// that; returns the path now in use). Process-wide; not meant to change while the loops run.
enum class CodecIsa : int { kAuto = -1, kGeneric = 0, kAvx2 = 1, kAvx512 = 2 };
CodecIsa set_ternary_codec_isa(CodecIsa isa);
CodecIsa ternary_codec_isa();  // the path in use
// The highest path the values of ONEDNN_MAX_CPU_ISA and DNNL_MAX_CPU_ISA allow (the first wins when set, as in
// oneDNN; nullptr: unset), read as text because this code is also built without oneDNN (the GPU check): unset,
// ALL, AVX512* and AVX10* leave every path, AVX2* stops at AVX2, any other value (SSE41, AVX) at the generic loop.
CodecIsa onednn_isa_limit(const char* onednn_max_cpu_isa, const char* dnnl_max_cpu_isa);
template <>
struct EnumNames<CodecIsa> : EnumNamesBase {
  static constexpr const char* kFlag = "--isa";
  static constexpr EnumName<CodecIsa> kList[] = {{CodecIsa::kAuto, "auto"},
                                                 {CodecIsa::kGeneric, "generic"},
                                                 {CodecIsa::kAvx2, "avx2"},
                                                 {CodecIsa::kAvx512, "avx512"}};
};

// One-pass statistics of one tensor (ternary_math.h's scaler definition).
struct TensorStats {
  double sum = 0.0;     // sum of g, in double
  double sumsq = 0.0;   // sum of g^2, in double (each g^2 is exact in double)
  float max_abs = 0.f;  // max |g|; NaN when any element is NaN, else +Inf when any is infinite
  double mean = 0.0;    // sum / n
  double sigma = 0.0;   // population std sqrt(max(0, sumsq/n - mean^2)); NaN when a sum is not finite
};
TensorStats tensor_stats_cpu(const float* g, int64_t n);  // all zero for n <= 0

// s = ternary_scaler_from_stats(sigma, max|g|, clip_factor) of one tensor: NaN for a non-finite g, 0 for an
// empty tensor.
float ternary_scaler_cpu(const float* g, int64_t n, float clip_factor);
// Weight decay and error feedback's first half in the same pass: g[i] = (g[i] + decay * decayed[i]) + residual[i], a
// term left out when its pointer is null (decay * decayed[i] rounded to float first, as Backend::axpy adds it), then
// ternary_scaler_cpu of the new g: the same bits as axpy, the add and the scaler one after another.
float ternary_scaler_with_adds_cpu(float* g, const float* decayed, float decay, const float* residual, int64_t n,
                                   float clip_factor);

// Per-bucket scalers (ternary_math.h): scalers (ternary_num_scalers(n, bucket) floats) = each bucket's
// ternary_bucket_scaler from the tensor's statistics and the bucket's max|g|, after the adds of
// ternary_scaler_with_adds_cpu (decayed / residual null: none; g is then only read). bucket = 0 (or >= n): one
// scaler, ternary_scaler_with_adds_cpu's. Else bucket is a multiple of kScalerBucketAlign (an Error otherwise).
void ternary_bucket_scalers_cpu(float* g, const float* decayed, float decay, const float* residual, int64_t n,
                                float clip_factor, int64_t bucket, float* scalers);

// g (n) -> packed (ceil(n/4) bytes), codes drawn from key with counter (step, tensor) as ternarize_one
// defines them. Returns the number of zero codes. With a residual (n floats, not overlapping g; error
// feedback's second half), the same pass writes residual[i] = ternary_residual_value(g[i], s, code i).
int64_t ternary_encode_cpu(const float* g, int64_t n, float s, PhiloxKey key, uint32_t step, uint32_t tensor,
                           uint8_t* packed, float* residual = nullptr);
// The same with per-bucket scalers: element i is drawn with scalers[ternary_scaler_of(i, bucket)] (bucket 0: one
// scaler; else a multiple of kScalerBucketAlign). The same bits as the one-scaler form when there is one bucket.
int64_t ternary_encode_buckets_cpu(const float* g, int64_t n, const float* scalers, int64_t bucket, PhiloxKey key,
                                   uint32_t step, uint32_t tensor, uint8_t* packed, float* residual = nullptr);

// packed (ceil(n/4) bytes) -> codes (n) in {-1, 0, +1}.
void ternary_unpack_cpu(const uint8_t* packed, int64_t n, int8_t* codes);

// code_sums[i] = sum_w code_w[i] for i < n, worker w's packed codes at packed + w * stride (the int8 sums
// the allreduce8 exchange adds up). 1 <= num_workers <= 127 (an int8 holds the sum), else an Error.
void ternary_sum_codes_cpu(const uint8_t* packed, int64_t stride, int num_workers, int64_t n, int8_t* code_sums);

// out[i] = max(0, max over w of xs[w][i]), a non-finite xs[w][i] counting as +Inf (Backend::max_scalers).
void max_scalers_cpu(const float* const* xs, int count, int64_t n, float* out);

// g[i] = ternary_decode_value(s, code_sums[i], num_workers) = s * code_sums[i] / num_workers for i < n.
void ternary_decode_sums_cpu(const int8_t* code_sums, int64_t n, float s, int num_workers, float* g);
// The decodes with per-bucket scalers: element i decoded with scalers[ternary_scaler_of(i, bucket)].
void ternary_decode_sums_buckets_cpu(const int8_t* code_sums, int64_t n, const float* scalers, int64_t bucket,
                                     int num_workers, float* g);
void ternary_decode_gathered_buckets_cpu(const uint8_t* gathered, int64_t stride, int num_workers, int64_t n,
                                         const float* scalers, int64_t bucket, float* g);

// g[i] = ternary_decode_value(s, sum_w code_w[i], num_workers) where worker w's packed codes start at
// gathered + w * stride. num_workers >= 1 (vectorized up to 127 workers, a plain loop beyond). An output of
// more than 32 MiB that is 64-byte aligned is written with streaming stores (it bypasses the caches).
void ternary_decode_gathered_cpu(const uint8_t* gathered, int64_t stride, int num_workers, int64_t n, float s,
                                 float* g);

// The two decodes of elements [begin, begin + count) of one tensor into out[0, count), on the calling thread
// only (no compute team, no streaming stores): the same values as the whole tensor's decode. For the decode
// inside the optimizer's pass (Backend::optimizer_update_coded), one cache-sized tile at a time. A gathered
// range starts at a packed byte (begin a multiple of 4); code_sums points at the tensor's first sum. Element i
// is decoded with scalers[ternary_scaler_of(i, bucket)] (the tensor's scalers; bucket 0: one).
void ternary_decode_gathered_range_cpu(const uint8_t* gathered, int64_t stride, int num_workers, int64_t begin,
                                       int64_t count, const float* scalers, int64_t bucket, float* out);
void ternary_decode_sums_range_cpu(const int8_t* code_sums, int64_t begin, int64_t count, const float* scalers,
                                   int64_t bucket, int num_workers, float* out);

// ---- fp16 and fp32 codings (the tensors left out of ternarization) ----------------------------------------------
// xs: `count` >= 1 pointers to n floats each (the workers' gradients, in worker order).

// out[i] = float_to_half(sum over w, in order, of half_to_float(float_to_half(xs[w][i])), added in fp32): each
// worker's fp16 payload summed in fp32 and rounded to fp16 once.
void encode_f16_sum_cpu(const float* const* xs, int count, int64_t n, half_bits* out);
// out[i] = sum over w, in order, of xs[w][i]. out may be xs[0], not another of xs.
void encode_f32_sum_cpu(const float* const* xs, int count, int64_t n, float* out);
// out[i] = half_to_float(the fp16 sum of encode_f16_sum_cpu) / count, without an fp16 buffer. out may be any of xs
// (each element is read before it is written).
void average_f16_cpu(const float* const* xs, int count, int64_t n, float* out);
// out[i] = (sum over w, in order, of xs[w][i]) / count; count 1 copies (nothing to do when out is xs[0]). out may
// be any of xs.
void average_f32_cpu(const float* const* xs, int count, int64_t n, float* out);
// g[i] = half_to_float(sum[i]) / num_workers.
void decode_f16_sum_cpu(const half_bits* sum, int64_t n, int num_workers, float* g);
// g[i] = sum[i] / num_workers (g may be sum).
void decode_f32_sum_cpu(const float* sum, int64_t n, int num_workers, float* g);

}  // namespace tg

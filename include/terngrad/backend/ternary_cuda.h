// Launchers of the CUDA kernels of the gradient codings (kernels/ternary_kernels.cu): the same operations as
// terngrad/backend/ternary_codec.h, over device pointers, on the given stream (a cudaStream_t passed as
// void* so this header needs no CUDA headers). All launches are asynchronous and checked
// (TG_CUDA_CHECK_LAUNCH of terngrad/backend/cuda_check.h). Built only when the CUDA backend is
// (TG_HAVE_CUDA); code outside the CUDA backend reaches them through the Backend's codec ops
// (terngrad/backend/backend.h; src/backend/cuda/cuda_codec.cc), which every build has.
//
// Bits: codes, code sums and decodes are the CPU loops' bit for bit (the shared TG_HOST_DEVICE math of
// terngrad/math/ternary_math.h, compiled with -fmad=false), and so is the scaler: its double sums follow
// ternary_math.h's fixed order (the CPU's chunks, lanes and combination order). The fp16 conversions are the
// scalar ones of terngrad/core/dtype.h: the same bits as the CPU's F16C conversions except NaN payloads.
#pragma once

#include <cstddef>
#include <cstdint>

#include "terngrad/core/dtype.h"
#include "terngrad/core/philox.h"
#include "terngrad/math/optim_math.h"

namespace tg {

// The scalers of up to kScalerTableCuda tensors in one table: each item's scaler(s) (device floats) =
// ternary_scaler_from_stats(sigma, max|g|, clip_factor) of its g (n elements, device), bit-identical to
// ternary_scaler_cpu: one warp per chunk of ternary_math.h's order, all the table's chunks in one launch (each lane
// adds its elements in index order, the lanes combine pairwise by shuffles), their double sums and max bits in the
// workspace; then one block per tensor combines its chunks pairwise and applies the formula (a second launch). NaN
// for a non-finite g, 0 for n = 0. bucket > 0 (per-bucket scalers, ternary_math.h): scaler points at
// ternary_num_scalers(n, bucket) floats, each bucket's ternary_bucket_scaler (a third launch for the table's
// bucket maxima). Weight decay and error feedback's first half in the same pass: g[i] = (g[i] + decay *
// decayed[i]) + residual[i] (a null term left out; g written only then), bit-identical to
// ternary_scaler_with_adds_cpu. The items' g must not overlap. workspace: ternary_scaler_workspace_bytes_cuda()
// bytes.
constexpr int kScalerTableCuda = 64;
struct TernaryScalerCuda {
  float* g;
  const float* decayed;  // or null
  float decay;
  const float* residual;  // or null
  int64_t n;
  float* scaler;
  int64_t bucket;  // elements per scaler (0: one)
};
size_t ternary_scaler_workspace_bytes_cuda();
void ternary_scaler_table_cuda(const TernaryScalerCuda* items, int count, float clip_factor, void* workspace,
                               void* stream);

// packed (ceil(n/4) bytes, device) = codes of g drawn with *scaler (device), key and counter (step, tensor)
// (ternarize_one: 16-bit uniforms, 8 elements per Philox block): bit-identical to ternary_encode_cpu.
// zero_count (device int, or null) = the number of zero codes (n < 2^31; set to 0 first, then each block adds
// its count: an integer, so the order of the adds does not matter). bucket > 0: element i drawn with
// scaler[i / bucket].
void ternary_encode_cuda(const float* g, int64_t n, const float* scaler, PhiloxKey key, uint32_t step, uint32_t tensor,
                         uint8_t* packed, int32_t* zero_count, void* stream, int64_t bucket = 0);

// codes (n) = unpacked codes of packed.
// ternary_encode_cuda of up to kEncodeTableCuda tensors in one launch (plus one that zeroes the zero counts):
// the same bits.
constexpr int kEncodeTableCuda = 64;
struct TernaryEncodeCuda {
  const float* g;
  int64_t n;
  const float* scaler;
  uint32_t tensor;
  uint8_t* packed;
  int32_t* zero_count;  // or null
  float* residual;      // or null: receives ternary_residual_value(g[i], s, code i) (error feedback)
  int64_t bucket;       // elements per scaler (0: one)
};
void ternary_encode_table_cuda(const TernaryEncodeCuda* items, int count, PhiloxKey key, uint32_t step, void* stream);

void ternary_unpack_cuda(const uint8_t* packed, int64_t n, int8_t* codes, void* stream);

// code_sums[i] = sum over workers of their codes of element i, worker w's packed codes at packed + w * stride
// (1 <= num_workers <= 127, else an Error): as ternary_sum_codes_cpu.
void ternary_sum_codes_cuda(const uint8_t* packed, int64_t stride, int num_workers, int64_t n, int8_t* code_sums,
                            void* stream);

// g[i] = scaler[i / bucket] * code_sums[i] / num_workers (bucket 0: scaler[0]).
void ternary_decode_sums_cuda(const int8_t* code_sums, int64_t n, const float* scaler, int num_workers, float* g,
                              void* stream, int64_t bucket = 0);

// g[i] = scaler[i / bucket] * sum_w code_w[i] / num_workers, worker w's packed codes at gathered + w * stride.
void ternary_decode_gathered_cuda(const uint8_t* gathered, int64_t stride, int num_workers, int64_t n,
                                  const float* scaler, float* g, void* stream, int64_t bucket = 0);

// The optimizer update of w (n elements) from the average decoded per element, as ternary_decode_gathered_cuda
// (code_sums null) or ternary_decode_sums_cuda (gathered null) and then optimizer_update_one / ema_update_one
// (Backend::optimizer_update_coded): one thread per element, the decoded gradient never written. s1, s2, ema
// may be null when the step does not use them. Up to kCodedUpdateTableCuda tensors in one launch (a block row
// each).
constexpr int kCodedUpdateTableCuda = 32;
struct CodedUpdateCuda {
  float* w;
  const uint8_t* gathered;  // or null: code_sums
  int64_t stride;
  const int8_t* code_sums;  // or null: gathered
  int num_workers;
  const float* scaler;
  int64_t bucket;
  float *s1, *s2, *ema;  // or null
  int64_t n;
};
void optimizer_update_coded_table_cuda(const OptimizerStep& step, const CodedUpdateCuda* items, int count,
                                       void* stream);

// ---- fp16 and fp32 codings: the operations of ternary_codec.h's *_cpu functions of the same names. xs is a
// host array of `count` (1..kCodecMaxInputsCuda) device pointers (passed to the kernel by value).
constexpr int kCodecMaxInputsCuda = 128;
void encode_f16_sum_cuda(const float* const* xs, int count, int64_t n, half_bits* out, void* stream);
void encode_f32_sum_cuda(const float* const* xs, int count, int64_t n, float* out, void* stream);
void average_f16_cuda(const float* const* xs, int count, int64_t n, float* out, void* stream);
void average_f32_cuda(const float* const* xs, int count, int64_t n, float* out, void* stream);
// out[i] = max(0, max over w of xs[w][i]), a non-finite value counting as +Inf: as max_scalers_cpu.
void max_scalers_cuda(const float* const* xs, int count, int64_t n, float* out, void* stream);
void decode_f16_sum_cuda(const half_bits* sum, int64_t n, int num_workers, float* g, void* stream);
void decode_f32_sum_cuda(const float* sum, int64_t n, int num_workers, float* g, void* stream);

}  // namespace tg

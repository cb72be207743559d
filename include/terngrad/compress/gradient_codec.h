// GradientCodec: the math of one step's gradient exchange over the fused layout a CompressionPolicy lays out
// (2-bit ternary codes + one scaler per ternary tensor or per --scaler_bucket elements of it, fp16, fp32), for any
// range of tensors (a bucket), without knowing about transports: GradientExchange
// (terngrad/exchange/gradient_exchange.h) moves the payloads.
//
// Two forms of every range operation, with the same bits:
//   - the device form takes a Backend and tensors on its device, and runs only the Backend's codec ops
//     (terngrad/backend/backend.h, "gradient codec"): the same code runs on the CPU (the vectorized loops of
//     terngrad/backend/ternary_codec.h) and on CUDA (kernels/ternary_kernels.cu), so no gradient leaves its
//     device. Its CPU results are the host form's bit for bit; the CUDA ops give the CPU's bits (both tested in
//     tests/codec_ops_test.cc, the CUDA part on a machine with a GPU).
//   - the host form over host pointers (the original API) calls the CPU loops directly on the calling thread's
//     compute team (terngrad/core/parallel.h).
//
// Buffers of a range hold only that range: `packed` starts at the range's first packed byte, `f16`/`f32` at
// its first element, `code_sums` (int8, 4 per packed byte) at element 4 * packed_begin. Scaler vectors are
// always full-size (num_scalers: a tensor's num_scalers from its scaler_index), zero counts full-size
// (num_ternary, by ternary_index). In the device form the buffers are tensors seen flat (any shape; the codec
// takes views of them, allocating nothing):
//   scalers     f32 (num_scalers)             zero_codes  i32 (num_ternary), or undefined
//   packed      u8  (packed_bytes)            gathered    u8, worker w's packed block at w * stride
//   code_sums   i8  (4 * packed_bytes)        f16 / f32   f16 (f16_elements) / f32 (f32_elements)
// and gradients are f32 tensors on the backend's device (check_grads(grads, be.device())).
//
// Randomness: worker w draws its codes from philox_key(seed, w) with counter (step, parameter index i,
// element), i being the tensor's index in the policy (all parameters), so codes do not depend on the
// bucketing, the thread count or the device.
#pragma once

#include <cstdint>
#include <vector>

#include "terngrad/backend/backend.h"
#include "terngrad/compress/compression_policy.h"
#include "terngrad/core/dtype.h"
#include "terngrad/core/tensor.h"
#include "terngrad/core/weight_decay.h"

namespace tg {

// Tensors [begin, end) of the policy (a bucket).
struct TensorRange {
  int begin = 0, end = 0;
};

// Where a range of tensors lives in the fused buffers.
struct RangeLayout {
  int64_t packed_begin = 0, packed_end = 0;  // bytes of the fused ternary buffer
  int64_t f16_begin = 0, f16_end = 0;        // elements of the fused fp16 buffer
  int64_t f32_begin = 0, f32_end = 0;        // elements of the fused fp32 buffer
  int scaler_begin = 0, scaler_end = 0;      // scaler indices (several per tensor with --scaler_bucket)
  int ternary_begin = 0, ternary_end = 0;    // ternary tensor indices (zero counts)
  int64_t elements = 0;                      // gradient elements of the range
  int64_t packed_bytes() const { return packed_end - packed_begin; }
  int64_t f16_elements() const { return f16_end - f16_begin; }
  int64_t f32_elements() const { return f32_end - f32_begin; }
  int num_scalers() const { return scaler_end - scaler_begin; }
};

// One worker's encoded gradient of one step over all tensors (tests and single-worker tools).
struct EncodedGradient {
  std::vector<float> scalers;       // (num_scalers) the shared scalers the codes were drawn with
  std::vector<uint8_t> packed;      // (packed_bytes) fused 2-bit codes
  std::vector<half_bits> f16;       // (f16_elements)
  std::vector<float> f32;           // (f32_elements)
  std::vector<int64_t> zero_codes;  // (num_ternary) zero codes per ternary tensor
};

class GradientCodec {
 public:
  GradientCodec(CompressionPolicy policy, uint64_t seed);

  const CompressionPolicy& policy() const { return policy_; }
  TensorRange all() const { return {0, policy_.num_tensors()}; }
  RangeLayout layout(TensorRange r) const;
  // grads: one f32 tensor per policy tensor with the policy's element counts, on `device` (the host for the
  // host form); throws naming the tensor.
  void check_grads(const std::vector<Tensor>& grads) const;
  void check_grads(const std::vector<Tensor>& grads, Device device) const;

  // ---- host form: host pointers ----

  // This worker's scalers of each ternary tensor of r -> scalers[scaler_index ...] (before sharing).
  void local_scalers(const std::vector<Tensor>& grads, TensorRange r, float* scalers) const;
  // Throws naming the tensor and the step when a shared scaler of r is not finite.
  void check_scalers(const float* scalers, TensorRange r, uint32_t step) const;
  // Ternary codes of r drawn with the shared scalers -> packed (the range's bytes); zero codes per tensor
  // -> zero_codes[ternary_index] when zero_codes is not null.
  void encode_ternary(const std::vector<Tensor>& grads, TensorRange r, const float* scalers, uint32_t step,
                      uint32_t worker, uint8_t* packed, int64_t* zero_codes) const;
  // Sum over `workers` (in order) of their fp16-rounded values, in fp32, rounded to fp16 once -> f16.
  void encode_f16(const std::vector<const std::vector<Tensor>*>& workers, TensorRange r, half_bits* f16) const;
  // Sum over `workers` (in order) of their fp32 values -> f32.
  void encode_f32(const std::vector<const std::vector<Tensor>*>& workers, TensorRange r, float* f32) const;
  // One process alone: the fp16 and fp32 tensors of r in `out` become the average over `workers` directly,
  // the same bits as encode_f16/encode_f32 followed by decode_f16_sum/decode_f32_sum (out may be one of the
  // workers' gradients: each element is read before it is written).
  void average_local(const std::vector<const std::vector<Tensor>*>& workers, TensorRange r,
                     const std::vector<Tensor>& out) const;
  // Sum over num_workers packed blocks (worker w at packed + w * stride) of the codes -> code_sums (int8).
  void sum_codes(const uint8_t* packed, int64_t stride, int num_workers, TensorRange r, int8_t* code_sums) const;

  // Decoders: each writes the tensors of its coding in r with the average over num_workers.
  void decode_ternary_gathered(const uint8_t* gathered, int64_t stride, int num_workers, TensorRange r,
                               const float* scalers, const std::vector<Tensor>& grads) const;
  void decode_ternary_sums(const int8_t* code_sums, int num_workers, TensorRange r, const float* scalers,
                           const std::vector<Tensor>& grads) const;
  void decode_f16_sum(const half_bits* sum, int num_workers, TensorRange r, const std::vector<Tensor>& grads) const;
  void decode_f32_sum(const float* sum, int num_workers, TensorRange r, const std::vector<Tensor>& grads) const;

  // ---- device form: tensors on be's device, Backend ops only (see the file comment for the buffers) ----
  // The scalers stay on the device, so this form does not check them: after the all-reduce MAX, copy the
  // shared scalers to the host and call check_scalers (encoding with a non-finite scaler gives all-zero codes,
  // not an error). Zero codes are i32 (the host form's are int64). Nothing synchronizes or allocates.
  // residuals (error feedback; null: none): per policy tensor the worker's residual (defined for the ternary
  // ones), added to grads in the scalers' pass (Backend::ternary_scaler) and rewritten by the encode's
  // (TernaryEncodeItem::residual). decay (null: none): weight decay added to the ternary tensors' grads in the
  // same pass, before the residual (the other tensors' decay is the caller's: Backend::axpy).
  void local_scalers(Backend& be, const std::vector<Tensor>& grads, TensorRange r, const Tensor& scalers,
                     const std::vector<Tensor>* residuals = nullptr, const WeightDecayTerms* decay = nullptr) const;
  // The local part of sharing: shared's scalers of r = the max over the local workers' scaler vectors
  // (worker_scalers: one f32 (num_scalers) each, from local_scalers), a non-finite scaler counting as +Inf so
  // that the all-reduce MAX that follows carries it to every worker (Backend::max_scalers).
  void max_local_scalers(Backend& be, const std::vector<Tensor>& worker_scalers, TensorRange r,
                         const Tensor& shared) const;
  void encode_ternary(Backend& be, const std::vector<Tensor>& grads, TensorRange r, const Tensor& scalers,
                      uint32_t step, uint32_t worker, const Tensor& packed, const Tensor& zero_codes,
                      const std::vector<Tensor>* residuals = nullptr) const;
  void encode_f16(Backend& be, const std::vector<const std::vector<Tensor>*>& workers, TensorRange r,
                  const Tensor& f16) const;
  void encode_f32(Backend& be, const std::vector<const std::vector<Tensor>*>& workers, TensorRange r,
                  const Tensor& f32) const;
  void average_local(Backend& be, const std::vector<const std::vector<Tensor>*>& workers, TensorRange r,
                     const std::vector<Tensor>& out) const;
  // packed: num_workers blocks of the range's packed bytes, worker w's at w * stride.
  void sum_codes(Backend& be, const Tensor& packed, int64_t stride, int num_workers, TensorRange r,
                 const Tensor& code_sums) const;
  void decode_ternary_gathered(Backend& be, const Tensor& gathered, int64_t stride, int num_workers, TensorRange r,
                               const Tensor& scalers, const std::vector<Tensor>& grads) const;
  void decode_ternary_sums(Backend& be, const Tensor& code_sums, int num_workers, TensorRange r, const Tensor& scalers,
                           const std::vector<Tensor>& grads) const;
  void decode_f16_sum(Backend& be, const Tensor& sum, int num_workers, TensorRange r,
                      const std::vector<Tensor>& grads) const;
  // The ternary tensors of r as the decoders above read them, described instead of decoded: out[i] (one entry per
  // policy tensor; the others are left as they are) = the tensor's coded average, for the optimizer to decode
  // inside its update (Backend::optimizer_update_coded). Exactly one of gathered (decode_ternary_gathered's, with
  // its stride) and code_sums (decode_ternary_sums') is defined.
  void coded_averages(const Tensor& gathered, int64_t stride, const Tensor& code_sums, int num_workers, TensorRange r,
                      const Tensor& scalers, std::vector<CodedAverage>& out) const;
  void decode_f32_sum(Backend& be, const Tensor& sum, int num_workers, TensorRange r,
                      const std::vector<Tensor>& grads) const;

  // ---- whole-gradient forms (all tensors, one worker; host) ----
  void allocate(EncodedGradient& e) const;
  std::vector<float> local_scalers(const std::vector<Tensor>& grads) const;
  void encode(const std::vector<Tensor>& grads, const std::vector<float>& shared_scalers, uint32_t step,
              uint32_t worker, EncodedGradient& out) const;
  // code_sums (4 * packed_bytes); gathered (num_workers, packed_bytes).
  void decode_ternary_sums(const int8_t* code_sums, const std::vector<float>& scalers, int num_workers,
                           const std::vector<Tensor>& grads) const {
    decode_ternary_sums(code_sums, num_workers, all(), scalers.data(), grads);
  }
  void decode_ternary_gathered(const uint8_t* gathered, const std::vector<float>& scalers, int num_workers,
                               const std::vector<Tensor>& grads) const {
    decode_ternary_gathered(gathered, policy_.packed_bytes(), num_workers, all(), scalers.data(), grads);
  }
  void decode_f16_sum(const half_bits* sum, int num_workers, const std::vector<Tensor>& grads) const {
    decode_f16_sum(sum, num_workers, all(), grads);
  }
  void decode_f32_sum(const float* sum, int num_workers, const std::vector<Tensor>& grads) const {
    decode_f32_sum(sum, num_workers, all(), grads);
  }
  void unpack_codes(const uint8_t* packed, int8_t* codes) const { sum_codes(packed, 0, 1, all(), codes); }

 private:
  void check_range(TensorRange r) const;
  CompressionPolicy policy_;
  uint64_t seed_;
};

}  // namespace tg

// TernaryCoding: the ternary tensors of a range of policy tensors (a bucket) over the policy's fused layout (2-bit
// codes back to back, one scaler per tensor or per --scaler_bucket elements), through the Backend's codec ops only
// (terngrad/backend/backend.h, "gradient codec"): the vectorized loops of terngrad/backend/ternary_codec.h on the
// CPU, kernels/ternary_kernels.cu on CUDA, the same bits (tests/codec_ops_test.cc), no gradient leaving its device.
// The TernGrad family's schemes (terngrad, hierarchical) run it; SharedScalers computes and shares the scalers.
//
// Buffers of a range hold only that range: `packed` starts at the range's first packed byte, `code_sums` (int8,
// 4 per packed byte) at element 4 * packed_begin. Scaler vectors are always full-size (num_scalers, a tensor's
// from its scaler_index), zero counts full-size (num_ternary, by ternary_index). Buffers are tensors seen flat (any
// shape; views are taken, nothing allocated):
//   scalers     f32 (num_scalers)             zero_codes  i32 (num_ternary), or undefined
//   packed      u8  (packed_bytes)            gathered    u8, worker w's packed block at w * stride
//   code_sums   i8  (4 * packed_bytes)
// Gradients are f32 tensors on the backend's device, one per policy tensor (CompressionPolicy::check_grads).
//
// Randomness: worker w draws its codes from philox_key(seed, w) with counter (step, parameter index i, element),
// i being the tensor's index in the policy (all parameters), so codes do not depend on the bucketing, the thread
// count or the device.
#pragma once

#include <cstdint>
#include <vector>

#include "terngrad/backend/backend.h"
#include "terngrad/compress/compression_policy.h"
#include "terngrad/core/weight_decay.h"

namespace tg {

class TernaryCoding {
 public:
  TernaryCoding(const CompressionPolicy& policy, uint64_t seed) : policy_(policy), seed_(seed) {}
  const CompressionPolicy& policy() const { return policy_; }

  // This worker's scalers of each ternary tensor of r -> scalers[scaler_index ...] (before sharing).
  // residuals (error feedback; null: none): per policy tensor the worker's residual (defined for the ternary ones),
  // added to grads in the same pass (Backend::ternary_scaler) and rewritten by the encode's
  // (TernaryEncodeItem::residual). decay (null: none): weight decay added to the ternary tensors' grads in the
  // same pass, before the residual (the other tensors' decay is the caller's: Backend::axpy).
  void local_scalers(Backend& be, const std::vector<Tensor>& grads, TensorRange r, const Tensor& scalers,
                     const std::vector<Tensor>* residuals = nullptr, const WeightDecayTerms* decay = nullptr) const;
  // The local part of sharing: shared's scalers of r = the max over the local workers' scaler vectors
  // (worker_scalers: one f32 (num_scalers) each, from local_scalers), a non-finite scaler counting as +Inf so
  // that the all-reduce MAX that follows carries it to every worker (Backend::max_scalers).
  void max_local_scalers(Backend& be, const std::vector<Tensor>& worker_scalers, TensorRange r,
                         const Tensor& shared) const;
  // Throws naming the tensor and the step when a shared scaler of r (host copy, full-size) is not finite (the
  // device ops do not check: encoding with a non-finite scaler gives all-zero codes, not an error).
  void check_scalers(const float* scalers, TensorRange r, uint32_t step) const;
  // Ternary codes of r drawn with the shared scalers -> packed (the range's bytes); zero codes per tensor ->
  // zero_codes[ternary_index] when zero_codes is defined.
  void encode_ternary(Backend& be, const std::vector<Tensor>& grads, TensorRange r, const Tensor& scalers,
                      uint32_t step, uint32_t worker, const Tensor& packed, const Tensor& zero_codes,
                      const std::vector<Tensor>* residuals = nullptr) const;
  // Sum over num_workers packed blocks (worker w's at w * stride) of the codes -> code_sums (int8).
  void sum_codes(Backend& be, const Tensor& packed, int64_t stride, int num_workers, TensorRange r,
                 const Tensor& code_sums) const;
  // Decoders: each writes the ternary tensors of r with the average over num_workers.
  void decode_ternary_gathered(Backend& be, const Tensor& gathered, int64_t stride, int num_workers, TensorRange r,
                               const Tensor& scalers, const std::vector<Tensor>& grads) const;
  void decode_ternary_sums(Backend& be, const Tensor& code_sums, int num_workers, TensorRange r, const Tensor& scalers,
                           const std::vector<Tensor>& grads) const;
  // The ternary tensors of r as the decoders above read them, described instead of decoded: out[i] (one entry per
  // policy tensor; the others are left as they are) = the tensor's coded average, for the optimizer to decode
  // inside its update (Backend::optimizer_update_coded). Exactly one of gathered (decode_ternary_gathered's, with
  // its stride) and code_sums (decode_ternary_sums') is defined.
  void coded_averages(const Tensor& gathered, int64_t stride, const Tensor& code_sums, int num_workers, TensorRange r,
                      const Tensor& scalers, std::vector<CodedAverage>& out) const;

 private:
  const CompressionPolicy& policy_;
  uint64_t seed_;
};

}  // namespace tg

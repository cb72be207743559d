// GradientCodec: encodes one worker's gradient tensors into the fused payload the policy lays out (2-bit
// ternary codes + one scaler per ternary tensor, fp16, fp32) and decodes summed payloads into the averaged
// gradient. It knows nothing about transports: GradientExchange (terngrad/comm/gradient_exchange.h) moves
// the payloads. Host tensors only for now (plain loops, optionally over a ThreadPool); the CUDA kernels of
// the same operations are in kernels/ternary_kernels.cu (terngrad/compress/ternary_cuda.h).
//
// Randomness: worker w draws its codes from philox_key(seed, w) with counter (step, parameter index i, element),
// i being the tensor's index in the policy (all parameters), so codes do not depend on thread count or device.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "terngrad/compress/compression_policy.h"
#include "terngrad/core/dtype.h"
#include "terngrad/core/tensor.h"

namespace tg {

class ThreadPool;

// One worker's encoded gradient of one step; sizes fixed by the policy (GradientCodec::allocate).
struct EncodedGradient {
  std::vector<float> scalers;       // (num_ternary) the shared scalers the codes were drawn with
  std::vector<uint8_t> packed;      // (packed_bytes) fused 2-bit codes
  std::vector<half_bits> f16;       // (f16_elements)
  std::vector<float> f32;           // (f32_elements)
  std::vector<int64_t> zero_codes;  // (num_ternary) number of zero codes per ternary tensor (summaries)
};

class GradientCodec {
 public:
  GradientCodec(CompressionPolicy policy, uint64_t seed, ThreadPool* pool = nullptr);

  const CompressionPolicy& policy() const { return policy_; }
  void allocate(EncodedGradient& e) const;

  // This worker's scaler per ternary tensor (before sharing), in scaler_index order.
  std::vector<float> local_scalers(const std::vector<Tensor>& grads) const;

  // Encodes grads (one f32 host tensor per policy tensor) with the shared scalers. A non-finite scaler is
  // an error naming the tensor and the step.
  void encode(const std::vector<Tensor>& grads, const std::vector<float>& shared_scalers, uint32_t step,
              uint32_t worker, EncodedGradient& out) const;

  // Decoders: each writes the tensors of its coding in grads with the average over num_workers.
  // code_sums (4 * packed_bytes): sum over workers of the unpacked codes (element 4b+k <-> byte b, field k).
  void decode_ternary_sums(const int8_t* code_sums, const std::vector<float>& scalers, int num_workers,
                           const std::vector<Tensor>& grads) const;
  // gathered (num_workers, packed_bytes): every worker's packed buffer.
  void decode_ternary_gathered(const uint8_t* gathered, const std::vector<float>& scalers, int num_workers,
                               const std::vector<Tensor>& grads) const;
  void decode_f16_sum(const half_bits* sum, int num_workers, const std::vector<Tensor>& grads) const;
  void decode_f32_sum(const float* sum, int num_workers, const std::vector<Tensor>& grads) const;

  // Fused packed (packed_bytes) -> codes (4 * packed_bytes), the layout allreduce8 sums.
  void unpack_codes(const uint8_t* packed, int8_t* codes) const;

  // Throws unless non-finite scalers are absent: names the tensor and the step.
  void check_scalers(const std::vector<float>& scalers, uint32_t step) const;

 private:
  void check_grads(const std::vector<Tensor>& grads) const;
  // Checks the arguments of a ternary decode, then calls decode(plan, shared scaler, gradient data) for every
  // ternary tensor.
  void for_each_ternary(const std::vector<float>& scalers, int num_workers, const std::vector<Tensor>& grads,
                        const std::function<void(const TensorCodingPlan&, float, float*)>& decode) const;

  CompressionPolicy policy_;
  uint64_t seed_;
  ThreadPool* pool_;
};

}  // namespace tg

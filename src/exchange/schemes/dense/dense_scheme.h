// DenseScheme ("fp32", "fp16"): gradients summed uncompressed: --grad_bits 32 (every tensor fp32) and
// --grad_bits 16 (the compressed tensors as fp16, the rest fp32). Per bucket: encode (the local workers' sum into
// the fused buffers), all-reduce SUM over the world group, decode (divide by N into the target).
#pragma once

#include <memory>

#include "src/exchange/dense_part.h"
#include "terngrad/exchange/gradient_scheme.h"

namespace tg {

class DenseScheme final : public GradientScheme {
 public:
  DenseScheme(SchemeContext& ctx, const char* name) : GradientScheme(ctx), name_(name) {}
  const char* name() const override { return name_; }
  const std::vector<SchemeStage>& stages() const override;
  void plan(const std::vector<TensorRange>& buckets) override;
  void run_stage(int stage, int bucket) override;
  ExchangeStats byte_model() const override;

 private:
  const char* name_;
  std::vector<TensorRange> buckets_;
  std::unique_ptr<DensePart> dense_;
};

std::unique_ptr<GradientScheme> make_fp32_scheme(SchemeContext& ctx);
std::unique_ptr<GradientScheme> make_fp16_scheme(SchemeContext& ctx);
// Their buffers: the fused fp16 and fp32 sums (with a group to exchange with).
size_t dense_buffer_bytes(const SchemeMemoryQuery& q);

}  // namespace tg

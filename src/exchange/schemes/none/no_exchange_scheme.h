// NoExchangeScheme ("none", --exchange none; benchmarks only): no gradient leaves the replica. Each replica
// steps with the fp32 average of its own workers' gradients (nothing at all with one worker), whatever the
// policy: the compute-only step of a layout, under the same CPU contention as the real exchanges, that their
// link overhead (step - compute-only step) is measured against. Replicas drift apart: never a training run.
#pragma once

#include <memory>
#include <vector>

#include "terngrad/exchange/gradient_scheme.h"

namespace tg {

class NoExchangeScheme final : public GradientScheme {
 public:
  explicit NoExchangeScheme(SchemeContext& ctx) : GradientScheme(ctx) {}
  const char* name() const override { return "none"; }
  const std::vector<SchemeStage>& stages() const override;
  void plan(const std::vector<TensorRange>& buckets) override { buckets_ = buckets; }
  void run_stage(int stage, int bucket) override;
  ExchangeStats byte_model() const override;

 private:
  std::vector<TensorRange> buckets_;
};

std::unique_ptr<GradientScheme> make_no_exchange_scheme(SchemeContext& ctx);
size_t no_exchange_buffer_bytes(const SchemeMemoryQuery& q);  // none

}  // namespace tg

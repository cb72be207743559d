// NoExchangeScheme: the local workers' average, no collective.
#include "src/exchange/schemes/none/no_exchange_scheme.h"

#include "src/exchange/dense_part.h"

namespace tg {

const std::vector<SchemeStage>& NoExchangeScheme::stages() const {
  static const std::vector<SchemeStage> s = {{"local average", StageKind::kCompute, Phase::kDecode}};
  return s;
}

void NoExchangeScheme::run_stage(int, int bucket) {
  const TensorRange r = buckets_[bucket];
  if (ctx_.local_workers > 1) {
    Tensor xs[Backend::kMaxCodecInputs];
    const int count = ctx_.local_workers;
    const std::vector<Tensor>& out = ctx_.grads[ctx_.targets[0]];
    for (int i = r.begin; i < r.end; ++i) {
      for (int w = 0; w < count; ++w) xs[w] = ctx_.grads[w][i];
      ctx_.backend->average_f32(xs, count, out[i]);
    }
  }
  ctx_.copy_to_other_targets(r);
}

ExchangeStats NoExchangeScheme::byte_model() const {
  ExchangeStats s;
  DensePart::set_fp32_equivalent(ctx_, s);
  return s;
}

std::unique_ptr<GradientScheme> make_no_exchange_scheme(SchemeContext& ctx) {
  return std::make_unique<NoExchangeScheme>(ctx);
}

size_t no_exchange_buffer_bytes(const SchemeMemoryQuery&) { return 0; }

}  // namespace tg

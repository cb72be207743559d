// DenseScheme: fp32/fp16 sums, all-reduced.
#include "src/exchange/schemes/dense/dense_scheme.h"

namespace tg {

namespace {
enum Stage { kEncode, kAllreduce, kDecode };
}

const std::vector<SchemeStage>& DenseScheme::stages() const {
  static const std::vector<SchemeStage> s = {{"encode", StageKind::kCompute, Phase::kEncode},
                                             {"all-reduce", StageKind::kCollective, Phase::kCommInFlight},
                                             {"decode", StageKind::kCompute, Phase::kDecode}};
  return s;
}

void DenseScheme::plan(const std::vector<TensorRange>& buckets) {
  buckets_ = buckets;
  dense_ = std::make_unique<DensePart>(ctx_, buckets);
}

void DenseScheme::run_stage(int stage, int bucket) {
  switch (stage) {
    case kEncode:
      dense_->encode(bucket);
      break;
    case kAllreduce:
      dense_->exchange(ctx_.comms.world, bucket);
      break;
    case kDecode:
      dense_->decode(bucket);
      ctx_.copy_to_other_targets(buckets_[bucket]);
      break;
  }
}

ExchangeStats DenseScheme::byte_model() const {
  ExchangeStats s;
  dense_->add_byte_model(s);
  DensePart::set_fp32_equivalent(ctx_, s);
  return s;
}

std::unique_ptr<GradientScheme> make_fp32_scheme(SchemeContext& ctx) {
  return std::make_unique<DenseScheme>(ctx, "fp32");
}
std::unique_ptr<GradientScheme> make_fp16_scheme(SchemeContext& ctx) {
  return std::make_unique<DenseScheme>(ctx, "fp16");
}

size_t dense_buffer_bytes(const SchemeMemoryQuery& q) { return q.dense_bytes(); }

}  // namespace tg

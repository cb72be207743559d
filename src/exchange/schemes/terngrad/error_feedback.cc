// ErrorFeedback: residuals added before the scalers and updated after the encode.
#include "src/exchange/schemes/terngrad/error_feedback.h"

#include <fmt/format.h>

namespace tg {

ErrorFeedback::ErrorFeedback(SchemeContext& ctx) : ctx_(ctx) {
  const CompressionPolicy& p = ctx_.codec->policy();
  for (int l = 0; l < ctx_.local_workers; ++l)
    for (const TensorCodingPlan& t : p.tensors())
      if (t.coding == GradCoding::kTernary)
        residuals_.add(fmt::format("error_feedback/w{}/{}", l, t.name), Shape{t.numel});
  residuals_.allocate(ctx_.backend->allocator());
  if (residuals_.bytes() > 0) ctx_.backend->zero(residuals_.flat_bytes());
  int k = 0;
  views_.assign(static_cast<size_t>(ctx_.local_workers), std::vector<Tensor>(static_cast<size_t>(p.num_tensors())));
  for (int l = 0; l < ctx_.local_workers; ++l)
    for (int i = 0; i < p.num_tensors(); ++i)
      if (p.tensors()[i].coding == GradCoding::kTernary) views_[l][i] = residuals_.view(k++);
}

void ErrorFeedback::add_residuals(TensorRange r) {
  const CompressionPolicy& p = ctx_.codec->policy();
  for (int l = 0; l < ctx_.local_workers; ++l)
    for (int i = r.begin; i < r.end; ++i)
      if (p.tensors()[i].coding == GradCoding::kTernary) ctx_.backend->axpy(1.f, views_[l][i], ctx_.grads[l][i]);
}

void ErrorFeedback::update_residuals(TensorRange r, const Tensor& codes, int64_t stride, const Tensor& scalers) {
  const CompressionPolicy& p = ctx_.codec->policy();
  Backend& be = *ctx_.backend;
  for (int l = 0; l < ctx_.local_workers; ++l) {
    // r = s * code (the one worker's decode), then r = g - r.
    ctx_.codec->decode_ternary_gathered(be, codes.slice0(l * stride, codes.numel()), stride, 1, r, scalers, views_[l]);
    for (int i = r.begin; i < r.end; ++i) {
      if (p.tensors()[i].coding != GradCoding::kTernary) continue;
      be.scale(-1.f, views_[l][i]);
      be.axpy(1.f, ctx_.grads[l][i], views_[l][i]);
    }
  }
}

}  // namespace tg

// ErrorFeedback: the residual slab of every local worker's ternary tensors, and its views.
#include "src/exchange/schemes/terngrad/error_feedback.h"

#include <fmt/format.h>

namespace tg {

ErrorFeedback::ErrorFeedback(SchemeContext& ctx) {
  const CompressionPolicy& p = *ctx.policy;
  for (int l = 0; l < ctx.local_workers; ++l)
    for (const TensorCodingPlan& t : p.tensors())
      if (t.coding == GradCoding::kTernary)
        residuals_.add(fmt::format("error_feedback/w{}/{}", l, t.name), Shape{t.numel});
  residuals_.allocate(ctx.backend->allocator());
  if (residuals_.bytes() > 0) ctx.backend->zero(residuals_.flat_bytes());
  int k = 0;
  views_.assign(static_cast<size_t>(ctx.local_workers), std::vector<Tensor>(static_cast<size_t>(p.num_tensors())));
  for (int l = 0; l < ctx.local_workers; ++l)
    for (int i = 0; i < p.num_tensors(); ++i)
      if (p.tensors()[i].coding == GradCoding::kTernary) views_[l][i] = residuals_.view(k++);
}

}  // namespace tg

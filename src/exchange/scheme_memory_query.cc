// The sizes several schemes' buffers are made of (gradient_scheme.h, SchemeMemoryQuery), from the policy.
#include "terngrad/exchange/gradient_scheme.h"

namespace tg {

int64_t SchemeMemoryQuery::ternary_elements() const {
  int64_t n = 0;
  for (const TensorCodingPlan& t : policy->tensors())
    if (t.coding == GradCoding::kTernary) n += t.numel;
  return n;
}

size_t SchemeMemoryQuery::packed_bytes() const { return static_cast<size_t>(policy->packed_bytes()); }

size_t SchemeMemoryQuery::dense_bytes() const {
  return group ? 2 * static_cast<size_t>(policy->f16_elements()) + 4 * static_cast<size_t>(policy->f32_elements()) : 0;
}

size_t SchemeMemoryQuery::scaler_bytes() const {
  return 4 * (static_cast<size_t>(local_workers) + 1) * static_cast<size_t>(policy->num_scalers()) + 4 +
         4 * static_cast<size_t>(policy->num_ternary());
}

}  // namespace tg

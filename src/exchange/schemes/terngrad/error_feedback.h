// ErrorFeedback (--error_feedback): each local worker carries its rounding error to its next step, per element
// (1-bit SGD's error feedback, Seide et al. 2014; EF-SGD, Karimireddy et al. 2019), on the replica's device:
//   before the scalers:   g <- g + r                  (the corrected gradient is what gets ternarized)
//   after the encode:     r <- g - s * code           (what the codes did not carry)
// r starts at 0. Only the ternary tensors have residuals (fp16/fp32 ones travel exactly enough). The residuals
// are per-rank state: checkpointed per rank and restored bit for bit (GradientScheme::rank_state()). Every
// operation is element-wise, so the bits do not depend on bucketing, overlap or the thread count.
#pragma once

#include <vector>

#include "terngrad/core/slab.h"
#include "terngrad/exchange/gradient_scheme.h"

namespace tg {

class ErrorFeedback {
 public:
  // Residual tensors "error_feedback/w<l>/<tensor>" of every local worker and ternary tensor, zeroed.
  explicit ErrorFeedback(SchemeContext& ctx);
  // g += r for the ternary tensors of r, every local worker.
  void add_residuals(TensorRange r);
  // r = g - s * code for the ternary tensors of r: `codes` holds the local workers' packed codes of the
  // bucket, worker l's at l * stride; `scalers` the shared scalers (f32 (num_ternary)).
  void update_residuals(TensorRange r, const Tensor& codes, int64_t stride, const Tensor& scalers);
  Slab& state() { return residuals_; }

 private:
  SchemeContext& ctx_;
  Slab residuals_;
  std::vector<std::vector<Tensor>> views_;  // (L) per policy tensor: the residual (ternary) or undefined
};

}  // namespace tg

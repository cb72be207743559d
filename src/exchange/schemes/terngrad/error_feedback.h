// ErrorFeedback (--error_feedback): each local worker carries its rounding error to its next step, per element
// (1-bit SGD's error feedback, Seide et al. 2014; EF-SGD, Karimireddy et al. 2019), on the replica's device:
//   in the scalers' pass:  g <- g + r                  (the corrected gradient is what gets ternarized)
//   in the encode's pass:  r <- g - s * code           (what the codes did not carry; ternary_residual_value)
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
  // Local worker l's residuals, per policy tensor (undefined for the tensors that are not ternary): the
  // codec's scalers pass adds them to g, its encode pass rewrites them (TernaryCoding::local_scalers,
  // encode_ternary), so error feedback costs no pass of its own.
  const std::vector<Tensor>* residuals(int l) const { return &views_[static_cast<size_t>(l)]; }
  Slab& state() { return residuals_; }

 private:
  Slab residuals_;
  std::vector<std::vector<Tensor>> views_;  // (L) per policy tensor: the residual (ternary) or undefined
};

}  // namespace tg

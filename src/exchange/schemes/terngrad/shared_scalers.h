// SharedScalers: the scalers of the ternary schemes (terngrad, hierarchical), computed, shared and checked in one
// place: each local worker's scalers of a bucket's ternary tensors (per tensor, or per --scaler_bucket), in the
// pass that also adds its error-feedback residual and the weight decay; their max over the local workers (a
// non-finite scaler counting as +Inf, so the MAX carries it to every worker and all stop with the same error,
// none left waiting in a collective); the all-reduce MAX over a group; and the checks of the shared values: a
// device flag raised by any non-finite one (read before a checkpoint), and on the CPU a host check that stops the
// step with an error naming the tensor and step. It also reports them (the schemes' summaries).
#pragma once

#include <cstdint>
#include <vector>

#include "src/exchange/exchange_arena.h"
#include "src/exchange/schemes/terngrad/ternary_coding.h"
#include "terngrad/exchange/gradient_scheme.h"

namespace tg {

class SharedScalers {
 public:
  // Reserves its buffers in `arena` (before arena.allocate(); bind() after); `coding` outlives it.
  SharedScalers(const SchemeContext& ctx, const TernaryCoding& coding, ExchangeArena& arena);
  void bind(const ExchangeArena& arena);
  // The weight decay (SchemeContext::weight_decay) of the tensors of r that compute()'s pass does not add (the ones
  // not coded ternary; all of them when `pass_runs` is false), added to every local worker's gradient by axpy.
  void add_other_weight_decay(TensorRange r, bool pass_runs) const;
  // The local workers' scalers of tensors r and their max into shared(), the ternary tensors' weight decay added in
  // the same pass. residuals: per local worker its residuals
  // per policy tensor (error feedback), or nullptr for none.
  void compute(TensorRange r, const std::vector<const std::vector<Tensor>*>* residuals = nullptr);
  // All-reduce MAX of the range's shared scalers over `group` (nothing without one).
  void share(Communicator* group, const RangeLayout& l) const;
  // The device flag raised by any non-finite shared scaler of the range; on the CPU (ExchangeOptions::
  // host_scaler_check) also copied to the host and checked: an error naming tensor and step.
  void check(TensorRange r, const RangeLayout& l, uint32_t step);

  // The last step's summaries, on the host: per ternary tensor "scaler" (its shared scaler; with --scaler_bucket
  // the largest of its buckets', NaN when any is not finite) and "zero_fraction" (of the codes zero_codes counted:
  // i32 (num_ternary) on the device, each of counted[t] codes, or of the whole tensor when counted is empty; left
  // out for a tensor of which none were counted, and for all when zero_codes is undefined).
  std::vector<TensorSummary> summaries(const Tensor& zero_codes, const std::vector<int64_t>& counted = {}) const;

  const Tensor& shared() const { return shared_; }  // f32 (num_scalers)
  const Tensor& flag() const { return flag_; }      // i32 (1)

 private:
  const SchemeContext& ctx_;
  const TernaryCoding& coding_;
  size_t at_local_ = 0, at_shared_ = 0, at_flag_ = 0;
  Tensor local_;              // f32 (L * num_scalers): worker l's at l * num_scalers
  std::vector<Tensor> rows_;  // (L) views of local_
  Tensor shared_, flag_;
  std::vector<float> host_;  // (num_scalers) the host check's copy
};

}  // namespace tg

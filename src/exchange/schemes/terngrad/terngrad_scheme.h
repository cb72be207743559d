// TernGradScheme ("terngrad"): every worker's gradient ternarized on its own (docs/design.md, "One step"): per bucket
//   scalers         each local worker's per-tensor (or per --scaler_bucket) scalers, the max over the local workers
//   share scalers   all-reduce MAX over the world group: every worker uses the same s per tensor (bucket)
//   encode          each local worker's 2-bit codes (Philox keyed by its global index; allreduce8: the local
//                   workers' codes summed as int8), the fp16/fp32 tensors summed (DensePart)
//   exchange codes  allgather2: every worker's packed codes gathered; allreduce8: int8 sums all-reduced; the
//                   fp16/fp32 sums all-reduced
//   decode          s * sum of codes / N into the first target, the fp16/fp32 averages, copies to other targets;
//                   with defer_decode the ternary tensors are left coded for the optimizer (coded_averages()),
//                   unless the scheduler finds idle time for them while it waits (decode_deferred)
// Alone (no group) the gathered codes are the local workers' own. With --error_feedback each worker's rounding
// error is added back before the next step's scalers (error_feedback.h).
//
// Non-finite scalers: the local max counts a non-finite scaler as +Inf, so the MAX carries it to every worker.
// On the CPU the shared scalers are checked on the host every step (the step stops with an error naming the
// tensor and step on every worker); on every device a non-finite shared scaler also sets the scheme's device
// flag (nonfinite_flag()), which the trainer reads before writing a checkpoint.
// Summaries: per ternary tensor its shared scaler and the zero fraction of local worker 0's codes.
#pragma once

#include <memory>
#include <vector>

#include "src/exchange/dense_part.h"
#include "src/exchange/exchange_arena.h"
#include "src/exchange/schemes/terngrad/deferred_averages.h"
#include "src/exchange/schemes/terngrad/error_feedback.h"
#include "src/exchange/schemes/terngrad/shared_scalers.h"
#include "src/exchange/schemes/terngrad/ternary_coding.h"
#include "terngrad/exchange/gradient_scheme.h"

namespace tg {

class TernGradScheme final : public GradientScheme, public CodedUpdate {
 public:
  explicit TernGradScheme(SchemeContext& ctx);
  const char* name() const override { return "terngrad"; }
  const std::vector<SchemeStage>& stages() const override;
  void plan(const std::vector<TensorRange>& buckets) override;
  void run_stage(int stage, int bucket) override;
  ExchangeStats byte_model() const override;
  bool applies_weight_decay() const override { return true; }  // in the scalers' pass
  CodedUpdate* coded_update() override { return this; }
  void defer_decode() override;
  const std::vector<CodedAverage>& coded_averages() const override { return deferred_.current(); }
  bool decode_deferred(int bucket) override;
  void begin_step(uint32_t step) override;
  Slab* rank_state() override { return feedback_ ? &feedback_->state() : nullptr; }
  // A residual is gradient its rank computed and has not sent yet (at most one step's quantization error of its
  // workers); the average is the same whichever rank sends it. Survivors keep theirs: only the lost ranks' residuals
  // are never applied (once); a new rank starts at zero, which costs nothing.
  ResizePolicy rank_state_on_resize() const override {
    return {ResizePolicy::kKeepSurvivors,
            "the lost ranks' residuals (gradient not yet sent, at most one step's quantization error each) are "
            "never applied; the survivors' are kept; new ranks start at zero",
            ""};
  }
  // Per ternary tensor its shared scaler and the zero fraction of local worker 0's codes.
  std::vector<TensorSummary> summaries() const override { return scalers_->summaries(zero_codes_); }
  Tensor nonfinite_flag() const override { return scalers_->flag(); }
  std::string describe() const override;

 private:
  struct Bucket {
    TensorRange range;
    RangeLayout layout;
    Tensor local_codes;  // u8 (L * packed_bytes): local worker l's codes at l * packed_bytes
    Tensor gathered;     // u8 (N * packed_bytes): allgather2 with a group
    Tensor code_sums;    // i8 (4 * packed_bytes): allreduce8
  };
  void decode_ternary(Bucket& b);
  void scalers(Bucket& b);
  void encode(Bucket& b, int index);
  void exchange(Bucket& b, int index);
  void decode(Bucket& b, int index);

  ExchangeMode mode_;  // kAllgather2 or kAllreduce8
  TernaryCoding coding_;
  ExchangeArena arena_;
  std::vector<Bucket> buckets_;
  std::unique_ptr<DensePart> dense_;
  std::unique_ptr<ErrorFeedback> feedback_;
  std::unique_ptr<SharedScalers> scalers_;
  std::vector<const std::vector<Tensor>*> residuals_;  // --error_feedback: per local worker, its residuals
  Tensor zero_codes_;                                  // i32 (num_ternary): local worker 0's zero codes
  DeferredAverages deferred_;                          // defer_decode: the ternary tensors' coded averages
};

std::unique_ptr<GradientScheme> make_terngrad_scheme(SchemeContext& ctx);
// Its buffers: scalers, dense sums, every local worker's codes, the gathered codes (allgather2) or int8 sums
// (allreduce8), the residuals (--error_feedback).
size_t terngrad_buffer_bytes(const SchemeMemoryQuery& q);

}  // namespace tg

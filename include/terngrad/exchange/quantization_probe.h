// QuantizationProbe (--quantization_error_every N): where a ternary run loses accuracy, measured. On a probe step
// a replica's gradients are exchanged both ways: first in fp32 (the average fp32 training would apply), then by
// the run's own ternary exchange exactly as on any other step. Per ternary tensor it reports
//   relative_error     ||decoded average - fp32 average|| / ||fp32 average|| (2-norms; the weight decay the
//                      exchange adds is in both)
//   nonzero_fraction   the fraction of the codes this rank drew that are not 0 (the scheme's "zero_fraction"
//                      summary: terngrad's local worker 0, hierarchical's node average on this rank's part)
//   scaler             the shared scaler (the scheme's "scaler" summary: with --scaler_bucket the largest of the
//                      tensor's buckets')
// The ternary exchange sees the very gradients it sees without the probe (they are kept and put back around the
// fp32 exchange), so the run's bits do not change; the cost (one fp32 exchange, two copies of the gradients,
// the norms: host synchronisations on a GPU) falls on probe steps only. With error feedback the decoded average
// carries the residuals of earlier steps, as the update does: the error is that of what is applied.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "terngrad/backend/backend.h"
#include "terngrad/compress/compression_policy.h"
#include "terngrad/core/buffer.h"
#include "terngrad/core/weight_decay.h"
#include "terngrad/exchange/gradient_exchange.h"

namespace tg {

struct TensorQuantization {
  std::string name;
  int64_t numel = 0;
  double relative_error = 0;    // ||decoded - fp32|| / ||fp32|| (0/0 counts as 0; x/0 as +inf)
  double nonzero_fraction = 0;  // of the codes this rank drew (NaN: it drew none of this tensor)
  float scaler = 0;             // the largest of the tensor's shared scalers
  int num_scalers = 0;          // 1, or its buckets with --scaler_bucket
};

struct QuantizationReport {
  int64_t step = 0;                         // 1-based, as the log lines count
  std::vector<TensorQuantization> tensors;  // the ternary tensors, policy order
  double relative_error = 0;                // over all ternary tensors as one vector
  double nonzero_fraction = 0;              // over all their elements
  double seconds = 0;                       // what the probe added to the step (fp32 exchange, copies, norms)
};

class QuantizationProbe {
 public:
  // grads: the gradients the ternary exchange averages into (its target worker's, one f32 tensor per policy
  // tensor, views of one slab `slab`) on `backend`. decay: the weight decay the ternary exchange adds itself
  // (GradientExchange::apply_weight_decay), added to the fp32 average too; null when backward already added it.
  QuantizationProbe(Backend& backend, const CompressionPolicy& policy, std::vector<Tensor> grads, const Tensor& slab,
                    const WeightDecayTerms* decay);
  QuantizationProbe(const QuantizationProbe&) = delete;
  QuantizationProbe& operator=(const QuantizationProbe&) = delete;

  // After every local worker's backward, before the ternary exchange of the step begins: runs `fp32` (an fp32
  // exchange of the same workers' gradients) and keeps its average; the gradients are as they were after.
  void reference(GradientExchange& fp32, uint32_t step);
  // After the ternary exchange's finish(): decodes what it left coded (the same bits the optimizer would decode)
  // and measures against the fp32 average. `step` is the 1-based step of the report.
  const QuantizationReport& measure(GradientExchange& ternary, int64_t step);
  const QuantizationReport& last() const { return report_; }

 private:
  Backend& be_;
  const CompressionPolicy& policy_;
  std::vector<Tensor> grads_;       // (T) the target's gradients
  Tensor slab_;                     // u8: the slab they are views of
  const WeightDecayTerms* decay_;   // or null
  Buffer saved_, fp32_;             // the slab's bytes: the gradients before the fp32 exchange; its average
  std::vector<Tensor> fp32_views_;  // (T) views of fp32_ at the gradients' offsets
  double reference_seconds_ = 0;
  QuantizationReport report_;
};

}  // namespace tg

// QuantizationProbe: the fp32 average beside the ternary one on a probe step, and their difference per tensor.
#include "terngrad/exchange/quantization_probe.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include "terngrad/core/error.h"

namespace tg {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
}  // namespace

QuantizationProbe::QuantizationProbe(Backend& backend, const CompressionPolicy& policy, std::vector<Tensor> grads,
                                     const Tensor& slab, const WeightDecayTerms* decay)
    : be_(backend), policy_(policy), grads_(std::move(grads)), slab_(slab), decay_(decay) {
  TG_CHECK(static_cast<int>(grads_.size()) == policy_.num_tensors(),
           "quantization probe: {} gradients for a policy of {} tensors", grads_.size(), policy_.num_tensors());
  TG_CHECK(!decay_ || static_cast<int>(decay_->coefficients.size()) == policy_.num_tensors(),
           "quantization probe: weight decay for {} tensors, the policy has {}", decay_->coefficients.size(),
           policy_.num_tensors());
  saved_ = Buffer(be_.allocator(), slab_.bytes());
  fp32_ = Buffer(be_.allocator(), slab_.bytes());
  const auto* base = static_cast<const char*>(slab_.raw());
  for (const Tensor& g : grads_) {
    const auto* at = static_cast<const char*>(g.raw());
    TG_CHECK(
        g.dtype() == DType::kF32 && g.device() == be_.device() && at >= base && at + g.bytes() <= base + slab_.bytes(),
        "quantization probe: gradient {} is not an f32 view of the gradient slab {}", g.str(), slab_.str());
    fp32_views_.emplace_back(static_cast<char*>(fp32_.data()) + (at - base), g.shape(), DType::kF32, be_.device());
  }
  report_.tensors.reserve(static_cast<size_t>(policy_.num_ternary()));
}

void QuantizationProbe::reference(GradientExchange& fp32, uint32_t step) {
  const Clock::time_point t0 = Clock::now();
  const Tensor saved(saved_.data(), slab_.shape(), slab_.dtype(), be_.device());
  const Tensor average(fp32_.data(), slab_.shape(), slab_.dtype(), be_.device());
  be_.copy(saved, slab_);
  fp32.run(step);  // the fp32 average over every worker lands in the target's gradients
  be_.copy(average, slab_);
  be_.copy(slab_, saved);  // the ternary exchange starts from the gradients as backward left them
  if (decay_)
    for (size_t i = 0; i < grads_.size(); ++i)
      if (decay_->coefficients[i] != 0.f && policy_.tensors()[i].coding == GradCoding::kTernary)
        be_.axpy(decay_->coefficients[i], decay_->params[i], fp32_views_[i]);
  reference_seconds_ = since(t0);
}

const QuantizationReport& QuantizationProbe::measure(GradientExchange& ternary, int64_t step) {
  const Clock::time_point t0 = Clock::now();
  ternary.decode_deferred_now();
  // The scheme's per-tensor scaler and zero fraction (a tensor of which this rank drew no codes has none: NaN).
  const size_t T = grads_.size();
  std::vector<float> scaler(T, 0.f);
  std::vector<double> zeros(T, std::numeric_limits<double>::quiet_NaN());
  for (const TensorSummary& s : ternary.summaries()) {
    if (std::strcmp(s.quantity, "scaler") == 0) scaler[static_cast<size_t>(s.tensor)] = static_cast<float>(s.value);
    if (std::strcmp(s.quantity, "zero_fraction") == 0) zeros[static_cast<size_t>(s.tensor)] = s.value;
  }
  report_.step = step;
  report_.tensors.clear();
  double err2 = 0, ref2 = 0, nonzero = 0, elements = 0;
  for (size_t i = 0; i < grads_.size(); ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding != GradCoding::kTernary) continue;
    TensorQuantization q;
    q.name = t.name;
    q.numel = t.numel;
    q.num_scalers = t.num_scalers;
    // ||fp32|| first, then the fp32 average becomes the difference in place (the probe's own buffer).
    const double r2 = be_.sum_squares(fp32_views_[i]);
    be_.axpy(-1.f, grads_[i], fp32_views_[i]);
    const double e2 = be_.sum_squares(fp32_views_[i]);
    q.relative_error = r2 > 0 ? std::sqrt(e2 / r2) : (e2 > 0 ? std::numeric_limits<double>::infinity() : 0.0);
    q.scaler = scaler[i];
    // The share of non-zero codes among those this rank drew (a tensor of which it drew none: NaN, left out).
    const double z = zeros[i];
    q.nonzero_fraction = 1.0 - z;
    err2 += e2;
    ref2 += r2;
    if (!std::isnan(z)) {
      nonzero += q.nonzero_fraction * static_cast<double>(t.numel);
      elements += static_cast<double>(t.numel);
    }
    report_.tensors.push_back(std::move(q));
  }
  report_.relative_error =
      ref2 > 0 ? std::sqrt(err2 / ref2) : (err2 > 0 ? std::numeric_limits<double>::infinity() : 0.0);
  report_.nonzero_fraction = elements > 0 ? nonzero / elements : 0.0;
  report_.seconds = reference_seconds_ + since(t0);
  return report_;
}

}  // namespace tg

// SharedScalers: the ternary schemes' scalers, their MAX, its checks and its summaries.
#include "src/exchange/schemes/terngrad/shared_scalers.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tg {

SharedScalers::SharedScalers(const SchemeContext& ctx, const TernaryCoding& coding, ExchangeArena& arena)
    : ctx_(ctx), coding_(coding) {
  const size_t S = static_cast<size_t>(ctx.policy->num_scalers());
  at_local_ = arena.reserve(4 * static_cast<size_t>(ctx.local_workers) * S);
  at_shared_ = arena.reserve(4 * S);
  at_flag_ = arena.reserve(4);
  host_.assign(S, 0.f);
}

void SharedScalers::bind(const ExchangeArena& arena) {
  const int L = ctx_.local_workers;
  const int64_t S = ctx_.policy->num_scalers();
  local_ = arena.view(at_local_, L * S, DType::kF32);
  rows_.clear();
  for (int w = 0; w < L; ++w) rows_.push_back(local_.slice0(w * S, (w + 1) * S));
  shared_ = arena.view(at_shared_, S, DType::kF32);
  flag_ = arena.view(at_flag_, 1, DType::kI32);
}

void SharedScalers::add_other_weight_decay(TensorRange r, bool pass_runs) const {
  if (!ctx_.weight_decay) return;
  const CompressionPolicy& p = *ctx_.policy;
  for (int i = r.begin; i < r.end; ++i) {
    const float d = ctx_.weight_decay->coefficients[i];
    if (d == 0.f || (pass_runs && p.tensors()[i].coding == GradCoding::kTernary)) continue;
    for (const std::vector<Tensor>& g : ctx_.grads) ctx_.backend->axpy(d, ctx_.weight_decay->params[i], g[i]);
  }
}

void SharedScalers::compute(TensorRange r, const std::vector<const std::vector<Tensor>*>* residuals) {
  for (int w = 0; w < ctx_.local_workers; ++w)
    coding_.local_scalers(*ctx_.backend, ctx_.grads[w], r, rows_[w], residuals ? (*residuals)[w] : nullptr,
                          ctx_.weight_decay);
  coding_.max_local_scalers(*ctx_.backend, rows_, r, shared_);
}

void SharedScalers::share(Communicator* group, const RangeLayout& l) const {
  if (group && l.num_scalers() > 0)
    group->allreduce(shared_.slice0(l.scaler_begin, l.scaler_end).raw(), l.num_scalers(), DType::kF32, ReduceOp::kMax,
                     ctx_.backend->device());
}

void SharedScalers::check(TensorRange r, const RangeLayout& l, uint32_t step) {
  if (l.num_scalers() == 0) return;
  Backend& be = *ctx_.backend;
  const Tensor shared = shared_.slice0(l.scaler_begin, l.scaler_end);
  be.unscale_and_check(shared, 1.f, shared, flag_);  // the device flag: any non-finite shared scaler
  if (be.device().is_cpu() && ctx_.options.host_scaler_check) {
    be.copy(Tensor(host_.data() + l.scaler_begin, Shape{l.num_scalers()}, DType::kF32, Device::cpu()), shared);
    coding_.check_scalers(host_.data(), r, step);
  }
}

std::vector<TensorSummary> SharedScalers::summaries(const Tensor& zero_codes,
                                                    const std::vector<int64_t>& counted) const {
  Backend& be = *ctx_.backend;
  const CompressionPolicy& p = *ctx_.policy;
  std::vector<float> scalers(static_cast<size_t>(p.num_scalers()));
  if (!scalers.empty()) be.copy(Tensor(scalers.data(), Shape{shared_.numel()}, DType::kF32, Device::cpu()), shared_);
  std::vector<int32_t> zeros(zero_codes.defined() ? static_cast<size_t>(zero_codes.numel()) : 0);
  if (!zeros.empty()) be.copy(Tensor(zeros.data(), Shape{zero_codes.numel()}, DType::kI32, Device::cpu()), zero_codes);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<TensorSummary> out;
  for (int i = 0; i < p.num_tensors(); ++i) {
    const TensorCodingPlan& t = p.tensors()[i];
    if (t.ternary_index < 0) continue;
    double s = 0;
    for (int k = 0; k < t.num_scalers; ++k) {
      const float v = scalers[static_cast<size_t>(t.scaler_index + k)];
      s = std::isfinite(v) && std::isfinite(s) ? std::max(s, static_cast<double>(v)) : nan;
    }
    out.push_back({"scaler", i, s});
    if (zeros.empty()) continue;
    const size_t ti = static_cast<size_t>(t.ternary_index);
    const int64_t of = counted.empty() ? t.numel : counted[ti];
    if (of > 0) out.push_back({"zero_fraction", i, static_cast<double>(zeros[ti]) / static_cast<double>(of)});
  }
  return out;
}

}  // namespace tg

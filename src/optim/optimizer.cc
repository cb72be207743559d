// Optimizer: slot allocation with TF names, hyper-parameter checks, and the per-step update (fused over the
// whole slab when the parameter and gradient slabs share the layout the optimizer was built for).
#include "terngrad/optim/optimizer.h"

#include <cmath>
#include <vector>

#include "terngrad/core/error.h"

namespace tg {

namespace {

constexpr size_t kSlabAlign = 64;  // Slab's entry alignment (slab.cc)

size_t align_up(size_t n) { return (n + kSlabAlign - 1) / kSlabAlign * kSlabAlign; }

void check_finite(float v, const char* option) { TG_CHECK(std::isfinite(v), "{} must be finite, got {}", option, v); }

void check_options(const OptimizerOptions& o) {
  switch (o.kind()) {
    case OptimizerKind::kGd:
      break;
    case OptimizerKind::kMomentum:
    case OptimizerKind::kRmsprop:
      check_finite(o.momentum, "--momentum");
      TG_CHECK(o.momentum >= 0.f, "--momentum must be >= 0, got {}", o.momentum);
      break;
    case OptimizerKind::kAdam:
      TG_CHECK(o.adam_beta1 >= 0.f && o.adam_beta1 < 1.f, "adam beta1 must be in [0, 1), got {}", o.adam_beta1);
      TG_CHECK(o.adam_beta2 >= 0.f && o.adam_beta2 < 1.f, "adam beta2 must be in [0, 1), got {}", o.adam_beta2);
      check_finite(o.adam_epsilon, "adam epsilon");
      TG_CHECK(o.adam_epsilon > 0.f, "adam epsilon must be > 0, got {}", o.adam_epsilon);
      break;
  }
  if (o.kind() == OptimizerKind::kRmsprop) {
    TG_CHECK(o.rmsprop_decay >= 0.f && o.rmsprop_decay <= 1.f, "rmsprop decay must be in [0, 1], got {}",
             o.rmsprop_decay);
    check_finite(o.rmsprop_epsilon, "rmsprop epsilon");
    TG_CHECK(o.rmsprop_epsilon > 0.f, "rmsprop epsilon must be > 0, got {}", o.rmsprop_epsilon);
  }
}

}  // namespace

std::vector<std::string> Optimizer::slot_suffixes_of(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kGd:
      return {};
    case OptimizerKind::kMomentum:
      return {"Momentum"};
    case OptimizerKind::kAdam:
      return {"Adam", "Adam_1"};
    case OptimizerKind::kRmsprop:
      return {"RMSProp", "RMSProp_1"};
  }
  TG_THROW("unknown optimizer kind {}", static_cast<int>(kind));
}

const std::vector<Flag<OptimizerFlags>>& optimizer_flags() {
  using C = OptimizerFlags;
  static const std::vector<Flag<C>> table = {
      {"optimizer", &C::optimizer,
       "momentum 0.9, non-Nesterov; adam .9/.999/1e-8, constant LR; rmsprop decay .9, ε 1, ms starts at 1",
       one_of<OptimizerKind>(), kFlagRun},
      {"momentum", &C::momentum, "momentum and RMSProp momentum", in_range(0, 1, "[)"), kFlagRun},
  };
  return table;
}

Optimizer::Optimizer(const OptimizerOptions& options, const Slab& params, Backend& backend)
    : options_(options), kind_(options.kind()), slot_suffixes_(slot_suffixes_of(kind_)) {
  check_options(options_);
  size_t end = 0;
  for (const Slab::Entry& e : params.entries()) {
    TG_CHECK(e.dtype == DType::kF32, "optimizer: parameter '{}' is {}, only f32 parameters are trained", e.name,
             dtype_name(e.dtype));
    params_.push_back({e.name, e.shape});
    param_offsets_.push_back(e.offset);
    end = e.offset + static_cast<size_t>(e.shape.numel()) * sizeof(float);
  }
  param_slab_bytes_ = align_up(end);
  // Slot by slot: group g holds every parameter's g-th slot, laid out exactly like the parameter slab.
  for (const std::string& suffix : slot_suffixes_)
    for (const ParamEntry& p : params_) slots_.add(slot_name(p.name, suffix), p.shape, DType::kF32);
  for (int i = 0; i < slots_.size(); ++i)
    TG_CHECK(slots_.entry(i).offset == (i / params_.size()) * param_slab_bytes_ + param_offsets_[i % params_.size()],
             "optimizer: slot '{}' is not where the slot-group layout expects it", slots_.entry(i).name);
  slots_.allocate(backend.allocator());
  reset(backend);
}

void Optimizer::reset(Backend& backend) {
  const int n = static_cast<int>(params_.size());
  for (int g = 0; g < slots_per_param(); ++g) {
    // TF 1.x RMSProp starts its mean-square slot at 1 (so the first steps are not huge); all else at 0.
    const bool ones = kind_ == OptimizerKind::kRmsprop && g == 0;
    if (n == 0) continue;
    Tensor group = slot_group(g);
    if (ones)
      backend.fill(group, 1.f);
    else
      backend.zero(group);
  }
}

Tensor Optimizer::slot_group(int group) const {
  const size_t count = param_slab_bytes_ / sizeof(float);
  char* base = static_cast<char*>(slots_.data()) + static_cast<size_t>(group) * param_slab_bytes_;
  return Tensor(base, Shape{static_cast<int64_t>(count)}, DType::kF32, slots_.device());
}

double Optimizer::adam_corrected_lr(double lr, double beta1, double beta2, int64_t step) {
  TG_CHECK(step >= 0, "optimizer step must be >= 0, got {}", step);
  const double t = static_cast<double>(step) + 1.0;
  return lr * std::sqrt(1.0 - std::pow(beta2, t)) / (1.0 - std::pow(beta1, t));
}

OptimizerStep Optimizer::step_descriptor(int64_t step, float lr) const {
  TG_CHECK(std::isfinite(lr) && lr >= 0.f, "learning rate at step {} must be finite and >= 0, got {}", step, lr);
  TG_CHECK(step >= 0, "optimizer step must be >= 0, got {}", step);
  OptimizerStep s;
  s.kind = kind_;
  s.lr = lr;
  switch (kind_) {
    case OptimizerKind::kGd:
      break;
    case OptimizerKind::kMomentum:
      s.momentum = options_.momentum;
      break;
    case OptimizerKind::kAdam:
      s.lr = static_cast<float>(adam_corrected_lr(lr, options_.adam_beta1, options_.adam_beta2, step));
      s.beta1 = options_.adam_beta1;
      s.beta2 = options_.adam_beta2;
      s.epsilon = options_.adam_epsilon;
      break;
    case OptimizerKind::kRmsprop:
      s.momentum = options_.momentum;
      s.decay = options_.rmsprop_decay;
      s.epsilon = options_.rmsprop_epsilon;
      break;
  }
  return s;
}

void Optimizer::check_slab(const Slab& slab, const char* what) const {
  TG_CHECK(slab.allocated(), "optimizer: the {} slab is not allocated", what);
  for (const ParamEntry& p : params_) {
    TG_CHECK(slab.contains(p.name), "optimizer: the {} slab has no tensor '{}'", what, p.name);
    const Slab::Entry& e = slab.entry(slab.index_of(p.name));
    TG_CHECK(e.shape == p.shape && e.dtype == DType::kF32,
             "optimizer: {} tensor '{}' is {}{}, the optimizer was built for f32{}", what, p.name, dtype_name(e.dtype),
             e.shape.str(), p.shape.str());
  }
}

bool Optimizer::same_layout(const Slab& slab) const {
  if (slab.size() != static_cast<int>(params_.size()) || slab.bytes() != param_slab_bytes_) return false;
  for (int i = 0; i < slab.size(); ++i) {
    const Slab::Entry& e = slab.entry(i);
    if (e.name != params_[i].name || e.offset != param_offsets_[i]) return false;
  }
  return true;
}

void Optimizer::apply(Backend& backend, Slab& params, Slab& grads, int64_t step, float lr,
                      const ExponentialMovingAverage* ema, const std::vector<CodedAverage>* coded) {
  check_slab(params, "parameter");
  check_slab(grads, "gradient");
  if (params_.empty()) return;
  const int n = static_cast<int>(params_.size());
  TG_CHECK(!coded || static_cast<int>(coded->size()) == n, "optimizer: {} coded averages given for {} parameters",
           coded ? coded->size() : 0, n);
  auto is_coded = [&](int i) { return coded && (*coded)[i].defined(); };
  OptimizerStep desc = step_descriptor(step, lr);
  const int groups = slots_per_param();
  const Tensor flat_ema = ema ? ema->flat_average(params) : Tensor();
  TG_CHECK(!ema || flat_ema.defined(),
           "optimizer: the moving average given to apply() does not track this parameter slab");
  if (ema) desc.ema_decay = static_cast<float>(ema->decay_at(step));

  if (same_layout(params) && same_layout(grads)) {
    // Flat views of the slab and its slot groups (param_slab_bytes_ / 4 elements each); one call per run of
    // parameters updated from `grads` (the padding between them included: zeros that stay zero), one for all the
    // coded parameters (their padding left as it is: zero; a GPU's one launch per 32 of them).
    const int64_t count = static_cast<int64_t>(param_slab_bytes_ / sizeof(float));
    const Tensor w(params.data(), Shape{count}, DType::kF32, params.device());
    const Tensor g(grads.data(), Shape{count}, DType::kF32, grads.device());
    const Tensor s1 = groups > 0 ? slot_group(0) : Tensor(), s2 = groups > 1 ? slot_group(1) : Tensor();
    auto part = [](const Tensor& t, int64_t b, int64_t e) { return t ? t.slice0(b, e) : Tensor(); };
    auto element = [&](int i) { return static_cast<int64_t>(param_offsets_[i] / sizeof(float)); };
    int run = 0;  // the first parameter of the open run
    coded_items_.clear();
    for (int i = 0; i <= n; ++i) {
      if (i < n && !is_coded(i)) continue;
      if (i > run) {
        const int64_t b = element(run), e = i < n ? element(i) : count;
        backend.optimizer_update(desc, w.slice0(b, e), g.slice0(b, e), part(s1, b, e), part(s2, b, e),
                                 part(flat_ema, b, e));
      }
      if (i == n) break;
      const int64_t ce = element(i) + params_[i].shape.numel();
      coded_items_.push_back({w.slice0(element(i), ce), (*coded)[i], part(s1, element(i), ce), part(s2, element(i), ce),
                              part(flat_ema, element(i), ce)});
      run = i + 1;
    }
    backend.optimizer_update_coded_many(desc, coded_items_.data(), static_cast<int>(coded_items_.size()));
    return;
  }
  // Different layouts (e.g. a gradient slab in another order): one call per tensor, matched by name (the coded ones
  // in one call).
  coded_items_.clear();
  for (int i = 0; i < n; ++i) {
    const std::string& name = params_[i].name;
    const Tensor s1 = groups > 0 ? slots_.view(i) : Tensor(), s2 = groups > 1 ? slots_.view(n + i) : Tensor();
    const Tensor e = ema ? ema->average(name) : Tensor();
    if (is_coded(i))
      coded_items_.push_back({params.view(name), (*coded)[i], s1, s2, e});
    else
      backend.optimizer_update(desc, params.view(name), grads.view(name), s1, s2, e);
  }
  backend.optimizer_update_coded_many(desc, coded_items_.data(), static_cast<int>(coded_items_.size()));
}

}  // namespace tg

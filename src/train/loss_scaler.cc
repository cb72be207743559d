// LossScaler: halve and skip on Inf/NaN, double after a run of good steps (see loss_scaler.h).
#include "terngrad/train/loss_scaler.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "terngrad/core/error.h"

namespace tg {

LossScaler::LossScaler(bool enabled, float initial_scale, int64_t growth_interval)
    : enabled_(enabled), scale_(initial_scale), growth_interval_(growth_interval) {
  TG_CHECK(std::isfinite(initial_scale) && initial_scale >= 1.f, "loss scale {} must be finite and at least 1",
           initial_scale);
  TG_CHECK(growth_interval >= 1, "loss scale growth interval {} must be at least 1", growth_interval);
}

bool LossScaler::update(bool found, int64_t step) {
  if (!enabled_) return true;
  if (found) {
    ++skipped_steps_;
    good_steps_ = 0;
    scale_ *= 0.5f;
    TG_CHECK(scale_ >= 1.f,
             "step {}: the fp16 loss scale fell below 1 (gradients are Inf/NaN even unscaled: the run diverged); "
             "stopping before the update, the last checkpoint is unchanged",
             step);
    return false;
  }
  if (++good_steps_ >= growth_interval_) {
    good_steps_ = 0;
    if (scale_ < kMaxScale) scale_ *= 2.f;
  }
  return true;
}

void LossScaler::append_checkpoint_tensors(std::vector<NamedTensor>& out, std::vector<Buffer>& storage) const {
  storage.emplace_back(host_allocator(), sizeof(float));
  *static_cast<float*>(storage.back().data()) = scale_;
  out.push_back({"loss_scale/scale", Tensor(storage.back().data(), Shape{1}, DType::kF32, Device::cpu())});
  storage.emplace_back(host_allocator(), sizeof(int32_t));
  *static_cast<int32_t*>(storage.back().data()) = static_cast<int32_t>(good_steps_);
  out.push_back({"loss_scale/good_steps", Tensor(storage.back().data(), Shape{1}, DType::kI32, Device::cpu())});
}

bool LossScaler::restore_from(const CheckpointReader& reader) {
  const std::vector<std::string> names = reader.names();
  for (const char* name : {"loss_scale/scale", "loss_scale/good_steps"})
    if (std::find(names.begin(), names.end(), name) == names.end()) return false;
  float scale = 0.f;
  int32_t good = 0;
  reader.read("loss_scale/scale", Tensor(&scale, Shape{1}, DType::kF32, Device::cpu()));
  reader.read("loss_scale/good_steps", Tensor(&good, Shape{1}, DType::kI32, Device::cpu()));
  restore(scale, good);
  return true;
}

void LossScaler::restore(float scale, int64_t good_steps) {
  TG_CHECK(std::isfinite(scale) && scale >= 1.f && good_steps >= 0 && good_steps < growth_interval_,
           "checkpointed loss scale {} / good steps {} are out of range (scale >= 1, steps in [0, {}))", scale,
           good_steps, growth_interval_);
  scale_ = scale;
  good_steps_ = good_steps;
}

}  // namespace tg

// LossScaler: dynamic loss scaling for fp16 training (--precision fp16), as NVIDIA's AMP does it. The loss is
// multiplied by scale() before the backward so small fp16 gradients do not flush to zero; the gradients are
// divided by it again when they are converted to fp32 (Net::backward, Backend::unscale_and_check). A step
// whose gradients hold an Inf or NaN on any worker (the flag all-reduced with MAX, so every replica agrees)
// is skipped and the scale halved; after kGrowthInterval good steps in a row the scale doubles. bf16 and fp32
// need no scaling: a disabled scaler has scale 1 and never skips.
#pragma once

#include <cstdint>
#include <vector>

#include "terngrad/core/buffer.h"
#include "terngrad/train/checkpoint.h"

namespace tg {

class LossScaler {
 public:
  static constexpr float kInitialScale = 32768.f;  // 2^15
  static constexpr int64_t kGrowthInterval = 2000;
  static constexpr float kMaxScale = 16777216.f;  // 2^24: doubling stops here (fp32 gradients stay finite)

  explicit LossScaler(bool enabled, float initial_scale = kInitialScale, int64_t growth_interval = kGrowthInterval);

  bool enabled() const { return enabled_; }
  float scale() const { return enabled_ ? scale_ : 1.f; }
  int64_t good_steps() const { return good_steps_; }        // consecutive steps without Inf/NaN
  int64_t skipped_steps() const { return skipped_steps_; }  // steps skipped since the scaler was made

  // After a step's gradients were checked (`found`: an Inf or NaN anywhere). Returns whether the step's update
  // is applied: false (skip, scale halved) when found. A scale halved below 1 means the gradients overflow
  // even unscaled (a diverged run): throws one line naming `step`, so the run stops before any update and its
  // last checkpoint stays as it was.
  bool update(bool found, int64_t step);

  // The state a checkpoint keeps (scale and good-step counter), restored bit for bit.
  void restore(float scale, int64_t good_steps);
  // The checkpoint tensors "loss_scale/scale" (f32 (1)) and "loss_scale/good_steps" (i32 (1)), staged in
  // host buffers appended to `storage`.
  void append_checkpoint_tensors(std::vector<NamedTensor>& out, std::vector<Buffer>& storage) const;
  // Restores them from `reader`; false (nothing changed) when the checkpoint has none (saved without fp16).
  bool restore_from(const CheckpointReader& reader);

 private:
  bool enabled_;
  float scale_;
  int64_t growth_interval_;
  int64_t good_steps_ = 0;
  int64_t skipped_steps_ = 0;
};

}  // namespace tg

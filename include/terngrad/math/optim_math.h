// Per-element optimizer updates with TensorFlow 1.x semantics, written once for the CPU loops and the CUDA
// kernels (same bits on both when compiled without FMA contraction). lr for adam is the bias-corrected
// lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t), computed once per step on the host.
#pragma once

#include <cmath>

#include "terngrad/core/host_device.h"

namespace tg {

// The parameters of one optimizer_update (Backend), shared by the CPU loops and the CUDA kernels.
enum class OptimizerKind { kGd, kMomentum, kAdam, kRmsprop };
struct OptimizerStep {
  OptimizerKind kind = OptimizerKind::kGd;
  float lr = 0.f;        // learning rate of this step (for adam: bias-corrected lr_t)
  float momentum = 0.f;  // momentum, rmsprop momentum
  float beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f;
  float decay = 0.9f;      // rmsprop decay
  float ema_decay = -1.f;  // >= 0: the same pass folds the updated w into its moving average (ema_update_one)
};

// gd: w -= lr * g
TG_HOST_DEVICE void gd_update(float& w, float g, float lr) { w -= lr * g; }

// momentum (non-Nesterov): acc = m * acc + g; w -= lr * acc
TG_HOST_DEVICE void momentum_update(float& w, float g, float& acc, float lr, float m) {
  acc = m * acc + g;
  w -= lr * acc;
}

// adam: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; w -= lr_t * m / (sqrt(v) + eps)
TG_HOST_DEVICE void adam_update(float& w, float g, float& m, float& v, float lr_t, float b1, float b2, float eps) {
  m = b1 * m + (1.f - b1) * g;
  v = b2 * v + (1.f - b2) * (g * g);
  w -= lr_t * m / (sqrtf(v) + eps);
}

// rmsprop (ms initialised to 1): ms = d ms + (1-d) g^2; mom = mu mom + lr g / sqrt(ms + eps); w -= mom
TG_HOST_DEVICE void rmsprop_update(float& w, float g, float& ms, float& mom, float lr, float d, float mu, float eps) {
  ms = d * ms + (1.f - d) * (g * g);
  mom = mu * mom + lr * g / sqrtf(ms + eps);
  w -= mom;
}

// ema = decay * ema + (1 - decay) * w  (TF: ema -= (1 - decay) * (ema - w))
TG_HOST_DEVICE void ema_update_one(float& ema, float w, float decay) { ema -= (1.f - decay) * (ema - w); }

TG_HOST_DEVICE void optimizer_update_one(const OptimizerStep& s, float& w, float g, float* s1, float* s2) {
  switch (s.kind) {
    case OptimizerKind::kGd:
      gd_update(w, g, s.lr);
      break;
    case OptimizerKind::kMomentum:
      momentum_update(w, g, *s1, s.lr, s.momentum);
      break;
    case OptimizerKind::kAdam:
      adam_update(w, g, *s1, *s2, s.lr, s.beta1, s.beta2, s.epsilon);
      break;
    case OptimizerKind::kRmsprop:
      rmsprop_update(w, g, *s1, *s2, s.lr, s.decay, s.momentum, s.epsilon);
      break;
  }
}

}  // namespace tg

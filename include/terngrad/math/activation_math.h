// ReLU written once for the CPU loops and the CUDA kernels. NaN propagates (as TF's relu does), so a
// diverging run is caught by the non-finite-loss check instead of being masked to 0.
#pragma once

#include "terngrad/core/host_device.h"

namespace tg {

TG_HOST_DEVICE float relu_one(float x) { return x < 0.f ? 0.f : x; }
// Gradient of relu given its output y (the kink at 0 gets none).
TG_HOST_DEVICE float relu_grad_one(float y, float dy) { return y > 0.f ? dy : 0.f; }

}  // namespace tg

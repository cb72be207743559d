// The loss curve of a short LeNet training on real data, for the tests that compare compute dtypes: the same
// batches in the same order from the same initial weights, so two curves differ only by the arithmetic.
#pragma once

#include <cstdint>
#include <vector>

#include "common/fashion_mnist.h"
#include "terngrad/backend/backend.h"

namespace tg::testing {

// The losses of `steps` momentum-SGD steps (learning rate 0.01) of LeNet computing in `compute` on `be`, batch
// k being examples [k*batch, (k+1)*batch) of `train` (wrapping). backward scales the loss by loss_scale; with
// `skipped`, a step whose gradients overflow is not applied and is counted there.
std::vector<double> lenet_loss_curve(Backend& be, const IdxDataset& train, DType compute, int64_t batch, int64_t steps,
                                     float loss_scale = 1.f, int* skipped = nullptr);

// The mean of the last `tail` values (single-step losses are noisy).
double tail_mean(const std::vector<double>& v, int64_t tail);

// How many steps of two curves of equal length have bit-identical losses. A half-precision curve that is
// close to fp32's but shares most of its bits was computed in fp32: the half path fell back silently.
int64_t identical_losses(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace tg::testing

// LeNet loss curves for the compute-dtype tests (lenet_loss_curve.h).
#include "common/lenet_loss_curve.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "common/bound_net.h"
#include "terngrad/core/error.h"
#include "terngrad/models/registry.h"
#include "terngrad/optim/optimizer.h"

namespace tg::testing {

std::vector<double> lenet_loss_curve(Backend& be, const IdxDataset& train, DType compute, int64_t batch, int64_t steps,
                                     float loss_scale, int* skipped) {
  std::vector<float> images(batch * 784);  // (batch, 28, 28, 1)
  std::vector<int32_t> labels(batch);
  Tensor x(images.data(), Shape{batch, 28, 28, 1}, DType::kF32, Device::cpu());
  Tensor y(labels.data(), Shape{batch}, DType::kI32, Device::cpu());
  BoundNet m(
      be,
      [&](Net& n) {
        build_model("lenet", ModelConfig{}, n);
        n.set_compute_dtype(compute);
      },
      batch);
  Optimizer opt(momentum_sgd(), m.store.params(), be);
  std::vector<double> losses;
  for (int64_t step = 0; step < steps; ++step) {
    for (int64_t i = 0; i < batch; ++i) {
      const int64_t r = (step * batch + i) % train.count;
      std::copy_n(train.images.begin() + r * 784, 784, images.begin() + i * 784);
      labels[i] = train.labels[r];
    }
    losses.push_back(m.net.forward(x, y, true, static_cast<uint32_t>(step)));
    m.net.backward(nullptr, loss_scale);
    if (skipped && m.net.overflowed()) {
      ++*skipped;
      continue;
    }
    opt.apply(be, m.store.params(), m.net.grads(), step, 0.01f);
  }
  return losses;
}

double tail_mean(const std::vector<double>& v, int64_t tail) {
  return std::accumulate(v.end() - tail, v.end(), 0.0) / static_cast<double>(tail);
}

int64_t identical_losses(const std::vector<double>& a, const std::vector<double>& b) {
  TG_CHECK(a.size() == b.size(), "identical_losses: curves of {} and {} steps", a.size(), b.size());
  int64_t same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += std::memcmp(&a[i], &b[i], sizeof(double)) == 0;
  return same;
}

}  // namespace tg::testing

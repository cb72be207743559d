// A network ready to run, the setup most model tests start with: built (a registry model, or by a function),
// set up on a backend for a batch, its parameters in their own store initialized from a seed, and bound.
//   BoundNet m(*be, "lenet", ModelConfig{}, 64);  m.net.forward(x, y, true);  m.store.params() ...
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "terngrad/backend/backend.h"
#include "terngrad/models/registry.h"
#include "terngrad/nn/net.h"
#include "terngrad/optim/optimizer.h"

namespace tg::testing {

struct BoundNet {
  BoundNet(Backend& backend, const std::function<void(Net&)>& build, int64_t batch, uint64_t seed = 1);
  BoundNet(Backend& backend, const std::string& model, const ModelConfig& config, int64_t batch, uint64_t seed = 1);

  Net net;               // declared first: the store is made from its specs
  ParameterStore store;  // initialized from the seed, bound to net
};

// The reference's momentum SGD (momentum 0.9), as its AlexNet, ResNet and LeNet runs use.
OptimizerOptions momentum_sgd(float momentum = 0.9f);

}  // namespace tg::testing

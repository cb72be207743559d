// A network ready to run (bound_net.h).
#include "common/bound_net.h"

namespace tg::testing {

namespace {

// Builds and sets up net, then makes its store from the specs that setup() completed.
// Returned as a prvalue: guaranteed copy elision, the store is made in place.
ParameterStore set_up(Net& net, Backend& backend, const std::function<void(Net&)>& build, int64_t batch) {
  build(net);
  net.setup(backend, batch);
  return ParameterStore(net.param_specs(), net.state_specs(), backend);
}

}  // namespace

BoundNet::BoundNet(Backend& backend, const std::function<void(Net&)>& build, int64_t batch, uint64_t seed)
    : store(set_up(net, backend, build, batch)) {
  store.initialize(seed);
  net.bind(store);
}

BoundNet::BoundNet(Backend& backend, const std::string& model, const ModelConfig& config, int64_t batch, uint64_t seed)
    : BoundNet(
          backend, [&](Net& n) { build_model(model, config, n); }, batch, seed) {}

OptimizerOptions momentum_sgd(float momentum) {
  OptimizerOptions o;
  o.optimizer = "momentum";
  o.momentum = momentum;
  return o;
}

}  // namespace tg::testing

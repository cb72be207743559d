// ReLU: y = max(x, 0); backward passes dy where y > 0 (the kink at 0 gets no gradient).
#include "terngrad/nn/layers.h"

namespace tg {
namespace {
class ReluLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "relu"; }
  bool backward_reads_input(int /*i*/) const override { return false; }  // dx = dy * (y > 0)
  bool backward_reads_output() const override { return true; }
  bool may_overwrite_input(int /*i*/) const override { return true; }
  bool recomputable() const override { return true; }

 protected:
  std::vector<Shape> setup_impl(SetupContext& ctx) override { return {ctx.input(0)}; }
  void forward_impl(LayerIO& io) override { io.backend->relu_forward(io.in[0], io.out[0]); }
  void recompute_impl(LayerIO& io) override { forward_impl(io); }
  void backward_impl(LayerIO& io) override {
    if (io.din[0]) io.backend->relu_backward(io.out[0], io.dout[0], io.din[0]);
  }
};
}  // namespace

LayerPtr relu(const std::string& name) { return std::make_unique<ReluLayer>(name); }

}  // namespace tg

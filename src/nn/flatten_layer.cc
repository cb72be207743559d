// Flatten: (N, H, W, C) -> (N, H*W*C) in NHWC row-major order, as TF's flatten (the reference's fc layers
// depend on this order).
#include "terngrad/nn/layers.h"

namespace tg {
namespace {
class FlattenLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "flatten"; }
  bool recomputable() const override { return true; }
  bool backward_reads_input(int /*i*/) const override { return false; }
  bool backward_reads_output() const override { return false; }
  bool may_overwrite_input(int /*i*/) const override { return true; }  // the same bytes: in place is a no-op

 protected:
  std::vector<Shape> setup_impl(SetupContext& ctx) override {
    const Shape& s = ctx.input(0);
    TG_CHECK(s.rank() >= 2, "layer '{}': cannot flatten {}", name(), s.str());
    return {Shape{s[0], s.numel() / s[0]}};
  }
  void forward_impl(LayerIO& io) override {
    if (io.out[0].raw() != io.in[0].raw()) io.backend->copy(io.out[0], io.in[0]);
  }
  void recompute_impl(LayerIO& io) override { forward_impl(io); }
  void backward_impl(LayerIO& io) override {
    if (io.din[0]) io.backend->copy(io.din[0], io.dout[0]);
  }
};
}  // namespace

LayerPtr flatten(const std::string& name) { return std::make_unique<FlattenLayer>(name); }

}  // namespace tg

// Add: element-wise sum of inputs of equal shape (residual connections); each input's gradient is dy.
#include "terngrad/nn/layers.h"

namespace tg {
namespace {
class AddLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "add"; }
  int num_inputs() const override { return -1; }

 protected:
  std::vector<Shape> setup_impl(SetupContext& ctx) override {
    TG_CHECK(ctx.inputs().size() >= 2, "layer '{}' adds at least two inputs", name());
    for (size_t i = 1; i < ctx.inputs().size(); ++i)
      TG_CHECK(ctx.input(static_cast<int>(i)) == ctx.input(0), "layer '{}': input {} has shape {}, input 0 {}", name(),
               i, ctx.input(static_cast<int>(i)).str(), ctx.input(0).str());
    return {ctx.input(0)};
  }
  void forward_impl(LayerIO& io) override {
    io.backend->add(io.in[0], io.in[1], io.out[0]);
    // Further inputs in place (out may be a: any compute dtype; axpy is f32 only). In f32 the same bits as
    // out += 1 * in.
    for (size_t i = 2; i < io.in.size(); ++i) io.backend->add(io.out[0], io.in[i], io.out[0]);
  }
  void backward_impl(LayerIO& io) override {
    for (const Tensor& d : io.din)
      if (d) io.backend->copy(d, io.dout[0]);
  }
};
}  // namespace

LayerPtr add(const std::string& name) { return std::make_unique<AddLayer>(name); }

}  // namespace tg

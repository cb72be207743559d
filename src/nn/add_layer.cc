// Add: element-wise sum of inputs of equal shape (residual connections); each input's gradient is dy.
#include "terngrad/nn/layers.h"

namespace tg {
namespace {
class AddLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "add"; }
  bool recomputable() const override { return true; }
  int num_inputs() const override { return -1; }
  bool backward_reads_input(int /*i*/) const override { return false; }  // each dx is dy
  bool backward_reads_output() const override { return false; }
  // The output over input 0 or 1 (the first add reads both before writing); not over a third input, which the
  // first add would overwrite before it is read.
  bool may_overwrite_input(int i) const override { return i < 2; }

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
  void recompute_impl(LayerIO& io) override { forward_impl(io); }
  void backward_impl(LayerIO& io) override {
    for (const Tensor& d : io.din)
      if (d) io.backend->copy(d, io.dout[0]);
  }
};
}  // namespace

LayerPtr add(const std::string& name) { return std::make_unique<AddLayer>(name); }

}  // namespace tg

// Concat along channels (the last NHWC dimension) of inputs with equal leading dimensions; backward splits.
#include "terngrad/nn/layers.h"

namespace tg {
namespace {
class ConcatLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "concat"; }
  bool recomputable() const override { return true; }
  int num_inputs() const override { return -1; }
  bool backward_reads_input(int /*i*/) const override { return false; }  // a split of dy
  bool backward_reads_output() const override { return false; }

 protected:
  std::vector<Shape> setup_impl(SetupContext& ctx) override {
    Shape out = ctx.input(0);
    int64_t channels = 0;
    for (size_t i = 0; i < ctx.inputs().size(); ++i) {
      const Shape& s = ctx.input(static_cast<int>(i));
      TG_CHECK(s.rank() == out.rank(), "layer '{}': input {} has rank {}, input 0 rank {}", name(), i, s.rank(),
               out.rank());
      for (int d = 0; d + 1 < s.rank(); ++d)
        TG_CHECK(s[d] == out[d], "layer '{}': input {} {} does not match input 0 {} outside the channels", name(), i,
                 s.str(), out.str());
      channels += s.dim(-1);
    }
    out[out.rank() - 1] = channels;
    return {out};
  }
  void forward_impl(LayerIO& io) override { io.backend->concat_channels(io.in, io.out[0]); }
  void recompute_impl(LayerIO& io) override { forward_impl(io); }
  void backward_impl(LayerIO& io) override { io.backend->split_channels(io.dout[0], io.din); }
};
}  // namespace

LayerPtr concat(const std::string& name) { return std::make_unique<ConcatLayer>(name); }

}  // namespace tg

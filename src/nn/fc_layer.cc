// Fully connected layer: x (N, in) -> y (N, out) = x * weights (in, out) + biases (out).
#include "terngrad/nn/layers.h"

namespace tg {
namespace {
class FcLayer final : public Layer {
 public:
  FcLayer(const std::string& name, const FcOptions& o) : Layer(name), o_(o) {
    TG_CHECK(o.out > 0, "layer '{}' (fully_connected): output size {} must be positive", name, o.out);
  }
  const char* type() const override { return "fully_connected"; }
  bool recomputable() const override { return true; }
  bool params_in_compute_dtype() const override { return true; }
  LayerOp op() const override { return desc_; }
  bool backward_reads_output() const override { return false; }  // dx from w, dw from x

 protected:
  std::vector<Shape> setup_impl(SetupContext& ctx) override {
    const Shape& x = ctx.input(0);  // (N, in)
    TG_CHECK(x.rank() == 2, "layer '{}' (fully_connected): input must be (N, in), got {} (flatten it first)", name(),
             x.str());
    desc_.n = x[0], desc_.in = x[1], desc_.out = o_.out, desc_.has_bias = o_.bias;
    ctx.param("weights", Shape{x[1], o_.out}, o_.weight_init, o_.weight_decay);
    if (o_.bias) ctx.param("biases", Shape{o_.out}, Initializer::constant(o_.bias_init), 0.f);
    return {Shape{x[0], o_.out}};
  }
  void forward_impl(LayerIO& io) override {
    io.backend->inner_product_forward(desc_, io.in[0], io.params[0], o_.bias ? io.params[1] : Tensor(), io.out[0]);
  }
  void recompute_impl(LayerIO& io) override { forward_impl(io); }
  void backward_impl(LayerIO& io) override {
    io.backend->inner_product_backward(desc_, io.in[0], io.params[0], io.dout[0], io.din[0], io.dparams[0],
                                       o_.bias ? io.dparams[1] : Tensor());
  }

 private:
  FcOptions o_;
  InnerProductDesc desc_;
};
}  // namespace

LayerPtr fully_connected(const std::string& name, const FcOptions& o) { return std::make_unique<FcLayer>(name, o); }

}  // namespace tg

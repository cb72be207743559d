// Convolution layer: x (N, H, W, C) -> y (N, OH, OW, out_channels) with weights (KH, KW, C/groups,
// out_channels) and optional biases (out_channels); stride, TF SAME/VALID padding, groups. The op itself is
// the backend's conv2d (oneDNN on the CPU, cuDNN on the GPU); the weights may come in the filter layout
// (LayerIO::filter_ohwi).
#include "terngrad/nn/layers.h"

namespace tg {
namespace {
class ConvLayer final : public Layer {
 public:
  ConvLayer(const std::string& name, const ConvOptions& o) : Layer(name), o_(o) {
    TG_CHECK(o.out_channels > 0 && o.kernel_h > 0 && o.kernel_w > 0 && o.stride > 0 && o.groups > 0,
             "layer '{}' (conv2d): out_channels {}, kernel {}x{}, stride {} and groups {} must be positive", name,
             o.out_channels, o.kernel_h, o.kernel_w, o.stride, o.groups);
  }
  const char* type() const override { return "conv2d"; }
  bool recomputable() const override { return true; }
  bool params_in_compute_dtype() const override { return true; }
  bool param_is_filter(int p) const override { return p == 0; }
  LayerOp op() const override { return desc_; }
  bool backward_reads_output() const override { return false; }  // dx from w, dw from x

 protected:
  std::vector<Shape> setup_impl(SetupContext& ctx) override {
    const Shape& x = ctx.input(0);  // (N, H, W, C)
    TG_CHECK(x.rank() == 4, "layer '{}' (conv2d): input must be (N, H, W, C), got {}", name(), x.str());
    const int64_t c = x[3];
    TG_CHECK(c % o_.groups == 0 && o_.out_channels % o_.groups == 0,
             "layer '{}' (conv2d): groups {} must divide the input channels of {} and the output channels {}", name(),
             o_.groups, x.str(), o_.out_channels);
    desc_ = make_conv_desc(x[0], x[1], x[2], c, o_.kernel_h, o_.kernel_w, o_.out_channels, o_.stride, o_.padding,
                           o_.groups, o_.bias);
    TG_CHECK(desc_.out_h > 0 && desc_.out_w > 0,
             "layer '{}' (conv2d): a {}x{} kernel with stride {} ({}) leaves no output from input {}", name(),
             o_.kernel_h, o_.kernel_w, o_.stride, padding_name(o_.padding), x.str());
    ctx.param("weights", Shape{o_.kernel_h, o_.kernel_w, c / o_.groups, o_.out_channels}, o_.weight_init,
              o_.weight_decay);
    if (o_.bias) ctx.param("biases", Shape{o_.out_channels}, Initializer::constant(o_.bias_init), 0.f);
    return {Shape{x[0], desc_.out_h, desc_.out_w, o_.out_channels}};
  }
  void forward_impl(LayerIO& io) override {
    io.backend->conv2d_forward(desc(io), io.in[0], io.params[0], o_.bias ? io.params[1] : Tensor(), io.out[0]);
  }
  // The forward again: the same primitive on the same input, the same bits.
  void recompute_impl(LayerIO& io) override { forward_impl(io); }
  void backward_impl(LayerIO& io) override {
    io.backend->conv2d_backward(desc(io), io.in[0], io.params[0], io.dout[0], io.din[0], io.dparams[0],
                                o_.bias ? io.dparams[1] : Tensor());
  }

 private:
  // The descriptor with the layout the weights come in (LayerIO::filter_ohwi).
  ConvDesc desc(const LayerIO& io) const {
    ConvDesc d = desc_;
    d.filter_ohwi = io.filter_ohwi;
    return d;
  }
  ConvOptions o_;
  ConvDesc desc_;
};
}  // namespace

LayerPtr conv2d(const std::string& name, const ConvOptions& o) { return std::make_unique<ConvLayer>(name, o); }

}  // namespace tg

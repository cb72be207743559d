// Batch normalization over all but the channel dimension: x (N, H, W, C) or (N, C) -> y of the same shape.
// Parameters "beta" (C) and, optionally, "gamma" (C); state "moving_mean" (C, init 0) and "moving_variance"
// (C, init 1). Training normalizes with the batch statistics (population variance), saves them for the
// backward and updates moving = decay * moving + (1 - decay) * batch (inside the backend's forward); inference
// normalizes with the moving statistics. The net may fuse the ReLU that follows (LayerIO::relu_fused): the forward
// then writes max(y, 0) and the backward takes the ReLU output's gradient.
#include "terngrad/nn/layers.h"

namespace tg {
namespace {
class BatchNormLayer final : public Layer {
 public:
  BatchNormLayer(const std::string& name, const BatchNormOptions& o) : Layer(name), o_(o) {
    TG_CHECK(o.epsilon > 0.f && o.decay >= 0.f && o.decay <= 1.f,
             "layer '{}' (batch_norm): epsilon {} must be > 0 and decay {} in [0, 1]", name, o.epsilon, o.decay);
  }
  const char* type() const override { return "batch_norm"; }
  LayerOp op() const override { return desc_; }
  bool backward_reads_output() const override { return false; }  // x^ from x and the batch statistics
  bool recomputable() const override { return true; }
  bool can_fuse_relu() const override { return true; }  // the forwards' BatchNormDesc::relu

 protected:
  std::vector<Shape> setup_impl(SetupContext& ctx) override {
    const Shape& x = ctx.input(0);
    TG_CHECK(x.rank() == 4 || x.rank() == 2, "layer '{}' (batch_norm): input must be (N, H, W, C) or (N, C), got {}",
             name(), x.str());
    const int64_t c = x.dim(-1);
    desc_.rows = x.numel() / c, desc_.c = c, desc_.epsilon = o_.epsilon, desc_.has_gamma = o_.gamma;
    beta_ = ctx.param("beta", Shape{c}, Initializer::constant(0.f), 0.f);
    if (o_.gamma) gamma_ = ctx.param("gamma", Shape{c}, Initializer::constant(o_.gamma_init), 0.f);
    ctx.state("moving_mean", Shape{c}, 0.f);
    ctx.state("moving_variance", Shape{c}, 1.f);
    ctx.saved("batch_mean", Shape{c});
    ctx.saved("batch_variance", Shape{c});
    return {x};
  }
  void forward_impl(LayerIO& io) override {
    Backend& be = *io.backend;
    const Tensor gamma = o_.gamma ? io.params[gamma_] : Tensor();
    const Tensor& moving_mean = io.state[0];
    const Tensor& moving_var = io.state[1];
    BatchNormDesc d = desc_;
    d.relu = io.relu_fused;
    if (io.training) {
      const Tensor& mean = io.saved[0];
      const Tensor& var = io.saved[1];
      be.batch_norm_forward_training(d, io.in[0], gamma, io.params[beta_], io.out[0], mean, var,
                                     BatchNormMoving{moving_mean, moving_var, o_.decay});
    } else {
      be.batch_norm_forward_inference(d, io.in[0], gamma, io.params[beta_], moving_mean, moving_var, io.out[0]);
    }
    trained_ = io.training;
  }
  // The training forward's output again from x and the batch statistics it saved (an inference forward with them:
  // the same y = x * scale + shift per channel), the moving statistics untouched.
  void recompute_impl(LayerIO& io) override {
    TG_CHECK(trained_, "layer '{}' (batch_norm): recompute needs a training forward (batch statistics)", name());
    io.backend->batch_norm_forward_inference(desc_, io.in[0], o_.gamma ? io.params[gamma_] : Tensor(), io.params[beta_],
                                             io.saved[0], io.saved[1], io.out[0]);
  }
  void backward_impl(LayerIO& io) override {
    TG_CHECK(trained_, "layer '{}' (batch_norm): backward needs a training forward (batch statistics)", name());
    BatchNormDesc d = desc_;
    d.relu = io.relu_fused;  // dout is then the fused ReLU's output gradient
    io.backend->batch_norm_backward(d, io.in[0], o_.gamma ? io.params[gamma_] : Tensor(), io.saved[0], io.saved[1],
                                    io.dout[0], io.din[0], o_.gamma ? io.dparams[gamma_] : Tensor(), io.dparams[beta_],
                                    d.relu ? io.params[beta_] : Tensor());
  }

 private:
  BatchNormOptions o_;
  BatchNormDesc desc_;
  int beta_ = 0, gamma_ = -1;
  bool trained_ = false;
};
}  // namespace

LayerPtr batch_norm(const std::string& name, const BatchNormOptions& o) {
  return std::make_unique<BatchNormLayer>(name, o);
}

}  // namespace tg

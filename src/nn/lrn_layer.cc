// Local response normalization across channels, TF convention: y = x / (bias + alpha * sum_{|d'-d|<=r}
// x_{d'}^2)^beta, alpha not divided by the window size. x (N, H, W, C) -> y of the same shape. A backend
// workspace, when it needs one, is a saved tensor ("workspace", u8).
#include "terngrad/nn/layers.h"

namespace tg {
namespace {
class LrnLayer final : public Layer {
 public:
  LrnLayer(const std::string& name, int64_t depth_radius, float bias, float alpha, float beta) : Layer(name) {
    TG_CHECK(depth_radius >= 0 && alpha >= 0.f && beta >= 0.f && bias > 0.f,
             "layer '{}' (lrn): depth_radius {} , alpha {}, beta {} must be >= 0 and bias {} > 0", name, depth_radius,
             alpha, beta, bias);
    desc_.depth_radius = depth_radius, desc_.bias = bias, desc_.alpha = alpha, desc_.beta = beta;
  }
  const char* type() const override { return "lrn"; }
  bool recomputable() const override { return true; }
  LayerOp op() const override { return desc_; }
  bool backward_reads_output() const override { return false; }  // recomputed from x (CPU and CUDA)

 protected:
  std::vector<Shape> setup_impl(SetupContext& ctx) override {
    const Shape& x = ctx.input(0);  // (N, H, W, C)
    TG_CHECK(x.rank() == 4, "layer '{}' (lrn): input must be (N, H, W, C), got {}", name(), x.str());
    desc_.n = x[0], desc_.h = x[1], desc_.w = x[2], desc_.c = x[3];
    size_t ws = ctx.backend().lrn_workspace_bytes(desc_);
    has_workspace_ = ws > 0;
    if (has_workspace_) ctx.saved("workspace", Shape{static_cast<int64_t>(ws)}, DType::kU8);
    return {x};
  }
  void forward_impl(LayerIO& io) override {
    io.backend->lrn_forward(desc_, io.in[0], io.out[0], has_workspace_ ? io.saved[0] : Tensor());
  }
  void recompute_impl(LayerIO& io) override { forward_impl(io); }
  void backward_impl(LayerIO& io) override {
    if (!io.din[0]) return;
    io.backend->lrn_backward(desc_, io.in[0], io.dout[0], has_workspace_ ? io.saved[0] : Tensor(), io.din[0]);
  }

 private:
  LrnDesc desc_;
  bool has_workspace_ = false;
};
}  // namespace

LayerPtr lrn(const std::string& name, int64_t depth_radius, float bias, float alpha, float beta) {
  return std::make_unique<LrnLayer>(name, depth_radius, bias, alpha, beta);
}

}  // namespace tg

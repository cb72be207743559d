// Max and average pooling layers: x (N, H, W, C) -> y (N, OH, OW, C). Average pooling with SAME or VALID
// padding counts only in-image cells (TF); with SYMMETRIC (PyTorch's padding) it divides by the whole window,
// as PyTorch's avg_pool2d does by default. Max pooling keeps the backend's arg-max workspace as a saved tensor
// ("argmax", u8) between forward and backward.
#include "terngrad/nn/layers.h"

namespace tg {
namespace {
class PoolLayer final : public Layer {
 public:
  PoolLayer(const std::string& name, PoolKind kind, int64_t kernel, int64_t stride, Padding padding)
      : Layer(name), kind_(kind), kernel_(kernel), stride_(stride), padding_(padding) {
    TG_CHECK(kernel > 0 && stride > 0, "layer '{}' ({}): kernel {} and stride {} must be positive", name, type(),
             kernel, stride);
  }
  const char* type() const override { return kind_ == PoolKind::kMax ? "max_pool" : "avg_pool"; }
  bool recomputable() const override { return true; }
  PoolKind kind() const {
    return kind_ == PoolKind::kAvg && padding_ == Padding::kSymmetric ? PoolKind::kAvgIncludePad : kind_;
  }
  LayerOp op() const override { return desc_; }
  // Max: the CPU reads its arg-max workspace, CUDA finds the arg-max in x again; average: only the shape.
  bool backward_reads_input(int /*i*/) const override { return kind_ == PoolKind::kMax; }
  bool backward_reads_output() const override { return false; }

 protected:
  std::vector<Shape> setup_impl(SetupContext& ctx) override {
    const Shape& x = ctx.input(0);  // (N, H, W, C)
    TG_CHECK(x.rank() == 4, "layer '{}' ({}): input must be (N, H, W, C), got {}", name(), type(), x.str());
    desc_ = make_pool_desc(kind(), x[0], x[1], x[2], x[3], kernel_, kernel_, stride_, padding_);
    TG_CHECK(desc_.out_h > 0 && desc_.out_w > 0,
             "layer '{}' ({}): a {}x{} window with stride {} ({}) leaves no output from input {}", name(), type(),
             kernel_, kernel_, stride_, padding_name(padding_), x.str());
    size_t ws = ctx.backend().pool_workspace_bytes(desc_);
    has_workspace_ = ws > 0;
    if (has_workspace_) ctx.saved("argmax", Shape{static_cast<int64_t>(ws)}, DType::kU8);
    return {Shape{x[0], desc_.out_h, desc_.out_w, x[3]}};
  }
  // The workspace is filled in inference too, so a backward is valid after any forward.
  void forward_impl(LayerIO& io) override {
    io.backend->pool_forward(desc_, io.in[0], io.out[0], has_workspace_ ? io.saved[0] : Tensor());
  }
  // The forward again (max: the arg-max workspace rewritten with the same bits).
  void recompute_impl(LayerIO& io) override { forward_impl(io); }
  void backward_impl(LayerIO& io) override {
    if (!io.din[0]) return;
    io.backend->pool_backward(desc_, io.in[0], io.out[0], io.dout[0], has_workspace_ ? io.saved[0] : Tensor(),
                              io.din[0]);
  }

 private:
  PoolKind kind_;
  int64_t kernel_, stride_;
  Padding padding_;
  PoolDesc desc_;
  bool has_workspace_ = false;
};
}  // namespace

LayerPtr max_pool(const std::string& name, int64_t kernel, int64_t stride, Padding padding) {
  return std::make_unique<PoolLayer>(name, PoolKind::kMax, kernel, stride, padding);
}
LayerPtr avg_pool(const std::string& name, int64_t kernel, int64_t stride, Padding padding) {
  return std::make_unique<PoolLayer>(name, PoolKind::kAvg, kernel, stride, padding);
}

}  // namespace tg

// Softmax cross-entropy with optional label smoothing: inputs logits (N, K) and labels (N) i32, output the
// mean loss over the batch (1). The softmax is saved for backward: dlogits = dloss/N * (softmax - target).
// Logits may be f16/bf16 (mixed precision); the softmax, the losses and the output stay f32, and dloss carries
// the loss scale (Net::backward), so dlogits are the scaled gradient in the logits' dtype. Nothing waits for the
// device: the mean stays there (Backend::reduce_into) and dloss is the host value Net::backward gives
// (LayerIO::loss_grad).
#include "terngrad/nn/layers.h"

namespace tg {
namespace {
class SoftmaxXentLayer final : public Layer {
 public:
  SoftmaxXentLayer(const std::string& name, float ls) : Layer(name), label_smoothing_(ls) {
    TG_CHECK(ls >= 0.f && ls < 1.f, "layer '{}': label smoothing {} is not in [0, 1)", name, ls);
  }
  const char* type() const override { return "softmax_cross_entropy"; }
  int num_inputs() const override { return 2; }
  bool input_differentiable(int i) const override { return i == 0; }
  bool backward_reads_input(int i) const override { return i == 1; }  // the labels; the softmax is saved
  bool backward_reads_output() const override { return false; }
  DType output_dtype(DType) const override { return DType::kF32; }  // the loss (probs, losses saved in f32)

 protected:
  std::vector<Shape> setup_impl(SetupContext& ctx) override {
    const Shape& logits = ctx.input(0);
    const Shape& labels = ctx.input(1);
    TG_CHECK(logits.rank() == 2, "layer '{}': logits must be (N, K), got {}", name(), logits.str());
    TG_CHECK(labels.rank() == 1 && labels[0] == logits[0], "layer '{}': labels {} do not match logits {}", name(),
             labels.str(), logits.str());
    ctx.saved("softmax", logits);           // (N, K)
    ctx.saved("losses", Shape{logits[0]});  // (N)
    return {Shape{1}};
  }
  void forward_impl(LayerIO& io) override {
    Backend& be = *io.backend;
    be.softmax_xent_forward(io.in[0], io.in[1], label_smoothing_, io.saved[0], io.saved[1]);
    const float inv_n = static_cast<float>(1.0 / static_cast<double>(io.in[0].shape()[0]));
    be.reduce_into(Reduction::kSum, &io.saved[1], &inv_n, 1, io.out[0]);
  }
  void backward_impl(LayerIO& io) override {
    if (!io.din[0]) return;
    const float scale = io.loss_grad / static_cast<float>(io.in[0].shape()[0]);
    io.backend->softmax_xent_backward(io.saved[0], io.in[1], label_smoothing_, scale, io.din[0]);
  }

 private:
  float label_smoothing_;
};
}  // namespace

LayerPtr softmax_cross_entropy(const std::string& name, float label_smoothing) {
  return std::make_unique<SoftmaxXentLayer>(name, label_smoothing);
}

}  // namespace tg

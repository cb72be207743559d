// Dropout (inverted, TF's tf.nn.dropout): in training keep each element with probability keep_prob and
// scale it by 1/keep_prob; the mask comes from Philox keyed by the worker, the step and the layer, so a
// run is reproducible. Inference is the identity.
#include "terngrad/nn/layers.h"

namespace tg {
namespace {
class DropoutLayer final : public Layer {
 public:
  DropoutLayer(const std::string& name, float keep_prob) : Layer(name), keep_prob_(keep_prob) {
    TG_CHECK(keep_prob > 0.f && keep_prob <= 1.f, "layer '{}': --dropout_keep_prob {} is not in (0, 1]", name,
             keep_prob);
  }
  const char* type() const override { return "dropout"; }
  bool recomputable() const override { return true; }
  bool backward_reads_input(int /*i*/) const override { return false; }  // dx = dy * mask / keep_prob
  bool backward_reads_output() const override { return false; }
  bool may_overwrite_input(int /*i*/) const override { return true; }

 protected:
  std::vector<Shape> setup_impl(SetupContext& ctx) override {
    ctx.saved("mask", Shape{ctx.input(0).numel()}, DType::kU8);  // (numel) 1 = kept
    return {ctx.input(0)};
  }
  void forward_impl(LayerIO& io) override {
    if (io.training && keep_prob_ < 1.f) {
      io.backend->dropout_forward(io.in[0], io.out[0], io.saved[0], keep_prob_, io.key, io.step, io.layer_id);
    } else if (io.out[0].raw() != io.in[0].raw()) {  // else in place: nothing to do
      io.backend->copy(io.out[0], io.in[0]);
    }
    trained_ = io.training && keep_prob_ < 1.f;
  }
  // The forward again: the same mask (Philox of the same key, step and layer), the same bits.
  void recompute_impl(LayerIO& io) override { forward_impl(io); }
  void backward_impl(LayerIO& io) override {
    if (!io.din[0]) return;
    if (trained_) {
      io.backend->dropout_backward(io.dout[0], io.saved[0], keep_prob_, io.din[0]);
    } else {
      io.backend->copy(io.din[0], io.dout[0]);
    }
  }

 private:
  float keep_prob_;
  bool trained_ = false;
};
}  // namespace

LayerPtr dropout(const std::string& name, float keep_prob) { return std::make_unique<DropoutLayer>(name, keep_prob); }

}  // namespace tg

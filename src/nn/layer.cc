// Layer base: declaration bookkeeping (SetupContext) and the shape checks around every forward/backward.
#include "terngrad/nn/layer.h"

namespace tg {

int SetupContext::param(const std::string& local_name, const Shape& shape, const Initializer& init,
                        float weight_decay) {
  params_.push_back({layer_name_ + "/" + local_name, shape, init, weight_decay});
  return static_cast<int>(params_.size()) - 1;
}

int SetupContext::state(const std::string& local_name, const Shape& shape, float init_value) {
  states_.push_back({layer_name_ + "/" + local_name, shape, init_value});
  return static_cast<int>(states_.size()) - 1;
}

int SetupContext::saved(const std::string& local_name, const Shape& shape, DType dtype) {
  saved_.push_back({layer_name_ + "/" + local_name, shape, dtype});
  return static_cast<int>(saved_.size()) - 1;
}

std::vector<Shape> Layer::setup(SetupContext& ctx) {
  const int n = static_cast<int>(ctx.inputs().size());
  if (num_inputs() >= 0) {
    TG_CHECK(n == num_inputs(), "layer '{}' ({}) takes {} input(s), got {}", name_, type(), num_inputs(), n);
  } else {
    TG_CHECK(n >= 1, "layer '{}' ({}) needs at least one input", name_, type());
  }
  in_shapes_ = ctx.inputs();
  out_shapes_ = setup_impl(ctx);
  TG_CHECK(out_shapes_.size() == 1, "layer '{}' must produce exactly one output", name_);
  for (const Shape& s : out_shapes_)
    for (int i = 0; i < s.rank(); ++i)
      TG_CHECK(s[i] > 0, "layer '{}' ({}): output shape {} has an empty dimension (inputs {})", name_, type(), s.str(),
               in_shapes_.empty() ? "" : in_shapes_[0].str());
  param_shapes_.clear();
  state_shapes_.clear();
  saved_shapes_.clear();
  for (const auto& p : ctx.params()) param_shapes_.push_back(p.shape);
  for (const auto& s : ctx.states()) state_shapes_.push_back(s.shape);
  for (const auto& s : ctx.saveds()) saved_shapes_.push_back(s.shape);
  return out_shapes_;
}

// Parameter i's shape as io hands it over: a filter in the filter layout (LayerIO::filter_ohwi) is (out_c, KH, KW,
// C/g) for (KH, KW, C/g, out_c), its gradient too.
Shape Layer::param_shape(const LayerIO& io, size_t i) const {
  const Shape& s = param_shapes_[i];
  if (io.filter_ohwi && param_is_filter(static_cast<int>(i)) && s.rank() == 4) return Shape{s[3], s[0], s[1], s[2]};
  return s;
}

void Layer::check_io(const LayerIO& io, bool backward) const {
  TG_CHECK(io.backend != nullptr, "layer '{}' run without a backend", name_);
  TG_CHECK(io.in.size() == in_shapes_.size() && io.out.size() == out_shapes_.size(),
           "layer '{}' run with {} inputs / {} outputs, set up for {} / {}", name_, io.in.size(), io.out.size(),
           in_shapes_.size(), out_shapes_.size());
  for (size_t i = 0; i < in_shapes_.size(); ++i)
    TG_CHECK(io.in[i].shape() == in_shapes_[i], "layer '{}': input {} has shape {}, expected {}", name_, i,
             io.in[i].shape().str(), in_shapes_[i].str());
  for (size_t i = 0; i < out_shapes_.size(); ++i)
    TG_CHECK(io.out[i].shape() == out_shapes_[i], "layer '{}': output {} has shape {}, expected {}", name_, i,
             io.out[i].shape().str(), out_shapes_[i].str());
  TG_CHECK(io.params.size() == param_shapes_.size() && io.state.size() == state_shapes_.size() &&
               io.saved.size() == saved_shapes_.size(),
           "layer '{}' run with the wrong number of parameter/state/saved tensors", name_);
  for (size_t i = 0; i < param_shapes_.size(); ++i)
    TG_CHECK(io.params[i].shape() == param_shape(io, i), "layer '{}': parameter {} has shape {}, expected {}", name_, i,
             io.params[i].shape().str(), param_shape(io, i).str());
  if (backward) {
    TG_CHECK(io.din.size() == in_shapes_.size() && io.dout.size() == out_shapes_.size(),
             "layer '{}' backward with the wrong number of gradient tensors", name_);
    TG_CHECK(io.dparams.size() == param_shapes_.size(), "layer '{}' backward without parameter gradients", name_);
    for (size_t i = 0; i < in_shapes_.size(); ++i)
      TG_CHECK(!io.din[i] || io.din[i].shape() == in_shapes_[i], "layer '{}': input gradient {} has shape {}", name_, i,
               io.din[i].shape().str());
    for (size_t i = 0; i < param_shapes_.size(); ++i)
      TG_CHECK(io.dparams[i].shape() == param_shape(io, i), "layer '{}': parameter gradient {} has shape {}", name_, i,
               io.dparams[i].shape().str());
  }
}

void Layer::forward(LayerIO& io) {
  check_io(io, false);
  forward_impl(io);
}

void Layer::backward(LayerIO& io) {
  check_io(io, true);
  backward_impl(io);
}

void Layer::recompute(LayerIO& io) {
  TG_CHECK(recomputable(), "layer '{}' ({}) cannot recompute its output", name_, type());
  check_io(io, false);
  recompute_impl(io);
}

void Layer::recompute_impl(LayerIO& /*io*/) { TG_THROW("layer '{}' ({}) has no recompute", name_, type()); }

}  // namespace tg

// Net: DAG bookkeeping, shape inference and allocation, forward/backward execution with fan-out gradient
// accumulation, weight decay, mixed precision (compute dtype, half weight copies, gradient unscaling);
// ParameterStore initialisation.
#include "terngrad/nn/net.h"

#include <cmath>

namespace tg {

// ---- ParameterStore -------------------------------------------------------------------------------------------
ParameterStore::ParameterStore(const std::vector<ParamSpec>& params, const std::vector<StateSpec>& states,
                               Backend& backend)
    : backend_(backend), param_specs_(params), state_specs_(states) {
  for (const auto& p : param_specs_) params_.add(p.name, p.shape);
  for (const auto& s : state_specs_) state_.add(s.name, s.shape);
  params_.allocate(backend.allocator());
  state_.allocate(backend.allocator());
  // Zeroed padding: a checksum over a whole slab then compares replicas.
  backend.zero(params_.flat_bytes());
  backend.zero(state_.flat_bytes());
}

void ParameterStore::initialize(uint64_t seed) {
  // Draw on the host (the bits do not depend on the device), then copy.
  for (int i = 0; i < params_.size(); ++i) {
    const ParamSpec& spec = param_specs_[i];
    Buffer host(host_allocator(), static_cast<size_t>(spec.shape.numel()) * sizeof(float));
    Tensor h(host.data(), spec.shape, DType::kF32, Device::cpu());
    initialize_host(spec.init, h, seed, static_cast<uint32_t>(i));
    backend_.copy(params_.view(i), h);
  }
  for (int i = 0; i < state_.size(); ++i) backend_.fill(state_.view(i), state_specs_[i].init_value);
}

int64_t ParameterStore::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : param_specs_) n += p.shape.numel();
  return n;
}

// ---- building ---------------------------------------------------------------------------------------------------
void Net::set_input_shape(int64_t height, int64_t width, int64_t channels) {
  TG_CHECK(tensors_.empty(), "set_input_shape must come before any layer");
  TG_CHECK(height > 0 && width > 0 && channels > 0, "input shape {}x{}x{} must be positive", height, width, channels);
  input_shape_ = Shape{height, width, channels};
  TensorInfo images, labels;
  images.name = "images";
  labels.name = "labels";
  labels.dtype = DType::kI32;
  tensors_.push_back(images);
  tensors_.push_back(labels);
  tensor_ids_["images"] = 0;
  tensor_ids_["labels"] = 1;
}

int Net::tensor_id(const std::string& name) const {
  auto it = tensor_ids_.find(name);
  if (it == tensor_ids_.end()) {
    std::string known;
    for (const auto& t : tensors_) known += (known.empty() ? "" : ", ") + t.name;
    TG_THROW("no tensor named '{}' in the net (known: {})", name, known);
  }
  return it->second;
}

const std::string& Net::add(LayerPtr layer, const std::vector<std::string>& inputs) {
  TG_CHECK(!tensors_.empty(), "set_input_shape must come before layer '{}'", layer->name());
  TG_CHECK(backend_ == nullptr, "cannot add layer '{}' after setup", layer->name());
  TG_CHECK(tensor_ids_.count(layer->name()) == 0, "duplicate layer name '{}'", layer->name());
  Node node;
  for (const auto& in : inputs) node.inputs.push_back(tensor_id(in));
  const int node_index = static_cast<int>(nodes_.size());
  for (int t : node.inputs) tensors_[t].consumers.push_back(node_index);
  TensorInfo out;
  out.name = layer->name();
  out.producer = node_index;
  node.output = static_cast<int>(tensors_.size());
  tensor_ids_[out.name] = node.output;
  tensors_.push_back(out);
  node.layer = std::move(layer);
  nodes_.push_back(std::move(node));
  return tensors_.back().name;
}

const std::string& Net::add(LayerPtr layer) {
  TG_CHECK(!nodes_.empty(), "layer '{}' has no previous layer to read; name its inputs", layer->name());
  std::string prev = tensors_[nodes_.back().output].name;
  return add(std::move(layer), {prev});
}

// ---- setup ------------------------------------------------------------------------------------------------------
void Net::set_compute_dtype(DType t) {
  TG_CHECK(backend_ == nullptr, "set_compute_dtype must come before setup");
  TG_CHECK(is_compute_dtype(t), "compute dtype {} is not one of f32, f16, bf16", dtype_name(t));
  compute_ = t;
}

void Net::plan(Backend& backend, int64_t batch) {
  TG_CHECK(backend_ == nullptr, "Net::plan/setup called twice");
  TG_CHECK(batch > 0, "batch size {} must be positive", batch);
  TG_CHECK(!nodes_.empty(), "the net has no layers");
  TG_CHECK(!loss_.empty(), "the net has no loss");
  TG_CHECK(backend.supports_compute(compute_), "{} compute on {}: {}", dtype_name(compute_), backend.name(),
           backend.why_not(compute_));
  tensors_[0].dtype = compute_;  // the images, cast from the f32 batch
  tensors_[0].shape = Shape{batch, input_shape_[0], input_shape_[1], input_shape_[2]};
  tensors_[1].shape = Shape{batch};
  infer_shapes(backend);
  for (const auto& node : nodes_)
    for (const auto& p : node.params) grads_.add(p.name, p.shape);
  images_f32_ = compute_ != DType::kF32 ? precision_.add("images/f32", tensors_[0].shape) : -1;
  found_ = precision_.add("gradients/found_inf_or_nan", Shape{1}, DType::kI32);
  losses_.add("losses", Shape{3});
  plan_memory(tensors_needing_gradients());
  backend_ = &backend;
  batch_ = batch;
  loss_node_ = tensors_[tensor_id(loss_)].producer;
  for (const auto& a : aux_losses_) {
    aux_nodes_.push_back(tensors_[tensor_id(a.tensor)].producer);
    aux_weights_.push_back(a.weight);
  }
  build_report();
}

void Net::setup(Backend& backend, int64_t batch) {
  TG_CHECK(!set_up_, "Net::setup called twice");
  if (backend_ == nullptr) plan(backend, batch);
  TG_CHECK(backend_ == &backend && batch_ == batch, "Net::setup({}, batch {}) after plan({}, batch {})", backend.name(),
           batch, backend_->name(), batch_);
  allocate(backend);
  if (!arena_) arena_ = std::make_shared<StepArena>(backend.allocator());
  TG_CHECK(arena_->device() == backend.device(), "the shared arena is on {}, the net on {}", arena_->device().str(),
           backend.device().str());
  arena_->require(arena_bytes_);
  set_up_ = true;
}

// Shapes, parameters, state and saved tensors, layer by layer.
void Net::infer_shapes(Backend& backend) {
  for (auto& node : nodes_) {
    std::vector<Shape> in_shapes;
    for (int t : node.inputs) in_shapes.push_back(tensors_[t].shape);
    SetupContext ctx(backend, node.layer->name(), in_shapes);
    std::vector<Shape> outs = node.layer->setup(ctx);
    tensors_[node.output].shape = outs[0];
    tensors_[node.output].dtype = node.layer->output_dtype(compute_);
    node.params = ctx.params();
    node.half_slot.assign(node.params.size(), -1);
    if (compute_ != DType::kF32 && node.layer->params_in_compute_dtype())
      for (size_t p = 0; p < node.params.size(); ++p) {
        node.half_slot[p] = half_params_.add(node.params[p].name, node.params[p].shape, compute_);
        half_grads_.add(node.params[p].name, node.params[p].shape, compute_);
      }
    node.states = ctx.states();
    node.saved_specs = ctx.saveds();
  }
}

// Which tensors need a gradient: losses, and anything read differentiably by a node whose output does.
std::vector<bool> Net::tensors_needing_gradients() const {
  std::vector<bool> needs(tensors_.size(), false);
  needs[tensor_id(loss_)] = true;
  for (const auto& a : aux_losses_) needs[tensor_id(a.tensor)] = true;
  for (int i = static_cast<int>(nodes_.size()) - 1; i >= 0; --i) {
    const Node& node = nodes_[i];
    if (!needs[node.output]) continue;
    for (size_t k = 0; k < node.inputs.size(); ++k)
      if (node.layer->input_differentiable(static_cast<int>(k)) && tensors_[node.inputs[k]].producer >= 0)
        needs[node.inputs[k]] = true;
  }
  return needs;
}

// One allocation per slab the net owns; the arena is reserved (setup) and taken at bind(). Parameter gradients
// start at zero.
void Net::allocate(Backend& backend) {
  losses_.allocate(backend.allocator());
  backend.zero(losses_.flat_bytes());
  losses_host_ = Buffer(backend.staging_allocator(), 3 * sizeof(float));
  grads_.allocate(backend.allocator());
  half_params_.allocate(backend.allocator());
  half_grads_.allocate(backend.allocator());
  precision_.allocate(backend.allocator());
  backend.zero(grads_.flat_bytes());
  backend.zero(precision_.flat_bytes());
  backend.zero(half_params_.flat_bytes());
  backend.zero(half_grads_.flat_bytes());
}

std::vector<ParamSpec> Net::param_specs() const {
  TG_CHECK(backend_ != nullptr, "param_specs() needs plan() or setup() first");
  std::vector<ParamSpec> all;
  for (const auto& node : nodes_) all.insert(all.end(), node.params.begin(), node.params.end());
  return all;
}

std::vector<StateSpec> Net::state_specs() const {
  TG_CHECK(backend_ != nullptr, "state_specs() needs plan() or setup() first");
  std::vector<StateSpec> all;
  for (const auto& node : nodes_) all.insert(all.end(), node.states.begin(), node.states.end());
  return all;
}

void Net::bind(ParameterStore& store) {
  TG_CHECK(set_up_, "bind() needs setup() first");
  store_ = &store;
  if (!bound_) {
    const bool first = !arena_->allocated();
    arena_base_ = static_cast<char*>(arena_->data());
    // Touched at setup, not in the first step (the first net to take a shared arena zeroes all of it).
    if (first && arena_->bytes() > 0)
      backend_->zero(Tensor(arena_base_, Shape{static_cast<int64_t>(arena_->bytes())}, DType::kU8, arena_->device()));
    build_views();
    bound_ = true;
  }
  decayed_.clear();
  cast_halves_.clear();
  cast_masters_.clear();
  cast_rows_.clear();
  const bool ohwi = filter_ohwi_ < 0 ? backend_->conv2d_filter_ohwi() : filter_ohwi_ == 1;
  decayed_params_.clear();
  decay_weights_.clear();
  for (auto& node : nodes_) {
    node.io.params.clear();
    node.io.state.clear();
    node.io.filter_ohwi = false;
    node.decayed.clear();
    node.unscale.clear();
    node.unscale_decayed.clear();
    for (const auto& p : node.params) {
      Tensor v = store.params().view(p.name);
      TG_CHECK(v.shape() == p.shape, "parameter '{}' has shape {} in the store, {} in the net", p.name, v.shape().str(),
               p.shape.str());
      const int index = static_cast<int>(node.io.params.size());
      const int half = node.half_slot[index];
      Tensor compute = half >= 0 ? half_params_.view(half) : v;
      bool transposed = false;
      if (half >= 0) {
        // A filter (KH, KW, C/g, out_c) transposed in the cast to (out_c, KH, KW, C/g) where asked.
        // Its gradient likewise, transposed back by the unscale (backward).
        transposed = ohwi && node.layer->param_is_filter(index) && p.shape.rank() == 4;
        const Shape ohwi_shape = transposed ? Shape{p.shape[3], p.shape[0], p.shape[1], p.shape[2]} : p.shape;
        compute = compute.reshaped(ohwi_shape);
        node.io.dparams[static_cast<size_t>(index)] = half_grads_.view(half).reshaped(ohwi_shape);
        node.io.filter_ohwi = node.io.filter_ohwi || transposed;
        cast_halves_.push_back(compute);
        cast_masters_.push_back(v);
        cast_rows_.push_back(transposed ? p.shape.numel() / p.shape[3] : 0);
      }
      node.io.params.push_back(compute);
      if (p.weight_decay > 0.f) {
        node.decayed.push_back(static_cast<int>(decayed_.size()));
        decayed_.push_back(
            {v, grads_.view(p.name), p.weight_decay, node.first_param + static_cast<int>(node.io.params.size()) - 1});
        decayed_params_.push_back(v);
        decay_weights_.push_back(0.5f * p.weight_decay);
      }
      // Its gradient's unscale (backward, when checked): a filter-layout one goes back to ours in the same pass, its
      // weight decay with it when backward applies it.
      node.unscale.push_back({node.io.dparams[static_cast<size_t>(index)], grads_.view(node.first_param + index),
                              Tensor(), 0.f, transposed ? p.shape[3] : 0});
      node.unscale_decayed.push_back(node.unscale.back());
      if (p.weight_decay > 0.f)
        node.unscale_decayed.back().decayed = v, node.unscale_decayed.back().decay = p.weight_decay;
    }
    for (const auto& s : node.states) node.io.state.push_back(store.state().view(s.name));
  }
}

Tensor Net::tensor(const std::string& name) const {
  TG_CHECK(bound_, "tensor('{}') needs bind() first", name);
  const int t = tensor_id(name);
  TG_CHECK(tensors_[t].kept, "tensor '{}' is not kept after a step: its memory is reused (Net::keep it before setup)",
           name);
  return value_view(t);
}

Shape Net::shape(const std::string& name) const {
  TG_CHECK(backend_ != nullptr, "shape('{}') needs plan() or setup() first", name);
  return tensors_[tensor_id(name)].shape;
}

// ---- running ----------------------------------------------------------------------------------------------------
void Net::run_forward(const Tensor& images, const Tensor& labels, bool training, uint32_t step, PhiloxKey key) {
  TG_CHECK(store_ != nullptr, "Net::forward before bind()");
  Backend& be = *backend_;
  if (poison_) poison_arena();
  const Tensor in_images = value_view(0), in_labels = value_view(1);
  TG_CHECK(images.shape() == in_images.shape(), "images have shape {}, the net expects {}", images.shape().str(),
           in_images.shape().str());
  TG_CHECK(labels.shape() == in_labels.shape() && labels.dtype() == DType::kI32, "labels are {}, the net expects i32{}",
           labels.str(), in_labels.shape().str());
  if (images_f32_ >= 0 && images.device() == be.device() && !be.is_host_memory(images)) {
    be.cast(in_images, images);   // mixed precision, the batch already on the device: one cast
  } else if (images_f32_ >= 0) {  // from the host: the f32 batch, then one cast
    be.copy(precision_.view(images_f32_), images);
    be.cast(in_images, precision_.view(images_f32_));
  } else {
    be.copy(in_images, images);
  }
  be.copy(in_labels, labels);
  // The per-step half copy of the weights: one call (a GPU casts up to 64 tensors per launch).
  // (Filters transposed in the same pass where the backend reads them so: cast_rows_.)
  be.cast_many(cast_halves_.data(), cast_masters_.data(), static_cast<int>(cast_halves_.size()), cast_rows_.data());
  const bool timed = timing_layers();
  for (auto& node : nodes_) {
    node.io.training = training;
    node.io.step = step;
    node.io.key = key;
    const size_t i = static_cast<size_t>(&node - nodes_.data());
    if (!relu_runs_in_previous(i)) {  // else the previous layer wrote this ReLU's output (LayerIO::relu_fused)
      const auto begin = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
      node.layer->forward(node.io);
      if (timed) record_layer(node, "layer_forward", begin);
    }
    poison_dead(forward_slot(static_cast<int>(i)));
  }
  // The step's losses on the device, then on their way to the host (read when asked: losses()).
  const Tensor l = losses_.view(0);
  be.copy(l.slice0(0, 1), value_view(nodes_[loss_node_].output));
  be.reduce_into(Reduction::kSum, aux_tensors_.data(), aux_weights_.data(), static_cast<int>(aux_tensors_.size()),
                 l.slice0(1, 2));
  be.reduce_into(Reduction::kSumSquares, decayed_params_.data(), decay_weights_.data(),
                 static_cast<int>(decayed_params_.size()), l.slice0(2, 3));
  losses_ticket_ = be.download_async(Tensor(losses_host_.data(), Shape{3}, DType::kF32, Device::cpu()), l);
  losses_step_ = step;
  forward_was_training_ = training;
}

float Net::forward(const Tensor& images, const Tensor& labels, bool training, uint32_t step, PhiloxKey key) {
  run_forward(images, labels, training, step, key);
  return losses().total();
}

Net::Losses Net::losses() const {
  Losses out;
  if (losses_ticket_ == 0) return out;  // no forward yet
  backend_->wait_transfer(losses_ticket_);
  const auto* v = static_cast<const float*>(losses_host_.data());
  out.cross_entropy = v[0], out.aux = v[1], out.regularization = v[2];
  // fp16: an activation overflowing in the forward is dynamic loss scaling's to handle (the step's gradients
  // are flagged and the step skipped; a persisting overflow collapses the scale and stops the run).
  TG_CHECK(std::isfinite(out.total()) || compute_ == DType::kF16,
           "loss is not finite at step {}: cross-entropy {}, regularization {}", losses_step_, out.cross_entropy,
           out.regularization);
  return out;
}

void Net::backward(GradientListener* listener, float loss_scale) {
  TG_CHECK(forward_was_training_, "Net::backward needs a training-mode forward first");
  TG_CHECK(std::isfinite(loss_scale) && loss_scale > 0.f, "loss scale {} must be positive and finite", loss_scale);
  Backend& be = *backend_;
  // Half gradients (or a loss scale) are converted to fp32 into grads_ and checked for Inf/NaN, layer by layer.
  checked_ = compute_ != DType::kF32 || loss_scale != 1.f;
  const Tensor found = shared_found_ ? shared_found_ : precision_.view(found_);
  if (checked_ && !shared_found_) be.zero(found);
  // dloss of each loss: on the device for whoever reads it, and as a host value for the loss layer.
  auto loss_grad = [&](const Node& n) { return buffer_view(tensors_[n.output].grad, Shape{1}, DType::kF32); };
  be.fill(loss_grad(nodes_[loss_node_]), loss_scale);
  nodes_[loss_node_].io.loss_grad = loss_scale;
  for (size_t k = 0; k < aux_losses_.size(); ++k) {
    Node& n = nodes_[aux_nodes_[k]];
    be.fill(loss_grad(n), aux_losses_[k].weight * loss_scale);
    n.io.loss_grad = aux_losses_[k].weight * loss_scale;
  }
  const bool timed = timing_layers();
  for (int i = static_cast<int>(nodes_.size()) - 1; i >= 0; --i) {
    Node& node = nodes_[i];
    const TensorInfo& out = tensors_[node.output];
    const auto begin = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
    if (out.grad >= 0) {  // else nothing downstream needs this layer's gradient
      for (int r : node.recompute_first) nodes_[r].layer->recompute(nodes_[r].io);
      // A ReLU fused into the previous layer runs nothing: that layer's backward takes this gradient.
      if (!relu_runs_in_previous(static_cast<size_t>(i))) node.layer->backward(node.io);
      // Fan-out: the part this layer wrote added to the gradient an earlier-run (later) reader began.
      for (const auto& [tensor, part] : node.accumulate) {
        const TensorInfo& t = tensors_[tensor];
        const Tensor sum = buffer_view(t.grad, t.shape, t.dtype);
        be.add(sum, buffer_view(part, t.shape, t.dtype), sum);
      }
    }
    // d(wd * |w|^2 / 2)/dw = wd * w, right after the layer so its gradients are final now: with the unscale (one
    // call for the layer's gradients, a GPU's one launch) or on its own.
    if (checked_) {
      const std::vector<UnscaleItem>& items = backward_decays_ ? node.unscale_decayed : node.unscale;
      be.unscale_and_check_many(items.data(), static_cast<int>(items.size()), 1.f / loss_scale, found);
    } else if (backward_decays_) {
      for (int k : node.decayed) be.axpy(decayed_[k].weight_decay, decayed_[k].param, decayed_[k].grad);
    }
    if (timed) record_layer(node, "layer_backward", begin);
    poison_dead(backward_slot(i));
    if (listener) listener->gradients_ready(node.first_param);
  }
}

void Net::record_layer(const Node& node, const char* category, std::chrono::steady_clock::time_point begin) {
  if (!backend_->device().is_cpu()) backend_->synchronize();
  // The layer's name outlives the timeline's write (the trainer writes it while its nets exist).
  layer_timeline_->record(layer_track_, node.layer->name().c_str(), begin, std::chrono::steady_clock::now(), -1, "arg",
                          category);
}

WeightDecayTerms Net::weight_decay_terms() const {
  TG_CHECK(store_ != nullptr, "weight_decay_terms() needs bind() first");
  WeightDecayTerms t;
  const size_t n = static_cast<size_t>(grads_.size());
  t.params.resize(n);
  t.coefficients.assign(n, 0.f);
  for (const Decayed& d : decayed_) {
    TG_CHECK(d.index >= 0 && static_cast<size_t>(d.index) < n &&
                 static_cast<const char*>(grads_.data()) + grads_.entry(d.index).offset == d.grad.raw(),
             "net: weight-decayed parameter {} is not gradient {} of {}", d.index, d.index, n);
    t.params[static_cast<size_t>(d.index)] = d.param;
    t.coefficients[static_cast<size_t>(d.index)] = d.weight_decay;
  }
  return t;
}

int Net::filters_transposed() const {
  int n = 0;
  for (int64_t rows : cast_rows_) n += rows > 0 ? 1 : 0;
  return n;
}

int Net::fused_relus() const {
  int n = 0;
  for (const auto& node : nodes_) n += node.io.relu_fused ? 1 : 0;
  return n;
}

bool Net::overflowed() const {
  if (!checked_) return false;
  int32_t flag = 0;
  backend_->copy(Tensor(&flag, Shape{1}, DType::kI32, Device::cpu()),
                 shared_found_ ? shared_found_ : precision_.view(found_));
  return flag != 0;
}

void Net::share_overflow_flag(const Tensor& flag) {
  TG_CHECK(backend_ != nullptr, "share_overflow_flag() needs setup() first");
  TG_CHECK(flag.defined() && flag.dtype() == DType::kI32 && flag.numel() == 1 && flag.device() == backend_->device(),
           "share_overflow_flag: {} must be i32 (1) on {}", flag.str(), backend_->device().str());
  shared_found_ = flag;
}

std::vector<Net::LayerSummary> Net::summary() const {
  std::vector<LayerSummary> rows;
  for (const auto& node : nodes_) {
    int64_t n = 0;
    for (const auto& p : node.params) n += p.shape.numel();
    rows.push_back({node.layer->name(), node.layer->type(), tensors_[node.output].shape, n});
  }
  return rows;
}

std::vector<Net::GraphNode> Net::graph() const {
  TG_CHECK(backend_ != nullptr, "Net::graph needs setup first");
  std::vector<GraphNode> nodes;
  for (const auto& node : nodes_) {
    GraphNode g{node.layer.get(), {}, tensors_[node.output].name, {}, {}};
    for (int t : node.inputs) g.inputs.push_back(tensors_[t].name);
    for (const auto& p : node.params) g.params.push_back(p.name);
    for (const auto& s : node.states) g.states.push_back(s.name);
    nodes.push_back(std::move(g));
  }
  return nodes;
}

}  // namespace tg

// Net's memory plan (memory_plan.h): which step buffers exist, when each is live, which outputs are written over
// their input and which are recomputed; then the arena, the layers' views into it and the memory report.
//
// Slots: node i's forward is slot i, its backward slot 2N-1-i (N nodes); the losses' gradients are filled at
// slot N, just before the last node's backward. An activation is live from its producer's forward to its last use:
// a forward reading it, a backward that reads it (Layer::backward_reads_input / backward_reads_output), the
// recomputation of a tensor computed from it, or the end of the step for a kept tensor. A recomputed tensor has two
// ranges: up to its last forward reader, and from its recomputation (just before the first backward that reads it)
// to its last backward reader. A gradient lives from the backward of its tensor's last reader (the first to run)
// to its producer's backward; a fan-out part for the one backward that writes it (it is added to the gradient at
// once); a saved tensor from its layer's forward to its layer's backward.
#include <algorithm>
#include <cstring>

#include "terngrad/nn/net.h"

namespace tg {

namespace {
// Adds range r to a sorted list of disjoint ranges, merging where they touch or overlap.
void add_range(std::vector<LiveRange>& ranges, LiveRange r) {
  ranges.push_back(r);
  std::sort(ranges.begin(), ranges.end(), [](const LiveRange& a, const LiveRange& b) { return a.begin < b.begin; });
  std::vector<LiveRange> merged;
  for (const LiveRange& x : ranges) {
    if (!merged.empty() && x.begin <= merged.back().end + 1)
      merged.back().end = std::max(merged.back().end, x.end);
    else
      merged.push_back(x);
  }
  ranges = std::move(merged);
}

size_t bytes_of(const Shape& s, DType t) { return static_cast<size_t>(s.numel()) * dtype_size(t); }
}  // namespace

void Net::set_memory_plan(MemoryPlan plan, Recompute recompute) {
  TG_CHECK(backend_ == nullptr, "set_memory_plan must come before plan/setup");
  TG_CHECK(plan != MemoryPlan::kNone || recompute == Recompute::kNone,
           "--recompute {} needs --memory_plan liveness (with none every tensor keeps its own buffer)",
           enum_name(recompute));
  plan_kind_ = plan;
  recompute_ = recompute;
}

void Net::set_fuse_relu(bool on) {
  TG_CHECK(backend_ == nullptr, "set_fuse_relu must come before plan/setup");
  fuse_relu_ = on;
}

void Net::keep(const std::string& tensor) {
  TG_CHECK(backend_ == nullptr, "keep('{}') must come before plan/setup", tensor);
  tensor_id(tensor);  // it exists
  keep_.push_back(tensor);
}

void Net::share_arena(std::shared_ptr<StepArena> arena) {
  TG_CHECK(!set_up_, "share_arena must come before setup");
  TG_CHECK(arena != nullptr, "share_arena: no arena");
  arena_ = std::move(arena);
}

int Net::add_buffer(std::string name, BufferKind kind, size_t bytes, std::vector<LiveRange> live) {
  placed_.push_back({bytes, std::move(live), 0});
  buffers_.push_back({std::move(name), kind});
  return static_cast<int>(placed_.size()) - 1;
}

void Net::plan_memory(const std::vector<bool>& needs) {
  const int n = static_cast<int>(nodes_.size());
  const int last_slot = 2 * n - 1;
  const bool liveness = plan_kind_ == MemoryPlan::kLiveness;
  const size_t nt = tensors_.size();

  // Kept tensors: read after the step.
  for (auto& t : tensors_) t.kept = !liveness;
  for (const std::string& k : keep_) tensors_[tensor_id(k)].kept = true;
  tensors_[tensor_id(loss_)].kept = true;
  if (!logits_.empty()) tensors_[tensor_id(logits_)].kept = true;
  for (const auto& a : aux_losses_) tensors_[tensor_id(a.tensor)].kept = true;

  // Uses of every tensor's values: the last forward that reads it, and the backward slots that read it.
  std::vector<int> forward_last(nt, 0);
  std::vector<std::vector<int>> backward_reads(nt);
  for (size_t t = 0; t < nt; ++t) forward_last[t] = std::max(0, tensors_[t].producer);
  for (int i = 0; i < n; ++i) {
    const Node& node = nodes_[i];
    const bool runs_backward = needs[node.output];
    for (size_t k = 0; k < node.inputs.size(); ++k) {
      const int t = node.inputs[k];
      forward_last[t] = std::max(forward_last[t], forward_slot(i));
      if (runs_backward && node.layer->backward_reads_input(static_cast<int>(k)))
        backward_reads[t].push_back(backward_slot(i));
    }
    if (runs_backward && node.layer->backward_reads_output()) backward_reads[node.output].push_back(backward_slot(i));
  }

  // Recomputation (memory_plan.h's Recompute: which outputs), when a backward reads them. Decided from the last
  // producer back, so that the reads of a recomputation are known before its inputs' own recomputation is placed: an
  // input is recomputed no later than the tensors computed from it.
  std::vector<bool> recomputed(nt, false);
  std::vector<int> recompute_slot(nt, -1);
  std::vector<std::vector<int>> recompute_reads(nt);  // slots at which a recomputation reads the tensor
  std::vector<int> recompute_reader(nt, -1);          // the node whose recomputation reads it (-1: none, or several)
  if (recompute_ != Recompute::kNone) {
    for (int i = 0; i < n; ++i) {
      const Node& node = nodes_[i];
      const TensorInfo& out = tensors_[node.output];
      if (out.kept || !node.layer->recomputable()) continue;
      if (recompute_ == Recompute::kBlocks) {  // all but the tensors several layers read: the blocks' boundaries
        std::vector<int> readers = out.consumers;
        readers.erase(std::unique(readers.begin(), readers.end()), readers.end());
        recomputed[node.output] = readers.size() == 1;
        continue;
      }
      const std::string type = node.layer->type();
      const bool bn = type == "batch_norm";
      const bool relu_over_recomputed = type == "relu" && recomputed[node.inputs[0]];
      recomputed[node.output] = bn || relu_over_recomputed;
    }
    for (int i = n - 1; i >= 0; --i) {
      const Node& node = nodes_[i];
      const int t = node.output;
      if (!recomputed[t]) continue;
      std::vector<int> reads = backward_reads[t];
      reads.insert(reads.end(), recompute_reads[t].begin(), recompute_reads[t].end());
      if (reads.empty()) {  // no backward reads it: it dies after the forward anyway
        recomputed[t] = false;
        continue;
      }
      recompute_slot[t] = *std::min_element(reads.begin(), reads.end());
      for (int in : node.inputs) {
        recompute_reads[in].push_back(recompute_slot[t]);
        recompute_reader[in] = recompute_reader[in] == -1 ? i : -2;
      }
    }
  }

  // Each tensor's live ranges as if it had a buffer of its own.
  auto ranges_of = [&](int t) {
    const TensorInfo& info = tensors_[t];
    const int born = std::max(0, info.producer);
    if (info.kept) return std::vector<LiveRange>{{born, last_slot}};
    std::vector<int> late = backward_reads[t];
    late.insert(late.end(), recompute_reads[t].begin(), recompute_reads[t].end());
    const int late_end = late.empty() ? -1 : *std::max_element(late.begin(), late.end());
    if (recomputed[t]) return std::vector<LiveRange>{{born, forward_last[t]}, {recompute_slot[t], late_end}};
    return std::vector<LiveRange>{{born, std::max(forward_last[t], late_end)}};
  };

  // Values: one buffer per tensor, or the buffer of the input its producer writes over (in place). In place needs
  // the input's values unread after this node's forward: no later forward reader, no backward reader, kept by
  // nobody; a recomputed input only read again by this node's own recomputation (so both are recomputed at once,
  // the input first, into the same bytes).
  report_.in_place = 0;
  for (size_t t = 0; t < nt; ++t) {
    TensorInfo& info = tensors_[t];
    int over = -1;
    if (liveness && info.producer >= 0) {
      const Node& node = nodes_[info.producer];
      for (size_t k = 0; k < node.inputs.size() && over < 0; ++k) {
        const int in = node.inputs[k];
        const TensorInfo& x = tensors_[in];
        if (!node.layer->may_overwrite_input(static_cast<int>(k)) || x.kept || x.dtype != info.dtype ||
            x.shape.numel() != info.shape.numel() || forward_last[in] != info.producer || !backward_reads[in].empty())
          continue;
        const bool reread = !recompute_reads[in].empty();
        if (reread && !(recomputed[t] && recomputed[in] && recompute_reader[in] == info.producer &&
                        recompute_slot[in] == recompute_slot[t]))
          continue;
        over = in;
      }
    }
    const std::vector<LiveRange> mine = ranges_of(static_cast<int>(t));
    if (over >= 0) {
      info.value = tensors_[over].value;
      for (const LiveRange& r : mine) add_range(placed_[info.value].live, r);
      ++report_.in_place;
    } else {
      info.value = add_buffer(info.name, BufferKind::kActivation, bytes_of(info.shape, info.dtype), mine);
    }
  }
  report_.recomputed =
      static_cast<int>(std::count_if(recompute_slot.begin(), recompute_slot.end(), [](int s) { return s >= 0; }));
  for (size_t t = 0; t < nt; ++t)
    if (recompute_slot[t] >= 0)
      nodes_[static_cast<size_t>(n - 1 - (recompute_slot[t] - n))].recompute_first.push_back(tensors_[t].producer);
  for (Node& node : nodes_) std::sort(node.recompute_first.begin(), node.recompute_first.end());

  // ReLU fusion (set_fuse_relu): a layer that can apply the ReLU itself (Layer::can_fuse_relu) whose output the
  // next node alone reads, a ReLU written over it in place, kept by nobody, both gradients needed. The layer's
  // forward writes the ReLU's output (the bytes the plan gave both) and its backward takes the ReLU's output
  // gradient (its own output's gradient is that buffer, live until the layer's backward); the ReLU runs nothing.
  std::vector<bool> fused_output(nt, false);  // a layer's output whose ReLU it runs
  for (int i = 0; i + 1 < n; ++i) {
    Node &node = nodes_[i], &next = nodes_[i + 1];
    const TensorInfo& out = tensors_[node.output];
    node.io.relu_fused = fuse_relu_ && liveness && node.layer->can_fuse_relu() &&
                         std::string(next.layer->type()) == "relu" && next.inputs.size() == 1 &&
                         next.inputs[0] == node.output && !out.kept && out.consumers == std::vector<int>{i + 1} &&
                         tensors_[next.output].value == out.value && needs[node.output] == needs[next.output];
    fused_output[node.output] = node.io.relu_fused;
  }

  // Gradients: the tensor's gradient, written by its last differentiable reader's backward (or filled: a loss),
  // each earlier reader's part added to it right after that reader's backward.
  for (Node& node : nodes_) {
    node.input_grad.assign(node.inputs.size(), -1);
    node.accumulate.clear();
  }
  for (size_t t = 0; t < nt; ++t) {
    TensorInfo& info = tensors_[t];
    if (!needs[t] || info.producer < 0 || fused_output[t]) continue;
    std::vector<std::pair<int, int>> edges;  // (node, input), forward order
    for (int c : info.consumers) {
      const Node& node = nodes_[c];
      if (!needs[node.output]) continue;
      for (size_t k = 0; k < node.inputs.size(); ++k)
        if (node.inputs[k] == static_cast<int>(t) && node.layer->input_differentiable(static_cast<int>(k)))
          edges.push_back({c, static_cast<int>(k)});
    }
    std::sort(edges.begin(), edges.end());
    edges.erase(std::unique(edges.begin(), edges.end()), edges.end());
    const bool is_loss = t == static_cast<size_t>(tensor_id(loss_)) ||
                         std::any_of(aux_losses_.begin(), aux_losses_.end(),
                                     [&](const AuxLoss& a) { return tensor_id(a.tensor) == static_cast<int>(t); });
    TG_CHECK(!is_loss || edges.empty(), "loss '{}' is read by another layer: a loss must be an output of the net",
             info.name);
    const int dies = backward_slot(info.producer);
    const int born = edges.empty() ? n : backward_slot(edges.back().first);
    info.grad =
        add_buffer(info.name + "/grad", BufferKind::kGradient, bytes_of(info.shape, info.dtype), {{born, dies}});
    for (size_t e = edges.size(); e-- > 0;) {
      const auto [c, k] = edges[e];
      if (e + 1 == edges.size()) {
        nodes_[c].input_grad[k] = info.grad;
        continue;
      }
      const int part =
          add_buffer(fmt::format("{}/grad@{}#{}", info.name, nodes_[c].layer->name(), k), BufferKind::kGradient,
                     bytes_of(info.shape, info.dtype), {{backward_slot(c), backward_slot(c)}});
      nodes_[c].input_grad[k] = part;
      nodes_[c].accumulate.push_back({static_cast<int>(t), part});
    }
  }

  for (int i = 0; i + 1 < n; ++i) {
    if (!nodes_[i].io.relu_fused || !needs[nodes_[i].output]) continue;
    const int relu_grad = tensors_[nodes_[i + 1].output].grad;
    tensors_[nodes_[i].output].grad = relu_grad;
    nodes_[i + 1].input_grad[0] = relu_grad;
    add_range(placed_[relu_grad].live, {backward_slot(i + 1), backward_slot(i)});
  }

  // Saved tensors: from the layer's forward to its backward.
  for (int i = 0; i < n; ++i) {
    Node& node = nodes_[i];
    node.saved.clear();
    const int until = needs[node.output] ? backward_slot(i) : forward_slot(i);
    for (const SavedSpec& s : node.saved_specs)
      node.saved.push_back(add_buffer(s.name, BufferKind::kSaved, bytes_of(s.shape, s.dtype), {{i, until}}));
  }

  arena_bytes_ = place_buffers(placed_, plan_kind_);
  dies_after_.assign(static_cast<size_t>(last_slot + 1), {});
  for (size_t b = 0; b < placed_.size(); ++b)
    for (const LiveRange& r : placed_[b].live) dies_after_[static_cast<size_t>(r.end)].push_back(static_cast<int>(b));
}

void Net::build_report() {
  MemoryReport& r = report_;
  r.arena = arena_bytes_;
  r.buffers = static_cast<int>(placed_.size());
  r.unplanned = 0;
  for (const PlannedBuffer& b : placed_) r.unplanned += align_up(b.bytes);
  // Without the in-place sharing the unplanned plan also has one buffer per in-place output.
  for (const TensorInfo& t : tensors_)
    if (t.producer >= 0 && t.value >= 0 && buffers_[t.value].name != t.name)
      r.unplanned += align_up(bytes_of(t.shape, t.dtype));
  int slot = 0;
  r.peak_live = peak_live_bytes(placed_, &slot);
  r.peak_activations = r.peak_gradients = r.peak_saved = 0;
  for (size_t b = 0; b < placed_.size(); ++b)
    for (const LiveRange& lr : placed_[b].live)
      if (lr.begin <= slot && slot <= lr.end) {
        const size_t bytes = align_up(placed_[b].bytes);
        switch (buffers_[b].kind) {
          case BufferKind::kActivation:
            r.peak_activations += bytes;
            break;
          case BufferKind::kGradient:
            r.peak_gradients += bytes;
            break;
          case BufferKind::kSaved:
            r.peak_saved += bytes;
            break;
        }
      }
  const int n = static_cast<int>(nodes_.size());
  r.peak_at = slot < n ? "forward of " + nodes_[slot].layer->name()
                       : "backward of " + nodes_[static_cast<size_t>(2 * n - 1 - slot)].layer->name();
  // The slabs' sizes once allocated (Slab rounds its total up to the alignment).
  r.parameter_gradients = align_up(grads_.bytes());
  r.half_copies = align_up(half_params_.bytes()) + align_up(half_grads_.bytes());
  r.other = align_up(precision_.bytes()) + align_up(losses_.bytes());
}

const Net::MemoryReport& Net::memory_report() const {
  TG_CHECK(backend_ != nullptr, "memory_report() needs plan() first");
  return report_;
}

Tensor Net::buffer_view(int buffer, const Shape& shape, DType dtype) const {
  return Tensor(arena_base_ + placed_[static_cast<size_t>(buffer)].offset, shape, dtype, backend_->device());
}

Tensor Net::value_view(int tensor) const {
  const TensorInfo& t = tensors_[static_cast<size_t>(tensor)];
  return buffer_view(t.value, t.shape, t.dtype);
}

// Pre-built views: a step only fills in the step, key and mode.
void Net::build_views() {
  int param_index = 0;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    Node& node = nodes_[i];
    LayerIO& io = node.io;
    io.backend = backend_;
    io.layer_id = static_cast<uint32_t>(i);
    io.in.clear(), io.out.clear(), io.din.clear(), io.dout.clear(), io.saved.clear(), io.dparams.clear();
    for (int t : node.inputs) io.in.push_back(value_view(t));
    io.out.push_back(value_view(node.output));
    for (size_t k = 0; k < node.inputs.size(); ++k) {
      const TensorInfo& t = tensors_[node.inputs[k]];
      io.din.push_back(node.input_grad[k] >= 0 ? buffer_view(node.input_grad[k], t.shape, t.dtype) : Tensor());
    }
    const TensorInfo& out = tensors_[node.output];
    io.dout.push_back(out.grad >= 0 ? buffer_view(out.grad, out.shape, out.dtype) : Tensor());
    for (size_t s = 0; s < node.saved.size(); ++s)
      io.saved.push_back(buffer_view(node.saved[s], node.saved_specs[s].shape, node.saved_specs[s].dtype));
    node.first_param = param_index;
    for (size_t p = 0; p < node.params.size(); ++p, ++param_index)
      io.dparams.push_back(node.half_slot[p] >= 0 ? half_grads_.view(node.half_slot[p]) : grads_.view(param_index));
  }
  aux_tensors_.clear();
  for (const auto& a : aux_losses_) aux_tensors_.push_back(value_view(tensor_id(a.tensor)));
}

namespace {
// NaN with every bit set: NaN read as f32, f16 or bf16, -1 as i32 (a label out of range), 255 as u8.
float all_bits_set() {
  const uint32_t all = 0xffffffffu;
  float f;
  std::memcpy(&f, &all, sizeof f);
  return f;
}
}  // namespace

void Net::poison_arena() const {
  const size_t floats = arena_bytes_ / sizeof(float);
  if (floats > 0)
    backend_->fill(Tensor(arena_base_, Shape{static_cast<int64_t>(floats)}, DType::kF32, backend_->device()),
                   all_bits_set());
}

void Net::poison_dead(int slot) const {
  if (!poison_) return;
  const float nan = all_bits_set();
  for (int b : dies_after_[static_cast<size_t>(slot)]) {
    const PlannedBuffer& p = placed_[static_cast<size_t>(b)];
    // Also at the end of a recomputed tensor's forward range: its recomputation must write the bytes again.
    const size_t floats = align_up(p.bytes) / sizeof(float);
    if (floats > 0) backend_->fill(buffer_view(b, Shape{static_cast<int64_t>(floats)}, DType::kF32), nan);
  }
}

}  // namespace tg

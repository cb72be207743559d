// Net: a DAG of layers over named tensors, executed forward in insertion (topological) order and backward
// in reverse. A tensor read by several layers gets the sum of their gradients, accumulated in backward order
// into one buffer: the last reader (the first to run its backward) writes it, each earlier reader writes a part
// that is added to it right after its backward (((p2 + p1) + p0) for three readers).
//
// Memory (memory_plan.h): every per-step buffer (activations, their gradients, the parts of a fan-out gradient,
// the tensors a layer saves for its backward) lives in one arena at an offset the plan gives it; a training step
// allocates nothing. With MemoryPlan::kLiveness (the default) a buffer's bytes are reused once its last reader
// is done: an activation lives from its producer's forward to the last forward or backward that reads it (each
// Layer says what its backward reads), a gradient from the first backward that writes it to its producer's
// backward, a part for one backward; ReLU, dropout, flatten and add write their output over an input that
// nothing reads later (in place, as PyTorch's inplace=True); with Recompute::kBnRelu batch-norm and ReLU
// outputs are dropped after the forward and computed again just before the first backward that reads them.
// MemoryPlan::kNone gives every buffer its own bytes (debugging); both give the same bits. Only the tensors
// the net keeps (the logits, the losses, keep()) hold their values after a step: tensor() refuses the others.
// Several nets that never run at once (a replica's workers) can share one arena (share_arena).
//
// Parameters and state (BN moving statistics) live in a ParameterStore the Net is bound to, so several
// workers (virtual nodes) on one device can share one store while each keeps its own gradient slab.
//
// Mixed precision (set_compute_dtype F16/BF16): activations and their gradients are in the compute dtype C
// (losses f32); conv/FC layers read a half copy of their fp32 master weights, cast once per forward, and
// write half weight gradients; backward converts every parameter gradient to fp32 into grads() with
// unscale_and_check (dividing by the loss scale, flagging Inf/NaN: overflowed()) before weight decay and before
// the listener hears of it, so the exchange, the codec and the optimizer see fp32 only. Master weights, the
// optimizer state and batch-norm parameters and statistics stay fp32 in the ParameterStore.
//
// A step waits for the device nowhere: run_forward computes the cross-entropy, the weighted auxiliary losses and
// the weight-decay term on the device (Backend::reduce_into) and starts their copy into page-locked staging memory
// (Backend::download_async); the host reads them only when asked (last_cross_entropy(), losses(): once per log
// step), waiting for that copy then (one host synchronisation, none when an earlier one covered it). A non-finite
// loss is reported when it is read, naming the step it belongs to. The loss layers' backward takes dloss as a host
// value (LayerIO::loss_grad).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "terngrad/core/slab.h"
#include "terngrad/core/timeline.h"
#include "terngrad/core/weight_decay.h"
#include "terngrad/nn/layer.h"
#include "terngrad/nn/memory_plan.h"
#include "terngrad/nn/step_arena.h"

namespace tg {

// Parameters, state and their specs: one slab each.
class ParameterStore {
 public:
  ParameterStore(const std::vector<ParamSpec>& params, const std::vector<StateSpec>& states, Backend& backend);
  // Fills every parameter from its initializer (host-side draw, copied to the device) and every state
  // tensor with its initial value.
  void initialize(uint64_t seed);

  const std::vector<ParamSpec>& param_specs() const { return param_specs_; }
  const std::vector<StateSpec>& state_specs() const { return state_specs_; }
  Slab& params() { return params_; }
  Slab& state() { return state_; }
  int64_t num_parameters() const;  // trainable elements

 private:
  Backend& backend_;
  std::vector<ParamSpec> param_specs_;
  std::vector<StateSpec> state_specs_;
  Slab params_, state_;
};

// Told during backward which parameter gradients are final, so a gradient exchange can start on them while
// backward goes on (the trainer's overlap).
class GradientListener {
 public:
  virtual ~GradientListener() = default;
  // Called after every layer's backward: parameters [first, num_params) hold their final gradient, weight
  // decay included unless the net leaves it to the listener (Net::set_backward_applies_weight_decay; backward
  // runs from the last layer down, and parameters are numbered in layer order).
  virtual void gradients_ready(int first) = 0;
};

struct AuxLoss {
  std::string tensor;  // a (1) loss tensor
  float weight;
};

class Net {
 public:
  Net() = default;
  Net(const Net&) = delete;
  Net& operator=(const Net&) = delete;

  // ---- building -------------------------------------------------------------------------------------
  // The two inputs every classifier has: images (N, H, W, C) f32 and labels (N) i32.
  void set_input_shape(int64_t height, int64_t width, int64_t channels);
  // Adds a layer reading the named tensors ("images", "labels", or earlier layer names); returns the
  // name of its output (the layer's name).
  const std::string& add(LayerPtr layer, const std::vector<std::string>& inputs);
  // Convenience: a layer reading the previous layer's output.
  const std::string& add(LayerPtr layer);
  void set_logits(const std::string& tensor) { logits_ = tensor; }
  void set_loss(const std::string& tensor) { loss_ = tensor; }
  void add_aux_loss(const std::string& tensor, float weight) { aux_losses_.push_back({tensor, weight}); }

  // ---- setup ----------------------------------------------------------------------------------------
  // The compute dtype (F32 default, F16, BF16); before setup. Whether the backend runs it is checked at setup.
  void set_compute_dtype(DType t);
  DType compute_dtype() const { return compute_; }
  // Memory (see the top of this file); before plan/setup. kNone refuses a recompute other than kNone.
  void set_memory_plan(MemoryPlan plan, Recompute recompute = Recompute::kNone);
  MemoryPlan memory_plan() const { return plan_kind_; }
  Recompute recompute() const { return recompute_; }
  // A tensor whose values the caller reads after a step (tensor()); the logits and the losses always are.
  void keep(const std::string& tensor);
  // The arena this net's step buffers live in, shared with other nets that never run at the same time as it;
  // before setup (otherwise the net makes its own).
  void share_arena(std::shared_ptr<StepArena> arena);
  // Testing: after every forward and backward slot, the bytes of each buffer whose live range just ended are
  // overwritten with NaN (all bits set), and the whole arena before each forward; a layer that reads a value
  // the plan thought dead then computes NaN.
  void set_poison_dead_buffers(bool on) { poison_ = on; }
  // Fusion (on by default; before plan/setup; with the liveness plan): a layer that can apply a ReLU to its own
  // output (batch norm) does so for the in-place ReLU that alone reads it, forward and backward, and the ReLU runs
  // nothing (fewer passes over the activation, the same bits). Off: every layer runs on its own (tests compare the
  // two). fused_relus(): how many ReLUs the plan fused.
  void set_fuse_relu(bool on);
  int fused_relus() const;
  // The layout of the convolutions' per-step half copy (mixed precision; before bind): by default the backend's
  // (Backend::conv2d_filter_ohwi(): CUDA's cast transposes each filter once a step and the convolutions skip
  // their per-call transposes); on or off to force it (tests: the same bits either way). f32 weights are the
  // masters themselves, always in their own layout.
  void set_conv_filter_ohwi(bool on) { filter_ohwi_ = on ? 1 : 0; }
  int filters_transposed() const;

  // Infers every shape for batch size `batch` and plans the step's memory, allocating nothing: the memory report
  // is then ready. Errors name the layer and the shape (e.g. a spatial size reaching 0).
  void plan(Backend& backend, int64_t batch);
  // plan() if not done yet, then allocates the parameter gradients and the rest the net owns and reserves its
  // arena (taken at bind()).
  void setup(Backend& backend, int64_t batch);
  // Parameters/state the net reads and updates; takes the arena and builds every layer's views.
  void bind(ParameterStore& store);
  std::vector<ParamSpec> param_specs() const;
  std::vector<StateSpec> state_specs() const;

  // What the net's memory costs, in bytes (after plan()).
  struct MemoryReport {
    size_t arena = 0;      // the step arena as planned (activations, their gradients, saved tensors)
    size_t unplanned = 0;  // the same buffers with no reuse and nothing in place (MemoryPlan::kNone)
    size_t peak_live = 0;  // the most bytes live in one slot: no placement can use less than this
    // Live in that slot, by kind, and where in the step it is ("backward of block3/unit_1/conv1").
    size_t peak_activations = 0, peak_gradients = 0, peak_saved = 0;
    std::string peak_at;
    size_t parameter_gradients = 0;                 // the f32 gradient slab the exchange reads
    size_t half_copies = 0;                         // mixed precision: half weights and their half gradients
    size_t other = 0;                               // the f32 staging of the images, the losses, the overflow flag
    int buffers = 0, in_place = 0, recomputed = 0;  // buffers planned, outputs written over an input, recomputed
  };
  const MemoryReport& memory_report() const;

  // ---- running --------------------------------------------------------------------------------------
  // Copies images/labels (host or device; a step passes device tensors) into the input tensors and enqueues
  // forward and the step's losses (see the top of this file); waits for nothing.
  void run_forward(const Tensor& images, const Tensor& labels, bool training, uint32_t step = 0, PhiloxKey key = {});
  // run_forward, then the total loss (cross-entropy + aux losses + weight-decay terms), waiting for it. A
  // non-finite loss is an error naming the step (in fp16 compute it is returned: the step's gradients are then
  // flagged by backward and the step skipped).
  float forward(const Tensor& images, const Tensor& labels, bool training, uint32_t step = 0, PhiloxKey key = {});
  // The last run_forward's losses, read from the device (waits for them the first time they are read).
  struct Losses {
    float cross_entropy = 0.f;   // the main loss
    float aux = 0.f;             // the sum of weight * auxiliary loss
    float regularization = 0.f;  // sum of wd * |w|^2 / 2
    float total() const { return cross_entropy + aux + regularization; }
  };
  Losses losses() const;
  // Gradients of the total loss (including wd * w) into the gradient slab; requires forward(training).
  // A listener hears, layer by layer, which gradients are final. loss_scale (fp16's dynamic loss scaling)
  // multiplies the loss before the backward; the fp32 gradients in grads() are divided by it again.
  void backward(GradientListener* listener = nullptr, float loss_scale = 1.f);
  // Weight decay: per parameter (layer order) its coefficient and the parameter (bind() first); backward adds
  // coefficient * parameter to the gradient (d(wd |w|^2 / 2)/dw) unless told not to: whoever takes that over
  // (GradientExchange::apply_weight_decay, fused into its pass over the gradients) gets the terms here.
  WeightDecayTerms weight_decay_terms() const;
  void set_backward_applies_weight_decay(bool on) { backward_decays_ = on; }
  // Whether the last backward's parameter gradients held an Inf or NaN (after unscaling; reads the device
  // flag, so it synchronizes). Always false in f32 compute without a loss scale (nothing is checked then).
  bool overflowed() const;
  // Makes backward flag Inf/NaN gradients in `flag` (i32 (1) on the net's device) instead of its own flag, which it
  // then no longer zeroes: the owner (the trainer, one flag for a replica's workers) zeroes it once per step and
  // reads it once (overflowed() then reads it too).
  void share_overflow_flag(const Tensor& flag);

  // Per-layer times (--timeline_layers): while `timeline` records a step, each layer's forward and backward is a
  // span on `track` (name: the layer's; category "layer_forward" or "layer_backward"; a backward span includes the
  // layer's fan-out sum, gradient unscaling and weight decay). On a backend whose work is queued (CUDA) the net then
  // waits for the device after each layer, so a span is that layer's device time and the recorded steps are
  // slower; on the CPU every op has finished when it returns and nothing changes. nullptr turns it off.
  void set_layer_timeline(Timeline* timeline, int track) {
    layer_timeline_ = timeline;
    layer_track_ = track;
  }

  Slab& grads() { return grads_; }  // one tensor per parameter, same names and order as params
  // A kept tensor's values (the logits, the losses, keep(); every tensor under MemoryPlan::kNone), after bind();
  // any other tensor is refused, naming keep(). shape() answers for every tensor after plan().
  Tensor tensor(const std::string& name) const;
  Shape shape(const std::string& name) const;
  const std::string& logits_name() const { return logits_; }
  float last_cross_entropy() const { return losses().cross_entropy; }
  float last_regularization() const { return losses().regularization; }
  int64_t batch() const { return batch_; }

  struct LayerSummary {
    std::string name, type;
    Shape output;
    int64_t parameters;
  };
  std::vector<LayerSummary> summary() const;
  // The graph as an exporter reads it (after setup; shapes and ops from each layer): every layer in execution
  // order with the tensors it reads and writes ("images", "labels" or a layer's name) and the ParameterStore
  // names of its parameters and state.
  struct GraphNode {
    const Layer* layer;
    std::vector<std::string> inputs;
    std::string output;
    std::vector<std::string> params, states;
  };
  std::vector<GraphNode> graph() const;

 private:
  struct Node {
    LayerPtr layer;
    std::vector<int> inputs;  // tensor ids
    int output = -1;          // tensor id
    std::vector<int> saved;   // per saved tensor: its buffer
    std::vector<SavedSpec> saved_specs;
    std::vector<ParamSpec> params;
    std::vector<StateSpec> states;
    std::vector<int> input_grad;  // per input: the buffer its backward writes that gradient into (-1: none)
    // After its backward, in this order: (tensor, part buffer): the tensor's gradient += the part (fan-out).
    std::vector<std::pair<int, int>> accumulate;
    std::vector<int> recompute_first;  // nodes whose outputs are recomputed just before this node's backward
    int first_param = 0;               // index of this node's first parameter (= parameters of earlier nodes)
    std::vector<int> decayed;          // indices into decayed_ of this node's weight-decayed parameters
    std::vector<int> half_slot;        // per parameter: its slot in half_params_ / half_grads_, -1 if f32
    // Its gradients' unscale into grads_ (a filter-layout one transposed back), as unscale_and_check_many takes
    // them: with the weight decay folded in, and without (set_backward_applies_weight_decay may change each step);
    // bind().
    std::vector<UnscaleItem> unscale_decayed, unscale;
    LayerIO io;
  };
  struct TensorInfo {
    std::string name;
    Shape shape;  // per-batch shape after setup
    DType dtype = DType::kF32;
    int producer = -1;  // node index, -1 for network inputs
    std::vector<int> consumers;
    bool kept = false;  // valid after the step (logits, losses, keep())
    int value = -1;     // its buffer (shared with the tensor it was written over, in place)
    int grad = -1;      // its gradient's buffer (-1: none needed)
  };
  // A step buffer: the plan's placement and what the report says of it.
  enum class BufferKind { kActivation, kGradient, kSaved };
  struct StepBuffer {
    std::string name;
    BufferKind kind;
  };
  // Node i is a ReLU whose forward and backward node i - 1 runs (its LayerIO::relu_fused, set by the plan).
  bool relu_runs_in_previous(size_t i) const { return i > 0 && nodes_[i - 1].io.relu_fused; }
  int tensor_id(const std::string& name) const;
  // plan()'s phases, in order (net_memory.cc).
  void infer_shapes(Backend& backend);
  std::vector<bool> tensors_needing_gradients() const;
  void plan_memory(const std::vector<bool>& needs);
  int add_buffer(std::string name, BufferKind kind, size_t bytes, std::vector<LiveRange> live);
  void build_report();
  // setup()'s and bind()'s.
  void allocate(Backend& backend);
  void build_views();
  Tensor buffer_view(int buffer, const Shape& shape, DType dtype) const;
  Tensor value_view(int tensor) const;
  void poison_dead(int slot) const;
  void poison_arena() const;
  int forward_slot(int node) const { return node; }
  int backward_slot(int node) const { return 2 * static_cast<int>(nodes_.size()) - 1 - node; }

  std::vector<Node> nodes_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, int> tensor_ids_;
  std::string logits_, loss_;
  std::vector<AuxLoss> aux_losses_;
  std::vector<std::string> keep_;
  Shape input_shape_;

  Backend* backend_ = nullptr;  // set by plan()
  bool set_up_ = false, bound_ = false;
  ParameterStore* store_ = nullptr;
  int64_t batch_ = 0;
  // The step's buffers: the plan's placements, and their names and kinds (the same order), in the arena.
  MemoryPlan plan_kind_ = MemoryPlan::kLiveness;
  Recompute recompute_ = Recompute::kNone;
  std::vector<PlannedBuffer> placed_;
  std::vector<StepBuffer> buffers_;
  std::vector<std::vector<int>> dies_after_;  // per slot: buffers whose live range ends there
  size_t arena_bytes_ = 0;
  std::shared_ptr<StepArena> arena_;
  char* arena_base_ = nullptr;  // taken at bind()
  bool poison_ = false;
  bool fuse_relu_ = true;
  int filter_ohwi_ = -1;  // -1: the backend's choice
  MemoryReport report_;
  Slab grads_;
  // Mixed precision: the compute dtype, the half copies of conv/FC parameters and their gradients (C), the
  // f32 staging of the images, and the Inf/NaN flag (i32 (1)) of the gradients' unscaling.
  DType compute_ = DType::kF32;
  Slab half_params_, half_grads_, precision_;
  // The half copies and their masters, cast at every forward in one cast_many (one launch per 64 on a GPU); bind().
  std::vector<Tensor> cast_halves_, cast_masters_;
  std::vector<int64_t> cast_rows_;    // per cast pair: rows of a transposed filter, 0 for a plain cast
  int images_f32_ = -1, found_ = -1;  // entries in precision_
  Tensor shared_found_;               // share_overflow_flag's flag (undefined: precision_'s own)
  bool checked_ = false;              // the last backward ran unscale_and_check
  struct Decayed {                    // a parameter with weight decay, as this net declared it
    Tensor param, grad;
    float weight_decay;
    int index;  // the parameter's index (layer order)
  };
  std::vector<Decayed> decayed_;  // filled by bind()
  bool backward_decays_ = true;   // set_backward_applies_weight_decay
  // The step's losses: losses_ (f32 (3) on the device: cross-entropy, weighted aux sum, regularization), their
  // staging copy on the host, the download's ticket and the step they belong to; the tables reduce_into reads.
  Slab losses_;
  Buffer losses_host_;
  uint64_t losses_ticket_ = 0;
  uint32_t losses_step_ = 0;
  std::vector<Tensor> aux_tensors_, decayed_params_;
  std::vector<float> aux_weights_, decay_weights_;
  int loss_node_ = -1;  // the node producing loss_
  std::vector<int> aux_nodes_;
  bool forward_was_training_ = false;
  Timeline* layer_timeline_ = nullptr;  // set_layer_timeline
  int layer_track_ = 0;
  // Whether this step's layers are timed; then records a span for `node` that began at `begin`.
  bool timing_layers() const { return layer_timeline_ != nullptr && layer_timeline_->recording(); }
  void record_layer(const Node& node, const char* category, std::chrono::steady_clock::time_point begin);
};

}  // namespace tg

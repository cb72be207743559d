// Layer: the unit a Net is built from. setup() infers output shapes from input shapes and declares the
// layer's parameters (trainable), state (persistent, not trained: BN moving statistics) and saved tensors
// (scratch written by forward for backward: pooling indices, dropout masks, BN batch statistics). The Net
// allocates all of them; layers never allocate. forward()/backward() are non-virtual: they check that the
// tensors they are handed have the shapes setup() promised, then call the virtual *_impl.
#pragma once

#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "terngrad/backend/backend.h"
#include "terngrad/nn/initializer.h"

namespace tg {

struct ParamSpec {
  std::string name;  // full name, "conv1/weights"
  Shape shape;
  Initializer init;
  float weight_decay = 0.f;  // L2 coefficient: loss += wd * |w|^2 / 2
};
struct StateSpec {
  std::string name;  // "conv1/BatchNorm/moving_mean"
  Shape shape;
  float init_value = 0.f;
};
struct SavedSpec {
  std::string name;
  Shape shape;
  DType dtype = DType::kF32;
};

class SetupContext {
 public:
  SetupContext(Backend& backend, std::string layer_name, std::vector<Shape> inputs)
      : backend_(backend), layer_name_(std::move(layer_name)), inputs_(std::move(inputs)) {}
  Backend& backend() const { return backend_; }
  const std::vector<Shape>& inputs() const { return inputs_; }
  const Shape& input(int i) const { return inputs_.at(i); }

  // Declarations return the index the tensor will have in LayerIO::params / state / saved.
  int param(const std::string& local_name, const Shape& shape, const Initializer& init, float weight_decay);
  int state(const std::string& local_name, const Shape& shape, float init_value);
  int saved(const std::string& local_name, const Shape& shape, DType dtype = DType::kF32);

  const std::vector<ParamSpec>& params() const { return params_; }
  const std::vector<StateSpec>& states() const { return states_; }
  const std::vector<SavedSpec>& saveds() const { return saved_; }

 private:
  Backend& backend_;
  std::string layer_name_;
  std::vector<Shape> inputs_;
  std::vector<ParamSpec> params_;
  std::vector<StateSpec> states_;
  std::vector<SavedSpec> saved_;
};

// What a layer sees when it runs. Gradient tensors that nobody needs (the input images, the labels) are
// undefined (operator bool false); layers skip computing them.
struct LayerIO {
  Backend* backend = nullptr;
  bool training = true;
  uint32_t step = 0;  // iteration, for per-step randomness (dropout)
  PhiloxKey key{};    // the worker's key, for per-worker randomness
  uint32_t layer_id = 0;
  std::vector<Tensor> in, out;    // activations
  std::vector<Tensor> din, dout;  // their gradients (din written by backward, dout read)
  std::vector<Tensor> params, dparams, state, saved;
  // The host value of dout[0] when the output is one of the net's losses (Net::backward sets it: the loss scale
  // times the loss's weight), so a loss layer's backward reads no device scalar.
  float loss_grad = 1.f;
  // The net fused the in-place ReLU that alone reads this output (Layer::can_fuse_relu; Net::set_fuse_relu): the
  // forward writes max(output, 0) into out[0] and the backward's dout[0] is the ReLU output's gradient.
  // recompute() is unaffected (the ReLU recomputes its own output).
  bool relu_fused = false;
  // params[0] and dparams[0] are a convolution filter and its gradient in the (out_c, KH, KW, C/g) layout
  // (Layer::param_is_filter; the net's per-step half copy, transposed in the cast for a backend whose
  // conv2d_filter_ohwi() is true, and its gradient, transposed back in the unscale).
  bool filter_ohwi = false;
};

// The backend op a layer runs, with every setting, as setup() built it: what an exporter (ONNX) needs to rebuild
// the layer elsewhere. std::monostate for layers whose type() says everything (relu, concat, add, flatten,
// dropout, losses).
using LayerOp = std::variant<std::monostate, ConvDesc, PoolDesc, LrnDesc, BatchNormDesc, InnerProductDesc>;

class Layer {
 public:
  explicit Layer(std::string name) : name_(std::move(name)) {}
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const std::string& name() const { return name_; }
  virtual const char* type() const = 0;
  // Number of inputs the layer takes; -1 for any number >= 1 (concat, add).
  virtual int num_inputs() const { return 1; }
  // False for inputs that never get a gradient (labels).
  virtual bool input_differentiable(int /*i*/) const { return true; }
  // Mixed precision (Net::set_compute_dtype): the dtype of the output (and of its gradient) when the net computes
  // in `compute`; losses stay f32.
  virtual DType output_dtype(DType compute) const { return compute; }
  // Whether the layer reads its parameters (and writes their gradients) in the compute dtype: the per-step half
  // copy of conv/FC weights. Other layers' parameters (batch norm's gamma, beta) stay f32.
  virtual bool params_in_compute_dtype() const { return false; }
  // Whether parameter p is a convolution filter (KH, KW, C/g, out_c) that the layer also takes in the
  // (out_c, KH, KW, C/g) layout when LayerIO::filter_ohwi says so.
  virtual bool param_is_filter(int /*p*/) const { return false; }
  // The op and its settings after setup() (see LayerOp).
  virtual LayerOp op() const { return {}; }

  // What the memory plan needs to know (memory_plan.h). What the backward reads besides dout and the saved
  // tensors: the values of input i, of the output. A layer answers false only where its backward reads nothing
  // of them on every backend (the defaults are the safe answer).
  virtual bool backward_reads_input(int /*i*/) const { return true; }
  virtual bool backward_reads_output() const { return true; }
  // Whether the forward may write its output over input i (the same element count and dtype) when nothing reads
  // that input afterwards: element-wise layers. The layer then runs with io.out[0] the same memory as io.in[i].
  virtual bool may_overwrite_input(int /*i*/) const { return false; }
  // Whether recompute() computes the output again, in the backward, from the inputs, parameters and saved tensors
  // the training forward left, with the forward's bits and without changing any state (--recompute).
  virtual bool recomputable() const { return false; }
  // Whether the layer can run a ReLU over its output itself (LayerIO::relu_fused), bit for bit the layer then
  // relu_forward, and relu_backward then its own backward, with a backward that does not read its output.
  virtual bool can_fuse_relu() const { return false; }

  std::vector<Shape> setup(SetupContext& ctx);
  void forward(LayerIO& io);
  void backward(LayerIO& io);
  void recompute(LayerIO& io);

  const std::vector<Shape>& input_shapes() const { return in_shapes_; }
  const std::vector<Shape>& output_shapes() const { return out_shapes_; }

 protected:
  virtual std::vector<Shape> setup_impl(SetupContext& ctx) = 0;
  virtual void forward_impl(LayerIO& io) = 0;
  virtual void backward_impl(LayerIO& io) = 0;
  virtual void recompute_impl(LayerIO& io);  // the layers that are recomputable()

 private:
  void check_io(const LayerIO& io, bool backward) const;
  Shape param_shape(const LayerIO& io, size_t i) const;
  std::string name_;
  std::vector<Shape> in_shapes_, out_shapes_;
  std::vector<Shape> param_shapes_, state_shapes_, saved_shapes_;
};

using LayerPtr = std::unique_ptr<Layer>;

}  // namespace tg

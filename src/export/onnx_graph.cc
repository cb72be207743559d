// The inference graph of a Net as ONNX nodes: layer translations, weight re-layout, NHWC/NCHW bookkeeping
// (conventions in onnx_graph.h).
#include "src/export/onnx_graph.h"

#include <map>
#include <set>
#include <vector>

#include "onnx.pb.h"
#include "terngrad/data/crc32c.h"
#include "terngrad/export/onnx_export.h"
#include "terngrad/nn/net.h"

#ifndef TG_VERSION
#define TG_VERSION "unknown"
#endif

namespace tg {

int64_t onnx_ir_version(int opset) {
  TG_CHECK(opset >= kMinOnnxOpset && opset <= kMaxOnnxOpset, "--opset {} is not in [{}, {}]", opset, kMinOnnxOpset,
           kMaxOnnxOpset);
  // (first opset, IR version) of ONNX releases 1.8 (opset 13) to 1.20 (opset 25, IR 13, up to opset 27).
  static const int64_t table[][2] = {{13, 7}, {15, 8}, {19, 9}, {21, 10}, {23, 11}, {24, 12}, {25, 13}};
  int64_t ir = 7;
  for (const auto& row : table)
    if (opset >= row[0]) ir = row[1];
  return ir;
}

void init_onnx_model(int opset, onnx::ModelProto* model) {
  model->set_ir_version(onnx_ir_version(opset));
  auto* op = model->add_opset_import();
  op->set_domain("");  // the standard ops
  op->set_version(opset);
  model->set_producer_name("terngrad-export");
  model->set_producer_version(TG_VERSION);
}

namespace {

// A flattened tensor whose ONNX value lists the elements in (C, H, W) order (ours: (H, W, C)).
struct ChannelsFirstOrder {
  int64_t h, w, c;
};

class OnnxGraphWriter {
 public:
  OnnxGraphWriter(const std::function<Tensor(const std::string&)>& weight, int64_t batch, onnx::GraphProto* graph)
      : weight_(weight), batch_(batch), g_(graph) {}

  void write(const Net& net) {
    const std::vector<Net::GraphNode> nodes = inference_nodes(net);
    input(net, nodes);
    for (size_t i = 0; i < nodes.size(); ++i) layer(nodes[i], nodes, i);
    outputs(net);
  }
  const OnnxGraphStats& stats() const { return stats_; }

 private:
  // ---- which layers -----------------------------------------------------------------------------------------------
  // The layers the logits depend on, in execution order.
  static std::vector<Net::GraphNode> inference_nodes(const Net& net) {
    const std::vector<Net::GraphNode> all = net.graph();
    std::set<std::string> needed = {net.logits_name()};
    std::vector<bool> keep(all.size(), false);
    for (size_t i = all.size(); i-- > 0;) {
      if (!needed.count(all[i].output)) continue;
      keep[i] = true;
      needed.insert(all[i].inputs.begin(), all[i].inputs.end());
    }
    TG_CHECK(!needed.count("labels"), "the logits '{}' depend on the labels: not an inference graph",
             net.logits_name());
    std::vector<Net::GraphNode> kept;
    for (size_t i = 0; i < all.size(); ++i)
      if (keep[i]) kept.push_back(all[i]);
    return kept;
  }

  // ---- values, nodes, initializers ---------------------------------------------------------------------------------
  void shape_of(onnx::ValueInfoProto* v, const std::string& name, std::vector<int64_t> dims) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto::FLOAT);
    auto* shape = t->mutable_shape();
    for (size_t i = 0; i < dims.size(); ++i) {
      auto* d = shape->add_dim();
      if (i == 0 && batch_ == 0)
        d->set_dim_param("batch");
      else
        d->set_dim_value(i == 0 ? batch_ : dims[i]);
    }
  }

  onnx::NodeProto* node(const char* op, const std::string& name, const std::vector<std::string>& inputs,
                        const std::string& output) {
    onnx::NodeProto* n = g_->add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (const auto& in : inputs) n->add_input(in);
    n->add_output(output);
    ++stats_.nodes;
    return n;
  }
  static void attr(onnx::NodeProto* n, const char* name, int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void attr(onnx::NodeProto* n, const char* name, float v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(v);
  }
  static void attr(onnx::NodeProto* n, const char* name, const std::vector<int64_t>& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }

  // A float32 initializer `name` of `dims` holding `data` (C order).
  const std::string& initializer(const std::string& name, const std::vector<int64_t>& dims,
                                 const std::vector<float>& data) {
    onnx::TensorProto* t = g_->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    int64_t n = 1;
    for (int64_t d : dims) t->add_dims(d), n *= d;
    TG_CHECK(n == static_cast<int64_t>(data.size()), "initializer {}: {} values for {} elements", name, data.size(), n);
    t->set_raw_data(data.data(), data.size() * sizeof(float));
    stats_.weights_crc = crc32c_extend(stats_.weights_crc, data.data(), data.size() * sizeof(float));
    ++stats_.initializers;
    stats_.parameters += n;
    return t->name();
  }
  std::vector<float> host_values(const std::string& name) const {
    const Tensor t = weight_(name);
    TG_CHECK(t.dtype() == DType::kF32 && t.device().is_cpu(), "weight {} is not a host f32 tensor", name);
    return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
  }
  static std::string param(const Net::GraphNode& n, const char* local) {
    const std::string want = n.layer->name() + "/" + local;
    for (const auto& p : n.params)
      if (p == want) return p;
    for (const auto& s : n.states)
      if (s == want) return s;
    TG_THROW("layer '{}' ({}) has no tensor {}", n.layer->name(), n.layer->type(), want);
  }

  // The ONNX value holding tg tensor `name` (dropout makes aliases).
  std::string value(const std::string& name) const {
    auto it = values_.find(name);
    TG_CHECK(it != values_.end(), "no ONNX value for tensor '{}'", name);
    return it->second;
  }
  // The layer's single input, with a check that its values are in our order (not a channels-first flatten).
  std::string plain_input(const Net::GraphNode& n) const {
    const std::string v = value(n.inputs.at(0));
    TG_CHECK(!channels_first_.count(v), "layer '{}' ({}) reads a flattened NCHW tensor: no ONNX translation",
             n.layer->name(), n.layer->type());
    return v;
  }

  // ---- graph input and outputs -------------------------------------------------------------------------------------
  void input(const Net& net, const std::vector<Net::GraphNode>& nodes) {
    Shape images;  // (N, H, W, C)
    for (const auto& n : nodes)
      for (size_t i = 0; i < n.inputs.size(); ++i)
        if (n.inputs[i] == "images") images = n.layer->input_shapes()[i];
    TG_CHECK(images.rank() == 4, "the logits '{}' do not depend on the images", net.logits_name());
    shape_of(g_->add_input(), "images", {0, images[1], images[2], images[3]});
    node("Transpose", "images/to_nchw", {"images"}, "images/nchw");
    attr(g_->mutable_node(g_->node_size() - 1), "perm", std::vector<int64_t>{0, 3, 1, 2});
    values_["images"] = "images/nchw";
  }

  void outputs(const Net& net) {
    std::string logits = value(net.logits_name());
    const Shape shape = net.shape(net.logits_name());
    TG_CHECK(shape.rank() == 2 && !channels_first_.count(logits), "logits '{}' of shape {} are not (N, classes)",
             net.logits_name(), shape.str());
    if (logits != "logits") {
      node("Identity", "logits/identity", {logits}, "logits");
      logits = "logits";
    }
    auto* softmax = node("Softmax", "probabilities/softmax", {logits}, "probabilities");
    attr(softmax, "axis", int64_t{1});
    shape_of(g_->add_output(), "logits", {0, shape[1]});
    shape_of(g_->add_output(), "probabilities", {0, shape[1]});
  }

  // ---- layers
  // ---------------------------------------------------------------------------------------------------------
  void layer(const Net::GraphNode& n, const std::vector<Net::GraphNode>& nodes, size_t index) {
    const std::string type = n.layer->type();
    const LayerOp op = n.layer->op();
    const std::string& out = n.output;
    if (type == "conv2d") {
      conv(n, std::get<ConvDesc>(op));
    } else if (type == "max_pool" || type == "avg_pool") {
      pool(n, std::get<PoolDesc>(op));
    } else if (type == "lrn") {
      const LrnDesc& d = std::get<LrnDesc>(op);
      const int64_t size = 2 * d.depth_radius + 1;
      auto* x = node("LRN", out, {plain_input(n)}, out);
      attr(x, "size", size);
      attr(x, "alpha", d.alpha * static_cast<float>(size));  // ONNX divides alpha by size, TF does not
      attr(x, "beta", d.beta);
      attr(x, "bias", d.bias);
      values_[out] = out;
    } else if (type == "batch_norm") {
      batch_norm(n, std::get<BatchNormDesc>(op));
    } else if (type == "relu") {
      node("Relu", out, {plain_input(n)}, out);
      values_[out] = out;
    } else if (type == "fully_connected") {
      gemm(n, std::get<InnerProductDesc>(op));
    } else if (type == "concat" || type == "add") {
      std::vector<std::string> ins;
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        ins.push_back(value(n.inputs[i]));
        TG_CHECK(!channels_first_.count(ins.back()), "layer '{}' ({}) reads a flattened NCHW tensor", n.layer->name(),
                 type);
      }
      auto* x = node(type == "concat" ? "Concat" : "Add", out, ins, out);
      if (type == "concat") attr(x, "axis", int64_t{1});  // channels: NCHW's axis 1, and (N, C)'s
      values_[out] = out;
    } else if (type == "flatten") {
      flatten(n, nodes, index);
    } else if (type == "dropout") {
      values_[out] = value(n.inputs.at(0));  // the identity at inference
    } else {
      TG_THROW("layer '{}' ({}) has no ONNX translation", n.layer->name(), type);
    }
  }

  void conv(const Net::GraphNode& n, const ConvDesc& d) {
    // (KH, KW, C/g, O) -> (O, C/g, KH, KW)
    const int64_t cg = d.c / d.groups;
    const std::vector<float> w = host_values(param(n, "weights"));
    std::vector<float> oihw(w.size());
    for (int64_t kh = 0; kh < d.kh; ++kh)
      for (int64_t kw = 0; kw < d.kw; ++kw)
        for (int64_t c = 0; c < cg; ++c)
          for (int64_t o = 0; o < d.out_c; ++o)
            oihw[((o * cg + c) * d.kh + kh) * d.kw + kw] = w[((kh * d.kw + kw) * cg + c) * d.out_c + o];
    std::vector<std::string> ins = {plain_input(n), initializer(param(n, "weights"), {d.out_c, cg, d.kh, d.kw}, oihw)};
    if (d.has_bias) ins.push_back(initializer(param(n, "biases"), {d.out_c}, host_values(param(n, "biases"))));
    auto* x = node("Conv", n.output, ins, n.output);
    attr(x, "kernel_shape", std::vector<int64_t>{d.kh, d.kw});
    attr(x, "strides", std::vector<int64_t>{d.stride_h, d.stride_w});
    attr(x, "pads", std::vector<int64_t>{d.pad_top, d.pad_left, d.pad_bottom, d.pad_right});
    attr(x, "dilations", std::vector<int64_t>{1, 1});
    attr(x, "group", d.groups);
    values_[n.output] = n.output;
  }

  void pool(const Net::GraphNode& n, const PoolDesc& d) {
    const bool max = d.kind == PoolKind::kMax;
    auto* x = node(max ? "MaxPool" : "AveragePool", n.output, {plain_input(n)}, n.output);
    attr(x, "kernel_shape", std::vector<int64_t>{d.kh, d.kw});
    attr(x, "strides", std::vector<int64_t>{d.stride_h, d.stride_w});
    attr(x, "pads", std::vector<int64_t>{d.pad_top, d.pad_left, d.pad_bottom, d.pad_right});
    // The mean of the in-image cells (TF's SAME) or of the whole window (PyTorch's default).
    if (!max) attr(x, "count_include_pad", int64_t{d.kind == PoolKind::kAvgIncludePad ? 1 : 0});
    values_[n.output] = n.output;
  }

  void batch_norm(const Net::GraphNode& n, const BatchNormDesc& d) {
    const std::string in = plain_input(n);
    const std::string gamma = d.has_gamma ? initializer(param(n, "gamma"), {d.c}, host_values(param(n, "gamma")))
                                          : initializer(n.layer->name() + "/unit_scale", {d.c},
                                                        std::vector<float>(static_cast<size_t>(d.c), 1.f));
    const std::string beta = initializer(param(n, "beta"), {d.c}, host_values(param(n, "beta")));
    const std::string mean = initializer(param(n, "moving_mean"), {d.c}, host_values(param(n, "moving_mean")));
    const std::string var = initializer(param(n, "moving_variance"), {d.c}, host_values(param(n, "moving_variance")));
    auto* x = node("BatchNormalization", n.output, {in, gamma, beta, mean, var}, n.output);
    attr(x, "epsilon", d.epsilon);
    values_[n.output] = n.output;
  }

  void gemm(const Net::GraphNode& n, const InnerProductDesc& d) {
    const std::string in = value(n.inputs.at(0));
    std::vector<float> w = host_values(param(n, "weights"));  // (in, out), rows in our (H, W, C) order
    auto order = channels_first_.find(in);
    if (order != channels_first_.end()) {  // the input lists (C, H, W): permute the rows to match
      const ChannelsFirstOrder& o = order->second;
      TG_CHECK(o.h * o.w * o.c == d.in, "layer '{}': {} inputs from a {}x{}x{} map", n.layer->name(), d.in, o.h, o.w,
               o.c);
      std::vector<float> permuted(w.size());
      for (int64_t h = 0; h < o.h; ++h)
        for (int64_t x = 0; x < o.w; ++x)
          for (int64_t c = 0; c < o.c; ++c) {
            const float* src = &w[static_cast<size_t>(((h * o.w + x) * o.c + c) * d.out)];
            std::copy(src, src + d.out, &permuted[static_cast<size_t>(((c * o.h + h) * o.w + x) * d.out)]);
          }
      w.swap(permuted);
    }
    std::vector<std::string> ins = {in, initializer(param(n, "weights"), {d.in, d.out}, w)};
    if (d.has_bias) ins.push_back(initializer(param(n, "biases"), {d.out}, host_values(param(n, "biases"))));
    node("Gemm", n.output, ins, n.output);  // alpha = beta = 1, no transposes
    values_[n.output] = n.output;
  }

  // Flatten of (N, H, W, C): see "Layout" in onnx_graph.h.
  void flatten(const Net::GraphNode& n, const std::vector<Net::GraphNode>& nodes, size_t index) {
    const Shape& s = n.layer->input_shapes()[0];
    std::string in = plain_input(n);
    if (s.rank() == 2) {  // already (N, features)
      values_[n.output] = in;
      return;
    }
    TG_CHECK(s.rank() == 4, "layer '{}' (flatten): input {} is not (N, H, W, C)", n.layer->name(), s.str());
    const bool one_by_one = s[1] == 1 && s[2] == 1;
    bool only_fc_readers = true;
    for (size_t j = index + 1; j < nodes.size(); ++j)
      for (const auto& input : nodes[j].inputs)
        if (input == n.output) only_fc_readers &= std::string(nodes[j].layer->type()) == "fully_connected";
    if (!one_by_one && !only_fc_readers) {  // back to NHWC, then flatten in our order
      auto* t = node("Transpose", n.output + "/to_nhwc", {in}, n.output + "/nhwc");
      attr(t, "perm", std::vector<int64_t>{0, 2, 3, 1});
      in = n.output + "/nhwc";
    }
    auto* x = node("Flatten", n.output, {in}, n.output);
    attr(x, "axis", int64_t{1});
    values_[n.output] = n.output;
    if (!one_by_one && only_fc_readers) channels_first_[n.output] = {s[1], s[2], s[3]};
  }

  const std::function<Tensor(const std::string&)>& weight_;
  int64_t batch_;
  onnx::GraphProto* g_;
  OnnxGraphStats stats_;
  std::map<std::string, std::string> values_;                 // tg tensor -> ONNX value
  std::map<std::string, ChannelsFirstOrder> channels_first_;  // ONNX values flattened from NCHW
};

}  // namespace

OnnxGraphStats build_onnx_graph(const Net& net, const std::function<Tensor(const std::string&)>& weight,
                                int64_t batch_size, onnx::GraphProto* graph) {
  TG_CHECK(batch_size >= 0, "ONNX batch size {} must be >= 0 (0: dynamic)", batch_size);
  OnnxGraphWriter writer(weight, batch_size, graph);
  writer.write(net);
  return writer.stats();
}

}  // namespace tg

// The inference graph of a Net as ONNX nodes (standard domain, opset 13 and later: every op used keeps its
// semantics from opset 13 on). Only the layers the logits depend on are written: losses and Inception-v3's
// auxiliary head are training-only and left out; dropout is the identity at inference and becomes no node.
//
// Layout. Our tensors are NHWC, ONNX's Conv/Pool/LRN/BatchNormalization are NCHW. The graph input is the NHWC
// image tensor (what terngrad's preprocessing produces and `terngrad-eval --dump_inputs` writes); one Transpose
// makes it NCHW, and every 4-d tensor inside the graph is NCHW. A Flatten of a NCHW tensor lists the elements in
// (C, H, W) order where ours lists them in (H, W, C) order: when every reader of the flattened tensor is a fully
// connected layer, the rows of those layers' weights are permuted instead (no run-time cost); otherwise a
// Transpose back to NHWC comes before the Flatten. A 1x1 map needs neither (both orders agree).
//
// Translation of each layer (its settings from Layer::op(), the descriptors the backend runs):
//   conv2d            Conv: weights (KH, KW, C/g, O) -> (O, C/g, KH, KW); TF's SAME padding as explicit pads
//                     [top, left, bottom, right] (the odd pixel after), group = g, optional bias
//   max_pool          MaxPool with the same explicit pads (padded cells never win: ONNX pads MaxPool with -inf)
//   avg_pool          AveragePool, explicit pads, count_include_pad = 0 (the mean of the in-image cells, as TF)
//   lrn               LRN across channels: size = 2 * depth_radius + 1, alpha = alpha_TF * size (TF does not
//                     divide alpha by the window, ONNX does), beta and bias as they are
//   batch_norm        BatchNormalization (inference: moving mean/variance, epsilon); scale = gamma, or ones for
//                     the beta-only batch norm
//   relu, add         Relu, Add
//   concat            Concat on the channel axis (1 in NCHW, and for (N, C))
//   flatten           Flatten (axis 1), see Layout
//   fully_connected   Gemm: A (N, in) x B (in, out) + C (out), B = our weights (rows permuted after a NCHW
//                     Flatten)
//   dropout           no node (identity)
// The graph's outputs are "logits" (N, classes) and "probabilities" = Softmax(logits, axis 1).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "terngrad/core/tensor.h"

namespace onnx {
class GraphProto;
class ModelProto;
}  // namespace onnx

namespace tg {

class Net;

struct OnnxGraphStats {
  int64_t nodes = 0, initializers = 0, parameters = 0;  // parameters: elements of the float initializers
  uint32_t weights_crc = 0;                             // crc32c of every initializer's bytes, in graph order
};

// Sets the model's IR version and opset import for `opset` (onnx_ir_version) and names terngrad as its producer.
void init_onnx_model(int opset, onnx::ModelProto* model);

// Fills `graph` with the inference graph of `net` (set up; any batch). `weight(name)` returns the host tensor of
// a parameter or state (ParameterStore names: "conv1/weights", "conv1/BatchNorm/moving_mean"). batch_size 0
// makes the batch dimension symbolic ("batch"), otherwise fixed. Throws, naming the layer, for a layer type or
// layout it cannot translate.
OnnxGraphStats build_onnx_graph(const Net& net, const std::function<Tensor(const std::string&)>& weight,
                                int64_t batch_size, onnx::GraphProto* graph);

}  // namespace tg

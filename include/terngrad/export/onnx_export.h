// ONNX export of a checkpoint (terngrad-export's work): the network is rebuilt from the checkpoint's header as the
// model registry builds it, its weights (the moving averages by default, as terngrad-eval evaluates) are read, and
// its inference graph (src/export/onnx_graph.h: the translation of every layer) is written as an ONNX model with
// protobuf (proto/onnx.proto, a subset of ONNX's schema), atomically: a failure leaves no file at the output path.
//
// The model: input "images" float32 (batch, S, S, C) NHWC, the preprocessed image tensor (the preprocessing of the
// checkpoint's dataset and net, written out in the model's metadata); outputs "logits" and "probabilities"
// (softmax) float32 (batch, classes). The batch dimension is symbolic ("batch") unless a batch size is fixed.
// metadata_props: net, dataset, image_size, channels, num_classes, label_offset, checkpoint, step, parameter_digest
// (the checkpoint's), weights (ema or raw), weights_digest (crc32c of the exported initializers), input_layout,
// preprocessing. doc_string: the same in a sentence or two.
//
// Opsets: the graph uses ops whose semantics hold from opset 13 on; --opset picks the opset_import (13 to 26, the
// newest ONNX Runtime 1.31 runs) and the matching IR version (ONNX's version table).
#pragma once

#include <cstdint>
#include <string>

#include "terngrad/core/enum_names.h"

namespace tg {

enum class ExportWeights { kEma, kRaw };
template <>
struct EnumNames<ExportWeights> : EnumNamesBase {
  static constexpr const char* kFlag = "--weights";
  static constexpr EnumName<ExportWeights> kList[] = {{ExportWeights::kEma, "ema"}, {ExportWeights::kRaw, "raw"}};
};

constexpr int kMinOnnxOpset = 13;
constexpr int kMaxOnnxOpset = 26;
constexpr int kDefaultOnnxOpset = 17;

// The IR version ONNX pairs with an opset (the first ONNX release that introduced it).
int64_t onnx_ir_version(int opset);

struct OnnxExportOptions {
  ExportWeights weights = ExportWeights::kEma;
  int64_t batch_size = 0;  // 0: dynamic
  int opset = kDefaultOnnxOpset;
};

struct OnnxExportSummary {
  std::string checkpoint, output, net;
  int64_t step = 0;
  std::string parameter_digest;  // the checkpoint's
  std::string weights_digest;    // crc32c of the exported initializers
  int64_t nodes = 0, initializers = 0, parameters = 0;
  uint64_t bytes = 0;  // of the file
};

// Exports the checkpoint file at checkpoint_path to `output`. Errors (tg::Error) name the checkpoint, the net
// or the output path; nothing is left at `output` after one.
OnnxExportSummary export_onnx(const std::string& checkpoint_path, const std::string& output,
                              const OnnxExportOptions& options);

}  // namespace tg

// ONNX export of a checkpoint: the net and its weights from the checkpoint, the graph (onnx_graph.h), the
// metadata, one atomic write.
#include "terngrad/export/onnx_export.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <vector>

#include "onnx.pb.h"
#include "src/export/onnx_graph.h"
#include "terngrad/backend/backend.h"
#include "terngrad/core/atomic_file.h"
#include "terngrad/data/dataset_info.h"
#include "terngrad/data/preprocess.h"
#include "terngrad/models/registry.h"
#include "terngrad/nn/net.h"
#include "terngrad/train/checkpoint.h"
#include "terngrad/train/checkpoint_model.h"

namespace tg {

namespace {

// What the input tensor must hold: the evaluation preprocessing of data/preprocess.h, per kind.
std::string preprocessing_text(PreprocessKind kind, int64_t s) {
  switch (kind) {
    case PreprocessKind::kMnist:
      return fmt::format("grayscale uint8 image, x / 255, crop or pad (centred) to {0}x{0}, then (x - 0.5) * 2", s);
    case PreprocessKind::kCifar10:
      return fmt::format(
          "RGB uint8 image, x / 255, crop or pad (centred) to {0}x{0}, then per-image standardization "
          "(x - mean) / max(stddev, 1 / sqrt({0} * {0} * 3)) over all pixels and channels",
          s);
    case PreprocessKind::kAlexnet:
      return fmt::format(
          "RGB uint8 image, x / 255, bilinear resize to {1}x{1} (TF1 convention: align_corners false, aspect not "
          "kept), centre crop {0}x{0}, x * 255 minus the RGB means (123.68, 116.78, 103.94)",
          s, std::lround(256.0 * static_cast<double>(s) / 224.0));
    case PreprocessKind::kInception:
      return fmt::format(
          "RGB uint8 image, x / 255, central crop of 87.5% of each side, bilinear resize to {0}x{0} (TF1 "
          "convention: align_corners false), then (x - 0.5) * 2",
          s);
  }
  return "";
}

void add_metadata(onnx::ModelProto* model, const std::string& key, const std::string& value) {
  auto* p = model->add_metadata_props();
  p->set_key(key);
  p->set_value(value);
}

// The checkpoint's net from the registry, or one line naming the checkpoint and the known nets.
const ModelInfo& checkpoint_net(const CheckpointReader& reader) {
  for (const ModelInfo& m : model_registry())
    if (m.name == reader.meta().model) return m;
  TG_THROW("{}: the checkpoint's net '{}' is not a known network (known: {})", reader.path(), reader.meta().model,
           model_names());
}

// The model's metadata_props and doc_string: what it is, where it comes from, what its input must hold.
void describe(const CheckpointReader& reader, const ModelInfo& info, const OnnxExportOptions& o,
              const std::string& weights_digest, onnx::ModelProto* model) {
  const CheckpointMeta& m = reader.meta();
  const bool ema = o.weights == ExportWeights::kEma;
  const PreprocessKind kind = preprocess_kind_for(m.dataset, parse_enum<PreprocessKind>(info.imagenet_preprocessing));
  const std::string layout =
      fmt::format("images: float32 ({}, {}, {}, {}) NHWC{}", o.batch_size > 0 ? std::to_string(o.batch_size) : "batch",
                  m.image_size, m.image_size, m.channels, m.channels == 3 ? ", RGB" : "");
  const std::string labels = uses_imagenet_preprocessing(parse_enum<Dataset>(m.dataset))
                                 ? "class index = dataset label: 0 is background, 1.. the classes in the order of "
                                   "the labels file (terngrad-data build-image-data)"
                                 : "class index = dataset label (0-based)";
  const std::string preprocessing = preprocessing_text(kind, m.image_size);
  const std::string checkpoint_name = std::filesystem::path(reader.path()).filename().string();
  add_metadata(model, "net", m.model);
  add_metadata(model, "dataset", m.dataset);
  add_metadata(model, "image_size", std::to_string(m.image_size));
  add_metadata(model, "channels", std::to_string(m.channels));
  add_metadata(model, "num_classes", std::to_string(m.num_classes));
  add_metadata(model, "labels", labels);
  add_metadata(model, "checkpoint", checkpoint_name);
  add_metadata(model, "step", std::to_string(m.step));
  add_metadata(model, "parameter_digest", m.parameter_digest);
  add_metadata(model, "weights", ema ? "ema" : "raw");
  add_metadata(model, "weights_digest", weights_digest);
  add_metadata(model, "input_layout", layout);
  add_metadata(model, "preprocessing", preprocessing);
  add_metadata(model, "outputs", "logits: float32 (batch, classes); probabilities: softmax of the logits");
  model->set_doc_string(fmt::format(
      "{} ({}) trained on {} by terngrad, checkpoint {} at step {} (parameter digest {}), {} weights. Input {}: {}. "
      "Outputs logits and probabilities (batch, {}); {}.",
      m.model, info.description, m.dataset, checkpoint_name, m.step, m.parameter_digest, ema ? "moving-average" : "raw",
      layout, preprocessing, m.num_classes, labels));
  model->mutable_graph()->set_doc_string(model->doc_string());
}

}  // namespace

OnnxExportSummary export_onnx(const std::string& checkpoint_path, const std::string& output,
                              const OnnxExportOptions& o) {
  onnx_ir_version(o.opset);  // checks the opset before any work
  TG_CHECK(o.batch_size >= 0, "--batch_size {} must be >= 0 (0: dynamic)", o.batch_size);
  const CheckpointReader reader(checkpoint_path);
  const CheckpointMeta& m = reader.meta();
  const ModelInfo& info = checkpoint_net(reader);
  parse_enum<Dataset>(m.dataset);  // a known dataset (checked before the work)
  AtomicFile file(output);         // fails now, before the work, when the output cannot be created

  // The net at batch 1 on the CPU, with the checkpoint's weights (or their averages) in its store.
  auto backend = make_backend("cpu");
  Net net;
  build_model(m.model, checkpoint_model_config(m), net);
  net.setup(*backend, 1);
  ParameterStore store(net.param_specs(), net.state_specs(), *backend);
  net.bind(store);
  const bool ema = o.weights == ExportWeights::kEma;
  load_checkpoint_weights(reader, *backend, store, ema);
  auto weight = [&](const std::string& name) {
    return store.params().contains(name) ? store.params().view(name) : store.state().view(name);
  };

  onnx::ModelProto model;
  init_onnx_model(o.opset, &model);
  model.set_model_version(m.step);
  onnx::GraphProto* graph = model.mutable_graph();
  graph->set_name(m.model);
  const OnnxGraphStats stats = build_onnx_graph(net, weight, o.batch_size, graph);

  const std::string weights_digest = digest_hex(stats.weights_crc);
  describe(reader, info, o, weights_digest, &model);

  const size_t bytes = model.ByteSizeLong();
  TG_CHECK(bytes <= static_cast<size_t>(std::numeric_limits<int>::max()),
           "{}: the model is {} bytes, above protobuf's 2 GiB limit of one message", output, bytes);
  std::string serialized;
  TG_CHECK(model.SerializeToString(&serialized), "{}: cannot serialize the ONNX model", output);
  file.write(serialized);
  file.commit();

  OnnxExportSummary s;
  s.checkpoint = checkpoint_path;
  s.output = output;
  s.net = m.model;
  s.step = m.step;
  s.parameter_digest = m.parameter_digest;
  s.weights_digest = weights_digest;
  s.nodes = stats.nodes;
  s.initializers = stats.initializers;
  s.parameters = stats.parameters;
  s.bytes = serialized.size();
  return s;
}

}  // namespace tg

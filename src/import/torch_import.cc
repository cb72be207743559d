// PyTorch weights -> a checkpoint of ours (import/torch_import.h).
#include "terngrad/import/torch_import.h"

#include <fmt/format.h>

#include <filesystem>
#include <map>
#include <set>

#include "terngrad/backend/backend.h"
#include "terngrad/core/error.h"
#include "terngrad/data/dataset_info.h"
#include "terngrad/import/torch_name_map.h"
#include "terngrad/models/registry.h"
#include "terngrad/nn/net.h"
#include "terngrad/optim/moving_average.h"
#include "terngrad/train/checkpoint.h"

namespace tg {

namespace fs = std::filesystem;

namespace {

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

const char* usual_dataset(const std::string& net) {
  if (net == "lenet") return "mnist";
  if (net == "cifarnet" || net == "cifar10_alexnet") return "cifar10";
  return "imagenet";
}

bool has_batch_norm(const std::string& net) { return net == "resnet50" || net == "inception_v3"; }

// The (H, W, C) map a fully connected layer reads through a flatten, by the FC's weights name (absent: none).
std::map<std::string, Shape> flattened_maps(const Net& net) {
  std::map<std::string, std::string> producer_type, producer_input;
  const std::vector<Net::GraphNode> graph = net.graph();
  for (const Net::GraphNode& n : graph) {
    producer_type[n.output] = n.layer->type();
    producer_input[n.output] = n.inputs.empty() ? "" : n.inputs[0];
  }
  std::map<std::string, Shape> out;
  for (const Net::GraphNode& n : graph) {
    if (std::string(n.layer->type()) != "fully_connected" || n.inputs.empty() || n.params.empty()) continue;
    if (producer_type[n.inputs[0]] != "flatten") continue;
    const Shape map = net.shape(producer_input[n.inputs[0]]);  // (1, H, W, C)
    if (map.rank() == 4 && map[1] * map[2] > 1) out[n.params[0]] = Shape{map[1], map[2], map[3]};
  }
  return out;
}

// PyTorch's shape of our tensor of shape `ours`.
Shape torch_shape(const Shape& ours) {
  if (ours.rank() == 4) return Shape{ours[3], ours[2], ours[0], ours[1]};  // (KH, KW, I, O) <- (O, I, KH, KW)
  if (ours.rank() == 2) return Shape{ours[1], ours[0]};                    // (in, out) <- (out, in)
  return ours;
}

// PyTorch's values in our layout. `map` (H, W, C): the FC reads a flatten of that map (PyTorch's order C, H, W).
std::vector<float> to_our_layout(const TorchTensor& t, const Shape& ours, const Shape* map) {
  const std::vector<float>& v = t.values;
  std::vector<float> out(v.size());
  if (ours.rank() == 4) {
    const int64_t kh = ours[0], kw = ours[1], ci = ours[2], co = ours[3];
    for (int64_t o = 0; o < co; ++o)
      for (int64_t i = 0; i < ci; ++i)
        for (int64_t y = 0; y < kh; ++y)
          for (int64_t x = 0; x < kw; ++x) out[((y * kw + x) * ci + i) * co + o] = v[((o * ci + i) * kh + y) * kw + x];
  } else if (ours.rank() == 2) {
    const int64_t in = ours[0], outs = ours[1];
    for (int64_t o = 0; o < outs; ++o)
      for (int64_t r = 0; r < in; ++r) {
        int64_t torch_in = r;
        if (map) {  // our row r = (h * W + w) * C + c is PyTorch's column (c * H + h) * W + w
          const int64_t h = (*map)[0], w = (*map)[1], c = (*map)[2];
          const int64_t ch = r % c, pixel = r / c;
          torch_in = (ch * h + pixel / w) * w + pixel % w;
        }
        out[r * outs + o] = v[o * in + torch_in];
      }
  } else {
    out = v;
  }
  return out;
}

}  // namespace

TorchImportSummary import_torch_weights(const TorchImportOptions& o) {
  const ModelInfo& info = find_model(o.net);
  if (const char* why = torch_import_refusal(info.name)) TG_USAGE_ERROR("--net {} cannot be imported: {}", o.net, why);
  TorchImportSummary s;
  s.dataset = o.dataset.empty() ? usual_dataset(info.name) : o.dataset;
  if (parse_enum<Dataset>(s.dataset) == Dataset::kCustom)
    TG_USAGE_ERROR(
        "--dataset custom: import with the network's usual dataset (leave --dataset out), then train on your folder "
        "from it: terngrad-train --pretrained_model_checkpoint_path <output_dir> --fine_tune --data_dir <folder>");
  const DatasetInfo& data = dataset_info(s.dataset);
  if (const std::optional<std::string> there = latest_checkpoint(o.output_dir))
    TG_THROW("--output_dir {} already holds a checkpoint ({}); import into a new folder", o.output_dir, *there);

  const TorchWeights w = read_torch_weights(o.input, o.format);
  s.format = w.format;
  if (w.format == WeightsFormat::kOnnx && has_batch_norm(info.name) && w.op_counts.count("BatchNormalization") == 0)
    TG_THROW(
        "{}: an eval-mode ONNX export: PyTorch folded batch norm into the {} convolutions (no BatchNormalization "
        "node), so the file lacks the BN parameters and statistics --net {} keeps; export with "
        "torch.onnx.export(..., training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False), or save the "
        "state_dict as safetensors",
        o.input, w.op_counts.count("Conv") ? w.op_counts.at("Conv") : 0, info.name);

  // The network the file holds: its classes from the logits weights, inception's aux head if present.
  ModelConfig mc;
  mc.padding_style = PaddingStyle::kTorch;
  mc.channels = data.channels;
  mc.image_size = o.image_size > 0 ? o.image_size
                  : info.default_image_size > 0 && data.default_image_size >= info.min_image_size
                      ? info.default_image_size
                      : data.default_image_size;
  const std::string logits_key = torch_key(info.name, "logits/weights");
  auto logits = w.tensors.find(logits_key);
  if (logits == w.tensors.end() || logits->second.shape.rank() != 2) {
    std::vector<std::string> some;
    for (const auto& [key, t] : w.tensors)
      if (some.size() < 4) some.push_back(key);
    TG_THROW("{}: no logits weights '{}' of shape (classes, features): not a {} file? (its {} tensors: {}{})", o.input,
             logits_key, info.name, w.tensors.size(), joined(some), w.tensors.size() > some.size() ? ", ..." : "");
  }
  mc.num_classes = logits->second.shape[0];
  mc.aux_logits = false;
  for (const auto& [key, t] : w.tensors)
    if (key.rfind("AuxLogits.", 0) == 0) mc.aux_logits = true;
  s.image_size = mc.image_size, s.num_classes = mc.num_classes, s.aux_logits = mc.aux_logits;

  auto backend = make_backend("cpu");
  Net net;
  build_model(info.name, mc, net);
  net.setup(*backend, 1);
  const std::map<std::string, Shape> maps = flattened_maps(net);

  std::vector<std::pair<std::string, Shape>> ours;  // (name, shape): parameters, then BN statistics
  for (const ParamSpec& p : net.param_specs()) ours.emplace_back(p.name, p.shape);
  const size_t num_params = ours.size();
  for (const StateSpec& st : net.state_specs()) ours.emplace_back(st.name, st.shape);

  std::vector<std::string> missing;
  std::set<std::string> used;
  std::vector<std::vector<float>> converted(ours.size());
  for (size_t i = 0; i < ours.size(); ++i) {
    const auto& [name, shape] = ours[i];
    const std::string key = torch_key(info.name, name);
    auto it = w.tensors.find(key);
    if (it == w.tensors.end()) {
      missing.push_back(key);
      continue;
    }
    used.insert(key);
    const TorchTensor& t = it->second;
    if (!t.floating)
      TG_THROW("{}: tensor '{}' (our {}) has dtype {}; a floating-point one (F32, F16, BF16, F64) is needed", o.input,
               key, name, t.dtype);
    const Shape want = torch_shape(shape);
    if (t.shape != want)
      TG_THROW("{}: tensor '{}' (our {}) has shape {}, --net {} at --image_size {} with {} classes needs {}", o.input,
               key, name, t.shape.str(), info.name, mc.image_size, mc.num_classes, want.str());
    auto map = maps.find(name);
    converted[i] = to_our_layout(t, shape, map == maps.end() ? nullptr : &map->second);
  }
  if (!missing.empty())
    TG_THROW("{}: {} tensor{} of --net {} missing: {}", o.input, missing.size(), missing.size() == 1 ? "" : "s",
             info.name, joined(missing));
  std::vector<std::string> unexpected;
  for (const auto& [key, t] : w.tensors) {
    if (used.count(key)) continue;
    if (torch_key_ignored(key)) {
      s.ignored.push_back(key);
    } else if (w.format != WeightsFormat::kOnnx || t.floating) {  // ONNX graphs also hold shape constants
      unexpected.push_back(key);
    }
  }
  if (!unexpected.empty())
    TG_THROW("{}: {} tensor{} that --net {} does not have: {}", o.input, unexpected.size(),
             unexpected.size() == 1 ? "" : "s", info.name, joined(unexpected));

  // The checkpoint: parameters and BN statistics, and the same values as their moving averages (what terngrad-eval
  // evaluates by default), at step 0.
  std::vector<NamedTensor> tensors, averages;
  for (size_t i = 0; i < ours.size(); ++i) {
    const auto& [name, shape] = ours[i];
    const Tensor host(converted[i].data(), shape, DType::kF32, Device::cpu());
    const auto part = i < num_params ? CheckpointLayout::kParams : CheckpointLayout::kState;
    tensors.push_back({CheckpointLayout::name(part, name), host});
    averages.push_back(
        {CheckpointLayout::name(CheckpointLayout::kEma, ExponentialMovingAverage::shadow_name(name)), host});
    if (i < num_params) s.parameters += shape.numel();
  }
  tensors.insert(tensors.end(), averages.begin(), averages.end());  // the parts in a checkpoint's order
  CheckpointMeta meta;
  meta.model = info.name;
  meta.dataset = s.dataset;
  meta.image_size = mc.image_size;
  meta.channels = mc.channels;
  meta.num_classes = mc.num_classes;
  meta.flags = {{"net", info.name},
                {"dataset", s.dataset},
                {"image_size", std::to_string(mc.image_size)},
                {"num_classes", std::to_string(mc.num_classes)},
                {"padding_style", enum_name(mc.padding_style)},
                {"aux_logits", mc.aux_logits ? "true" : "false"},
                {"imported_from", fs::absolute(o.input).string()}};
  std::error_code ec;
  fs::create_directories(o.output_dir, ec);
  if (ec) TG_THROW("--output_dir {}: cannot create it: {}", o.output_dir, ec.message());
  s.checkpoint = checkpoint_path(o.output_dir, 0);
  s.tensors = static_cast<int64_t>(ours.size());
  s.parameter_digest = write_checkpoint(s.checkpoint, meta, tensors);
  write_checkpoint_index(o.output_dir, {0});
  return s;
}

}  // namespace tg

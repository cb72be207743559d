// The weights of a PyTorch model as files publish them: a name -> tensor table read from a safetensors file (an
// 8-byte little-endian header length, a JSON header naming each tensor's dtype, shape and byte range, the raw
// little-endian tensors) or from the initializers of an ONNX model. Floating-point tensors (F32, F16, BF16, F64)
// are converted to float32; integer tensors (num_batches_tracked) are kept as a shape with no values, so a name
// map can list them as ignored. Every error names the file and, where there is one, the tensor: a file that is
// neither format, a truncated or malformed header, a byte range outside the file or of the wrong size, a dtype
// that is not read, ONNX data stored outside the file.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "terngrad/core/enum_names.h"
#include "terngrad/core/shape.h"

namespace tg {

struct TorchTensor {
  Shape shape;
  std::string dtype;      // as the file names it: "F32", "F16", "BF16", "F64", "I64", ...
  bool floating = false;  // values holds the tensor (as float32)
  std::vector<float> values;
  int64_t numel() const { return shape.numel(); }
};

enum class WeightsFormat { kAuto, kSafetensors, kOnnx };
template <>
struct EnumNames<WeightsFormat> : EnumNamesBase {
  static constexpr const char* kFlag = "--format";
  static constexpr EnumName<WeightsFormat> kList[] = {
      {WeightsFormat::kAuto, "auto"}, {WeightsFormat::kSafetensors, "safetensors"}, {WeightsFormat::kOnnx, "onnx"}};
};

struct TorchWeights {
  std::string path;
  WeightsFormat format = WeightsFormat::kAuto;  // the one read (never kAuto)
  std::map<std::string, TorchTensor> tensors;
  // ONNX only: the graph's nodes by op type (Conv, BatchNormalization, ...), and the Conv nodes whose weight is an
  // initializer PyTorch's exporter named itself ("onnx::Conv_123"): how an eval-mode export that folded batch norm
  // into the convolutions is recognised.
  std::map<std::string, int64_t> op_counts;
  int64_t anonymous_conv_weights = 0;
};

// Reads `path` in `format`; kAuto looks at the first bytes (a safetensors header length followed by '{', else an
// ONNX ModelProto with a graph) and names both formats when neither fits.
TorchWeights read_torch_weights(const std::string& path, WeightsFormat format);
TorchWeights read_safetensors(const std::string& path);
TorchWeights read_onnx_weights(const std::string& path);

}  // namespace tg

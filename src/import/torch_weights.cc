// PyTorch weights from safetensors files and ONNX initializers (import/torch_weights.h).
#include "terngrad/import/torch_weights.h"

#include <fmt/format.h>

#include <cstring>
#include <fstream>
#include <limits>

#include "onnx.pb.h"
#include "terngrad/core/dtype.h"
#include "terngrad/core/error.h"
#include "terngrad/core/json_value.h"

namespace tg {

namespace {

constexpr uint64_t kMaxSafetensorsHeader = uint64_t{100} << 20;  // the format's own limit (100 MB)

std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) TG_THROW("{}: cannot open: {}", path, std::strerror(errno));
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0) TG_THROW("{}: cannot read its size", path);
  std::string bytes(static_cast<size_t>(size), '\0');
  in.seekg(0);
  if (size > 0 && !in.read(bytes.data(), size)) TG_THROW("{}: read failed after {} bytes", path, in.gcount());
  return bytes;
}

uint64_t le64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | static_cast<unsigned char>(p[i]);
  return v;
}

// The file's dimensions as a Shape (rank, sign and element-count overflow checked), errors naming `where`.
Shape checked_shape(const std::vector<int64_t>& dims, const std::string& where) {
  try {
    Shape shape(dims);
    shape.numel();
    return shape;
  } catch (const Error& e) {
    TG_THROW("{}: {}", where, e.what());
  }
}

// Element size of a safetensors dtype, 0 when unknown; *floating says whether it is converted.
size_t safetensors_dtype_size(const std::string& dtype, bool* floating) {
  *floating = dtype == "F32" || dtype == "F16" || dtype == "BF16" || dtype == "F64";
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" || dtype == "F8_E5M2") return 1;
  return 0;
}

// Little-endian elements of `dtype` to float32.
void to_floats(const std::string& dtype, const char* src, int64_t n, float* dst) {
  if (dtype == "F32") {
    std::memcpy(dst, src, static_cast<size_t>(n) * 4);
  } else if (dtype == "F64") {
    for (int64_t i = 0; i < n; ++i) {
      double d;
      std::memcpy(&d, src + 8 * i, 8);
      dst[i] = static_cast<float>(d);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t bits;
      std::memcpy(&bits, src + 2 * i, 2);
      dst[i] = dtype == "F16" ? half_to_float(half_bits{bits}) : bf16_to_float(bf16_bits{bits});
    }
  }
}

bool looks_like_safetensors(const std::string& bytes) {
  if (bytes.size() < 10) return false;
  const uint64_t n = le64(bytes.data());
  if (n < 2 || n > kMaxSafetensorsHeader) return false;
  size_t i = 8;
  while (i < bytes.size() && i < 8 + n && bytes[i] == ' ') ++i;
  return i < bytes.size() && bytes[i] == '{';
}

TorchWeights parse_safetensors(const std::string& path, const std::string& bytes) {
  TorchWeights w;
  w.path = path;
  w.format = WeightsFormat::kSafetensors;
  if (bytes.size() < 8)
    TG_THROW("{}: truncated safetensors file: {} bytes, the header length alone is 8", path, bytes.size());
  const uint64_t header_bytes = le64(bytes.data());
  if (header_bytes > kMaxSafetensorsHeader)
    TG_THROW("{}: safetensors header length {} is over the format's limit of {} bytes (not a safetensors file?)", path,
             header_bytes, kMaxSafetensorsHeader);
  if (header_bytes > bytes.size() - 8)
    TG_THROW("{}: truncated safetensors header: it says {} bytes, the file has {} after the length", path, header_bytes,
             bytes.size() - 8);
  const JsonValue header = parse_json(std::string_view(bytes).substr(8, header_bytes), path + " (safetensors header)");
  const uint64_t data_start = 8 + header_bytes, data_bytes = bytes.size() - data_start;
  for (const auto& [name, entry] : header.as_object(path + ": the safetensors header")) {
    if (name == "__metadata__") continue;
    const std::string where = fmt::format("{}: tensor '{}'", path, name);
    const JsonValue* dtype = entry.find("dtype");
    const JsonValue* shape = entry.find("shape");
    const JsonValue* offsets = entry.find("data_offsets");
    if (!entry.is_object() || !dtype || !shape || !offsets)
      TG_THROW("{} lacks one of dtype, shape, data_offsets in the header", where);
    TorchTensor t;
    t.dtype = dtype->as_string(where + " dtype");
    std::vector<int64_t> dims;
    for (const JsonValue& d : shape->as_array(where + " shape")) dims.push_back(d.as_int64(where + " shape"));
    t.shape = checked_shape(dims, where);
    const auto& range = offsets->as_array(where + " data_offsets");
    if (range.size() != 2) TG_THROW("{}: data_offsets must be [begin, end], not {} numbers", where, range.size());
    const int64_t begin = range[0].as_int64(where + " data_offsets"), end = range[1].as_int64(where + " data_offsets");
    if (begin < 0 || end < begin || static_cast<uint64_t>(end) > data_bytes)
      TG_THROW("{}: bytes [{}, {}) lie outside the file's {} data bytes (truncated?)", where, begin, end, data_bytes);
    const size_t elem = safetensors_dtype_size(t.dtype, &t.floating);
    if (elem == 0) TG_THROW("{} has dtype {}, which is not read (F32, F16, BF16, F64 are)", where, t.dtype);
    const int64_t n = t.numel();
    if (static_cast<uint64_t>(n) > data_bytes / elem)
      TG_THROW("{}: {} {} elements need more than the file's {} data bytes", where, t.shape.str(), t.dtype, data_bytes);
    if (static_cast<uint64_t>(end - begin) != static_cast<uint64_t>(n) * elem)
      TG_THROW("{}: {} {} elements take {} bytes, its data_offsets give {}", where, t.shape.str(), t.dtype,
               static_cast<uint64_t>(n) * elem, end - begin);
    if (t.floating) {
      t.values.resize(static_cast<size_t>(n));
      to_floats(t.dtype, bytes.data() + data_start + begin, n, t.values.data());
    }
    w.tensors.emplace(name, std::move(t));
  }
  return w;
}

bool parse_model(const std::string& bytes, onnx::ModelProto* model) {
  return bytes.size() <= static_cast<size_t>(std::numeric_limits<int>::max()) &&
         model->ParseFromArray(bytes.data(), static_cast<int>(bytes.size())) && model->has_graph();
}

TorchWeights parse_onnx(const std::string& path, const onnx::ModelProto& model) {
  TorchWeights w;
  w.path = path;
  w.format = WeightsFormat::kOnnx;
  const onnx::GraphProto& g = model.graph();
  for (const onnx::TensorProto& p : g.initializer()) {
    const std::string where = fmt::format("{}: initializer '{}'", path, p.name());
    if (p.data_location() == onnx::TensorProto::EXTERNAL || p.external_data_size() > 0)
      TG_THROW("{} is stored in an external file; export with the weights inside the model (a model under 2 GB)",
               where);
    TorchTensor t;
    t.shape = checked_shape(std::vector<int64_t>(p.dims().begin(), p.dims().end()), where);
    const int64_t n = t.numel();
    const std::string& raw = p.raw_data();
    auto need = [&](size_t elem, int64_t typed) {
      if (!raw.empty() && raw.size() != static_cast<size_t>(n) * elem)
        TG_THROW("{}: {} elements take {} bytes, raw_data has {}", where, t.shape.str(), n * elem, raw.size());
      if (raw.empty() && typed != n)
        TG_THROW("{}: {} has {} elements, the file stores {}", where, t.shape.str(), n, typed);
    };
    switch (p.data_type()) {
      case onnx::TensorProto::FLOAT:
        t.dtype = "F32";
        need(4, p.float_data_size());
        break;
      case onnx::TensorProto::DOUBLE:
        t.dtype = "F64";
        need(8, p.double_data_size());
        break;
      case onnx::TensorProto::FLOAT16:
      case onnx::TensorProto::BFLOAT16:
        t.dtype = p.data_type() == onnx::TensorProto::FLOAT16 ? "F16" : "BF16";
        need(2, p.int32_data_size());
        break;
      case onnx::TensorProto::INT64:
        t.dtype = "I64";
        break;
      default:
        t.dtype = fmt::format("ONNX type {}", p.data_type());
    }
    t.floating = t.dtype == "F32" || t.dtype == "F64" || t.dtype == "F16" || t.dtype == "BF16";
    if (t.floating) {
      t.values.resize(static_cast<size_t>(n));
      if (!raw.empty()) {
        to_floats(t.dtype, raw.data(), n, t.values.data());
      } else {
        for (int64_t i = 0; i < n; ++i) {
          if (t.dtype == "F32")
            t.values[i] = p.float_data(static_cast<int>(i));
          else if (t.dtype == "F64")
            t.values[i] = static_cast<float>(p.double_data(static_cast<int>(i)));
          else {
            const auto bits = static_cast<uint16_t>(p.int32_data(static_cast<int>(i)));
            t.values[i] = t.dtype == "F16" ? half_to_float(half_bits{bits}) : bf16_to_float(bf16_bits{bits});
          }
        }
      }
    }
    w.tensors.emplace(p.name(), std::move(t));
  }
  for (const onnx::NodeProto& node : g.node()) {
    ++w.op_counts[node.op_type()];
    if (node.op_type() == "Conv" && node.input_size() >= 2 && node.input(1).rfind("onnx::", 0) == 0)
      ++w.anonymous_conv_weights;
  }
  return w;
}

}  // namespace

TorchWeights read_torch_weights(const std::string& path, WeightsFormat format) {
  const std::string bytes = read_whole_file(path);
  if (format == WeightsFormat::kSafetensors) return parse_safetensors(path, bytes);
  if (format == WeightsFormat::kAuto && looks_like_safetensors(bytes)) return parse_safetensors(path, bytes);
  onnx::ModelProto model;
  if (parse_model(bytes, &model)) return parse_onnx(path, model);
  if (format == WeightsFormat::kOnnx)
    TG_THROW("{}: not an ONNX model (no ModelProto with a graph could be parsed from its {} bytes)", path,
             bytes.size());
  TG_THROW("{}: neither a safetensors file (8-byte header length, then a JSON header) nor an ONNX model ({} bytes)",
           path, bytes.size());
}

TorchWeights read_safetensors(const std::string& path) { return read_torch_weights(path, WeightsFormat::kSafetensors); }
TorchWeights read_onnx_weights(const std::string& path) { return read_torch_weights(path, WeightsFormat::kOnnx); }

}  // namespace tg

// libFuzzer target: a file's bytes through read_torch_weights (terngrad-import's reader) in each format: auto
// detection, safetensors (header length, JSON header, dtypes, shapes, byte ranges, F16/BF16/F64 conversion) and
// ONNX (ModelProto, initializers in raw_data or the typed arrays, external data refused). Then the tensors' values
// are summed, so a size that disagrees with the values read is a finding for ASan.
// Seeds: tests/fuzz/corpus/torch_weights/ (a small safetensors file and a small ONNX model: make_corpus.py).
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "terngrad/core/error.h"
#include "terngrad/import/torch_weights.h"

namespace {
volatile float g_sink = 0.f;

void read_all(const std::string& path, tg::WeightsFormat format) {
  try {
    const tg::TorchWeights w = tg::read_torch_weights(path, format);
    float sum = 0.f;
    for (const auto& [name, t] : w.tensors) {
      if (t.floating && static_cast<int64_t>(t.values.size()) != t.numel()) __builtin_trap();
      for (float v : t.values) sum += v;
    }
    g_sink = sum;
  } catch (const tg::Error&) {
  }
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tg::fuzz::quiet_logging();
  tg::fuzz::remove_scratch_at_exit(".weights");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = tg::fuzz::write_scratch(data, size, ".weights");
  for (tg::WeightsFormat f : {tg::WeightsFormat::kAuto, tg::WeightsFormat::kSafetensors, tg::WeightsFormat::kOnnx})
    read_all(path, f);
  return 0;
}

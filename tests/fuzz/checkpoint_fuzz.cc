// libFuzzer target: a checkpoint file's bytes through CheckpointReader (magic, header length, header CRC,
// protobuf header, tensor table checks), then every tensor of up to 1 MiB read back as float32 (offsets,
// sizes and data CRCs), then the same bytes as the text index train_dir/checkpoint (latest_checkpoint).
// Seeds: tests/fuzz/corpus/checkpoint/ (a LeNet training checkpoint cut after its header and table, and small
// complete checkpoints written by write_checkpoint).
#include <cstdint>
#include <filesystem>
#include <string>

#include "fuzz_util.h"
#include "terngrad/core/buffer.h"
#include "terngrad/core/error.h"
#include "terngrad/core/tensor.h"
#include "terngrad/train/checkpoint.h"

namespace {
constexpr size_t kMaxTensorBytes = 1 << 20;

void read_checkpoint(const std::string& path) {
  tg::CheckpointReader reader(path);
  for (const std::string& name : reader.names()) {
    const tg::Shape shape = reader.shape(name);
    const size_t bytes = static_cast<size_t>(shape.numel()) * sizeof(float);
    if (shape.numel() < 0 || bytes > kMaxTensorBytes) continue;
    tg::Buffer host(tg::host_allocator(), bytes ? bytes : 4);
    try {
      reader.read(name, tg::Tensor(host.data(), shape, tg::DType::kF32, tg::Device::cpu()));
    } catch (const tg::Error&) {
    }
  }
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tg::fuzz::quiet_logging();
  tg::fuzz::remove_scratch_at_exit(".ckpt");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = tg::fuzz::write_scratch(data, size, ".ckpt");
  try {
    read_checkpoint(path);
  } catch (const tg::Error&) {
  }
  // The index: a folder per process holding only `checkpoint`.
  static const std::string dir = path + ".dir";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(path, dir + "/checkpoint", std::filesystem::copy_options::overwrite_existing);
  tg::latest_checkpoint(dir);
  return 0;
}

// Checkpoint files: round trip of every tensor and the header, deterministic bytes, corruption detected and
// named (header, tensor data, truncation), the TF-style index and listing of steps.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "terngrad/core/error.h"
#include "terngrad/train/checkpoint.h"

namespace tg {
namespace {

namespace fs = std::filesystem;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tg_ckpt_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(int64_t step) {
    CheckpointMeta m;
    m.model = "lenet", m.dataset = "mnist", m.image_size = 28, m.channels = 1, m.num_classes = 10, m.step = step;
    m.data_cursor = 7;
    m.flags = {{"seed", "1"}, {"batch_size", "64"}, {"zeta", "z"}, {"alpha", "a"}};
    return write_checkpoint(checkpoint_path(dir_.string(), step), m,
                            {{"params/w", Tensor(w_.data(), Shape{3, 5}, DType::F32, Device::cpu())},
                             {"state/count", Tensor(c_.data(), Shape{4}, DType::I32, Device::cpu())}});
  }
  std::vector<char> bytes(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }
  fs::path dir_;
  std::vector<float> w_ = std::vector<float>(15, 0.25f);
  std::vector<int32_t> c_ = {1, 2, 3, 4};
};

TEST_F(CheckpointTest, RoundTripAndDeterministicBytes) {
  w_[7] = -3.5f;
  const std::string digest = write(10);
  CheckpointReader r(checkpoint_path(dir_.string(), 10));
  EXPECT_EQ(r.meta().model, "lenet");
  EXPECT_EQ(r.meta().step, 10);
  EXPECT_EQ(r.meta().data_cursor, 7u);
  EXPECT_EQ(r.meta().flags.at("batch_size"), "64");
  EXPECT_EQ(r.meta().parameter_digest, digest);
  std::vector<float> w(15);
  r.read("params/w", Tensor(w.data(), Shape{3, 5}, DType::F32, Device::cpu()));
  EXPECT_EQ(w, w_);
  std::vector<float> wrong(4);
  EXPECT_THROW(r.read("state/count", Tensor(wrong.data(), Shape{4}, DType::F32, Device::cpu())), Error);
  const auto first = bytes(checkpoint_path(dir_.string(), 10));
  write(10);
  EXPECT_EQ(first, bytes(checkpoint_path(dir_.string(), 10))) << "same content, same bytes";
  EXPECT_FALSE(fs::exists(checkpoint_path(dir_.string(), 10) + ".tmp-" + std::to_string(::getpid())));
}

TEST_F(CheckpointTest, CorruptionIsNamed) {
  write(3);
  const std::string path = checkpoint_path(dir_.string(), 3);
  std::vector<char> good = bytes(path);
  auto expect_error = [&](const std::vector<char>& content, const std::string& what) {
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(content.data(), content.size());
    try {
      CheckpointReader r(path);
      std::vector<float> w(15);
      r.read("params/w", Tensor(w.data(), Shape{3, 5}, DType::F32, Device::cpu()));
      ADD_FAILURE() << "no error for " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << "expected \"" << what << "\" in: " << e.what();
    }
  };
  std::vector<char> bad = good;
  bad[20] ^= 1;  // inside the header
  expect_error(bad, "header checksum mismatch");
  bad = good;
  bad[good.size() - 64 - 64 + 4] ^= 1;  // the parameter tensor's data (before the 64-byte state entry)
  expect_error(bad, "params/w");
  expect_error(std::vector<char>(good.begin(), good.end() - 100), "beyond the end of the file");
  expect_error(std::vector<char>(good.begin(), good.begin() + 40), "exceeds the file size");
  expect_error(std::vector<char>{'n', 'o', 'p', 'e'}, "not a terngrad checkpoint");
}

TEST_F(CheckpointTest, IndexNamesTheLatestAndStepsAreListed) {
  EXPECT_FALSE(latest_checkpoint(dir_.string()).has_value());
  write(5);
  write(12);
  write_checkpoint_index(dir_.string(), {5, 12});
  EXPECT_EQ(*latest_checkpoint(dir_.string()), checkpoint_path(dir_.string(), 12));
  EXPECT_EQ(list_checkpoint_steps(dir_.string()), (std::vector<int64_t>{5, 12}));
  std::ifstream in(dir_ / "checkpoint");
  std::string first;
  std::getline(in, first);
  EXPECT_EQ(first, "model_checkpoint_path: \"model.ckpt-12\"");
}

}  // namespace
}  // namespace tg

// Checkpoint files: round trip of every tensor and the header, deterministic bytes, corruption detected and
// named (header, tensor data, truncation), the TF-style index and listing of steps.
#include "terngrad/train/checkpoint.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>

#include "checkpoint.pb.h"
#include "terngrad/core/error.h"
#include "terngrad/data/crc32c.h"
#include "terngrad/train/checkpoint_series.h"
#include "terngrad/train/stale_files.h"

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
                            {{"params/w", Tensor(w_.data(), Shape{3, 5}, DType::kF32, Device::cpu())},
                             {"state/count", Tensor(c_.data(), Shape{4}, DType::kI32, Device::cpu())}});
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
  r.read("params/w", Tensor(w.data(), Shape{3, 5}, DType::kF32, Device::cpu()));
  EXPECT_EQ(w, w_);
  std::vector<float> wrong(4);
  EXPECT_THROW(r.read("state/count", Tensor(wrong.data(), Shape{4}, DType::kF32, Device::cpu())), Error);
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
      r.read("params/w", Tensor(w.data(), Shape{3, 5}, DType::kF32, Device::cpu()));
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

TEST(ShapeTest, NumelOverflowIsAnErrorNamingTheShape) {
  EXPECT_EQ((Shape{int64_t{1} << 31, int64_t{1} << 31}.numel()), int64_t{1} << 62);
  try {
    Shape{int64_t{1} << 40, int64_t{1} << 40}.numel();
    ADD_FAILURE() << "no overflow error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(1099511627776, 1099511627776)"), std::string::npos) << e.what();
  }
}

// A header with a valid checksum but crafted sizes (UBSan once saw numel overflow here) is refused before
// anything is allocated from it.
TEST_F(CheckpointTest, CraftedHeaderSizesAreRefused) {
  write(4);
  const std::string path = checkpoint_path(dir_.string(), 4);
  const std::vector<char> good = bytes(path);
  uint64_t len = 0;
  std::memcpy(&len, good.data() + 8, 8);
  auto craft = [&](const std::function<void(terngrad::CheckpointHeader&)>& edit, const std::string& what) {
    terngrad::CheckpointHeader h;
    ASSERT_TRUE(h.ParseFromArray(good.data() + 16, static_cast<int>(len)));
    edit(h);
    const std::string header = h.SerializeAsString();
    std::vector<char> out(good.begin(), good.begin() + 8);
    const uint64_t n = header.size();
    out.insert(out.end(), reinterpret_cast<const char*>(&n), reinterpret_cast<const char*>(&n) + 8);
    out.insert(out.end(), header.begin(), header.end());
    const uint32_t crc = crc32c(header.data(), header.size());
    out.insert(out.end(), reinterpret_cast<const char*>(&crc), reinterpret_cast<const char*>(&crc) + 4);
    terngrad::CheckpointHeader original;
    ASSERT_TRUE(original.ParseFromArray(good.data() + 16, static_cast<int>(len)));
    const uint64_t data_offset = original.data_offset();  // the data stay where they were
    ASSERT_LE(out.size(), data_offset);
    out.resize(data_offset, 0);
    out.insert(out.end(), good.begin() + static_cast<std::ptrdiff_t>(data_offset), good.end());
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(out.data(), static_cast<std::streamsize>(out.size()));
    try {
      CheckpointReader r(path);
      ADD_FAILURE() << "no error for " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  };
  craft([](terngrad::CheckpointHeader& h) { h.mutable_tensors(0)->set_shape(0, int64_t{1} << 40); },
        "dimension 1099511627776");
  craft(
      [](terngrad::CheckpointHeader& h) {
        h.mutable_tensors(0)->set_shape(0, 100), h.mutable_tensors(0)->set_shape(1, 100);
      },
      "declares");
  craft([](terngrad::CheckpointHeader& h) { h.mutable_tensors(0)->set_shape(0, -3); }, "dimension -3");
  craft(
      [](terngrad::CheckpointHeader& h) {
        for (int i = 0; i < 9; ++i) h.mutable_tensors(0)->add_shape(1);
      },
      "rank 11");
  craft([](terngrad::CheckpointHeader& h) { h.set_image_size(int64_t{1} << 40); }, "corrupt header");
  craft([](terngrad::CheckpointHeader& h) { h.set_data_offset(uint64_t{1} << 62); }, "data offset");
}

// kill -9 during a save leaves "<file>.tmp-<pid>": removed when that pid is not a live process (or is ours,
// at start); a live writer's file stays.
TEST_F(CheckpointTest, StaleTemporaryFilesOfDeadWritersAreRemoved) {
  pid_t child = fork();
  if (child == 0) _exit(0);
  int status = 0;
  waitpid(child, &status, 0);  // a pid that is no longer a process
  const std::string dead = "model.ckpt-7.tmp-" + std::to_string(child);
  const std::string live = "model.ckpt-8.tmp-" + std::to_string(getppid());
  const std::string own = "checkpoint.tmp-" + std::to_string(getpid());
  for (const auto& n : {dead, live, own, std::string("model.ckpt-9"), std::string("notes.tmp-1")})
    std::ofstream((dir_ / n).string()) << "xx";
  long pid = 0;
  EXPECT_TRUE(is_checkpoint_temporary(dead, &pid));
  EXPECT_EQ(pid, child);
  EXPECT_FALSE(is_checkpoint_temporary("model.ckpt-9", &pid));
  StaleFiles r = remove_stale_temporary_files(dir_.string(), false);
  EXPECT_EQ(r.files, 1);
  EXPECT_EQ(r.bytes, 2u);
  EXPECT_FALSE(fs::exists(dir_ / dead));
  EXPECT_TRUE(fs::exists(dir_ / live));
  EXPECT_TRUE(fs::exists(dir_ / own));
  r = remove_stale_temporary_files(dir_.string(), true);
  EXPECT_EQ(r.files, 1);
  EXPECT_FALSE(fs::exists(dir_ / own));
  EXPECT_TRUE(fs::exists(dir_ / live));
  EXPECT_TRUE(fs::exists(dir_ / "model.ckpt-9"));
  EXPECT_TRUE(fs::exists(dir_ / "notes.tmp-1"));
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

// CheckpointSeries keeps the newest --keep_checkpoints: the index names them, an older checkpoint goes with its rank
// files; a rank file without its checkpoint (a run killed between the two) and a killed writer's temporary file are
// removed by clean(); a resumed series adopts the steps on disk.
TEST_F(CheckpointTest, SeriesKeepsTheNewestAndCleansAfterAKilledRun) {
  const std::string d = dir_.string();
  CheckpointMeta m;
  m.model = "lenet", m.dataset = "mnist", m.image_size = 28, m.channels = 1, m.num_classes = 10;
  const std::vector<NamedTensor> tensors = {{"params/w", Tensor(w_.data(), Shape{3, 5}, DType::kF32, Device::cpu())}};
  const std::vector<NamedTensor> state = {{"r/w", Tensor(w_.data(), Shape{15}, DType::kF32, Device::cpu())}};
  CheckpointSeries series(d, 2);
  EXPECT_TRUE(series.empty());
  EXPECT_EQ(series.last(), "none");
  for (int64_t step : {10, 20, 30}) {
    for (int rank = 0; rank < 2; ++rank) series.write_rank_file(step, rank, m, state);
    m.step = step;
    m.rank_files = 2;
    series.write(step, m, tensors);
  }
  EXPECT_EQ(list_checkpoint_steps(d), (std::vector<int64_t>{20, 30}));
  EXPECT_EQ(series.last(), checkpoint_path(d, 30));
  EXPECT_FALSE(fs::exists(checkpoint_path(d, 10)));
  EXPECT_FALSE(fs::exists(checkpoint_rank_path(d, 10, 0)) || fs::exists(checkpoint_rank_path(d, 10, 1)));
  EXPECT_TRUE(fs::exists(checkpoint_rank_path(d, 20, 1)) && fs::exists(checkpoint_rank_path(d, 30, 0)));
  CheckpointReader rank1(checkpoint_rank_path(d, 30, 1));
  EXPECT_EQ(rank1.meta().rank_files, 1) << "a rank file's header names its rank";
  EXPECT_EQ(rank1.meta().step, 30);

  // A run killed after its ranks wrote step 40's files, before the checkpoint: clean() removes them.
  series.write_rank_file(40, 0, m, state);
  CheckpointSeries resumed(d, 2);
  resumed.clean();
  EXPECT_FALSE(fs::exists(checkpoint_rank_path(d, 40, 0)));
  EXPECT_TRUE(fs::exists(checkpoint_rank_path(d, 30, 0))) << "rank files of a checkpoint stay";
  resumed.adopt_existing();
  EXPECT_EQ(resumed.last(), checkpoint_path(d, 30));
  m.step = 50;
  m.rank_files = 0;
  resumed.write(50, m, tensors);
  EXPECT_EQ(list_checkpoint_steps(d), (std::vector<int64_t>{30, 50}));
  EXPECT_EQ(*latest_checkpoint(d), checkpoint_path(d, 50));
}

}  // namespace
}  // namespace tg

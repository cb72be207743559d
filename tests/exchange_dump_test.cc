// Tests of the exchange dumps (exchange/exchange_dump.h, --exchange_dump): a real CPU training (synthetic input, LeNet)
// writes one step's exchange and replay_exchange_dump redoes it and agrees bit for bit, for TernGrad (allgather2 with
// the weight decay added by the exchange, per-bucket scalers, allreduce8 over 2 replicas) and fp32; a dump with one
// code changed is found (the rank, tensor and element named) and exchange_replay exits 1; bad input (no manifest,
// a manifest of another format or without a member, a gradients file of the wrong shape, not a .npy file) is one
// line naming the file and what; the flags refuse what cannot be replayed.
#include "terngrad/exchange/exchange_dump.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/error_of.h"
#include "common/files.h"
#include "terngrad/core/error.h"
#include "terngrad/core/npy_file.h"
#include "terngrad/train/trainer.h"

namespace tg {
namespace {

namespace fs = std::filesystem;
using testing::error_of;

class ExchangeDumpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("tg_exchange_dump_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "dump");
  }
  void TearDown() override { fs::remove_all(root_); }

  TrainConfig config() const {
    TrainConfig c;
    c.train_dir = (root_ / "train").string();
    c.benchmark_mode = true;
    c.net = "lenet";
    c.threads = 1;
    c.num_nodes = 2;
    c.batch_size = 16;
    c.max_steps = 3;
    c.grad_bits = 1;
    c.clip_factor = 2.5f;
    c.exchange_dump = dump();
    c.exchange_dump_step = 2;
    return c;
  }
  std::string dump() const { return (root_ / "dump").string(); }

  fs::path root_;
};

TEST_F(ExchangeDumpTest, TernGradReplaysBitForBit) {
  Trainer(config()).run();
  ASSERT_TRUE(fs::exists(root_ / "dump" / "rank0_params.npy")) << "LeNet's weight decay is added by the exchange";
  const ExchangeReplayResult r = replay_exchange_dump(dump());
  EXPECT_TRUE(r.passed()) << r.summary();
  EXPECT_GT(r.ternary_elements, 1000000);
  EXPECT_EQ(r.ternary_mismatches, 0);
  EXPECT_EQ(r.worst_other, 0.0);  // one replica: the fp32 tensors' average is the replay's order too

  // One code changed: the average of one ternary element flips sign.
  const std::string avg = (root_ / "dump" / "rank0_average.npy").string();
  NpyArray a = read_npy_f32(avg);
  size_t k = 0;
  while (k < a.data.size() && a.data[k] == 0.f) ++k;
  ASSERT_LT(k, 500u) << "conv1/weights (the first 500 elements) has a non-zero average";
  a.data[k] = -a.data[k];
  write_npy(avg, a.data.data(), DType::kF32, a.shape);
  const ExchangeReplayResult bad = replay_exchange_dump(dump());
  EXPECT_FALSE(bad.passed());
  EXPECT_EQ(bad.ternary_mismatches, 1);
  EXPECT_NE(bad.first_mismatch.find(fmt::format("rank 0 conv1/weights[{}]", k)), std::string::npos)
      << bad.first_mismatch;
  std::string out;
  EXPECT_EQ(testing::run_command(std::string(TG_BINARY_DIR) + "/exchange_replay " + dump(), &out), 1) << out;
  EXPECT_NE(out.find("FAIL"), std::string::npos) << out;
}

TEST_F(ExchangeDumpTest, OtherExchangesReplay) {
  struct Variant {
    const char* what;
    int grad_bits;
    const char* exchange;
    int64_t scaler_bucket;
    int replicas;
  };
  for (const Variant& v :
       {Variant{"per-bucket scalers", 1, "allgather2", 1024, 1},
        Variant{"allreduce8, 2 replicas", 1, "allreduce8", 0, 2}, Variant{"fp32, 2 replicas", 32, "auto", 0, 2}}) {
    fs::remove_all(root_ / "train");
    fs::remove_all(root_ / "dump");
    fs::create_directories(root_ / "dump");
    TrainConfig c = config();
    c.grad_bits = v.grad_bits;
    c.exchange = v.exchange;
    c.scaler_bucket = v.scaler_bucket;
    c.cpu_replicas = v.replicas;
    c.threads = v.replicas;
    Trainer(c).run();
    const ExchangeReplayResult r = replay_exchange_dump(dump());
    EXPECT_TRUE(r.passed()) << v.what << ": " << r.summary();
    EXPECT_TRUE(fs::exists(root_ / "dump" / fmt::format("rank{}_average.npy", v.replicas - 1))) << v.what;
  }
}

TEST_F(ExchangeDumpTest, BadInputIsOneLineNamingTheFile) {
  EXPECT_NE(error_of([&] { replay_exchange_dump(dump()); }).find("exchange_dump.json: cannot open it"),
            std::string::npos);
  Trainer(config()).run();
  const std::string manifest = (root_ / "dump" / "exchange_dump.json").string();
  std::string text;
  {
    std::ifstream in(manifest);
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  auto rewrite = [&](const std::string& t) { std::ofstream(manifest, std::ios::trunc) << t; };
  std::string other = text;
  other.replace(other.find("dump 1"), 6, "dump 9");
  rewrite(other);
  EXPECT_NE(error_of([&] { replay_exchange_dump(dump()); }).find("format \"terngrad exchange dump 9\""),
            std::string::npos);
  std::string no_seed = text;
  no_seed.replace(no_seed.find("\"seed\""), 6, "\"sead\"");
  rewrite(no_seed);
  EXPECT_NE(error_of([&] { replay_exchange_dump(dump()); }).find("exchange_dump.json: no \"seed\""), std::string::npos);
  rewrite(text);
  const std::string grads = (root_ / "dump" / "rank0_gradients.npy").string();
  std::vector<float> one(10, 1.f);
  write_npy(grads, one.data(), DType::kF32, {10});
  const std::string shape = error_of([&] { replay_exchange_dump(dump()); });
  EXPECT_NE(shape.find("rank0_gradients.npy: shape 10, the manifest says 2 x "), std::string::npos) << shape;
  std::ofstream(grads, std::ios::trunc) << "not numpy";
  EXPECT_NE(error_of([&] { replay_exchange_dump(dump()); }).find("rank0_gradients.npy: not a .npy file"),
            std::string::npos);
  std::string out;
  EXPECT_EQ(testing::run_command(std::string(TG_BINARY_DIR) + "/exchange_replay " + dump() + " 2>&1", &out), 2);
  EXPECT_EQ(out.find('\n'), out.size() - 1) << "one line: " << out;
}

TEST_F(ExchangeDumpTest, FlagsRefuseWhatCannotBeReplayed) {
  TrainConfig c = config();
  c.error_feedback = true;
  EXPECT_NE(error_of([&] { c.resolve_defaults(), c.validate(1); }).find("--error_feedback"), std::string::npos);
  c = config();
  c.exchange = "hierarchical";
  EXPECT_NE(error_of([&] { c.resolve_defaults(), c.validate(1); }).find("--exchange hierarchical cannot be replayed"),
            std::string::npos);
  c = config();
  c.grad_bits = 16;
  EXPECT_NE(error_of([&] { c.resolve_defaults(), c.validate(1); }).find("cannot replay --grad_bits 16"),
            std::string::npos);
  c = config();
  c.quantization_error_every = 2;
  EXPECT_NE(error_of([&] { c.resolve_defaults(), c.validate(1); }).find("--quantization_error_every"),
            std::string::npos);
  c = config();
  c.exchange_dump = (root_ / "missing").string();
  EXPECT_NE(error_of([&] { c.resolve_defaults(), c.validate(1); }).find("not an existing folder"), std::string::npos);
}

}  // namespace
}  // namespace tg

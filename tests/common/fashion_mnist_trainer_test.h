// FashionMnistTrainerTest: the fixture of the tests that train through the Trainer on real Fashion-MNIST images
// (tests/trainer_test.cc, trainer_lenet_test.cc, quantization_probe_test.cc): the suite's shards written once
// (write_suite_shards; without Fashion-MNIST every test SKIPs), a fresh folder per test, and the small LeNet run the
// tests start from. `Data` names the suite's data: static constexpr kTag, kTrainCount, kTrainShards, kTestCount.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "common/fashion_mnist_shards.h"
#include "terngrad/train/train_config.h"

namespace tg::testing {

template <typename Data>
class FashionMnistTrainerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_dir_ = write_suite_shards(Data::kTag, Data::kTrainCount, Data::kTrainShards, Data::kTestCount);
  }
  static void TearDownTestSuite() {
    if (!data_dir_.empty()) std::filesystem::remove_all(data_dir_);
  }
  void SetUp() override {
    if (data_dir_.empty()) GTEST_SKIP() << "Fashion-MNIST not installed (scripts/setup.sh installs it)";
    root_ = fresh_test_dir(Data::kTag);
  }
  void TearDown() override {
    if (!root_.empty()) std::filesystem::remove_all(root_);
  }
  // LeNet, 2 workers in one process, total batch 32, 12 steps of TernGrad (clip 2.5) with momentum, one compute
  // thread and one reader, seed 5, into <root>/<train_dir>.
  TrainConfig small_lenet(const std::string& train_dir) const {
    TrainConfig c;
    c.train_dir = (root_ / train_dir).string();
    c.data_dir = data_dir_;
    c.dataset = "fashion_mnist";
    c.net = "lenet";
    c.num_nodes = 2;
    c.batch_size = 32;
    c.max_steps = 12;
    c.grad_bits = 1;
    c.clip_factor = 2.5f;
    c.optimizer = "momentum";
    c.threads = 1;
    c.num_readers = 1;
    c.shuffle_buffer = 256;
    c.seed = 5;
    return c;
  }

  static inline std::string data_dir_;
  std::filesystem::path root_;
};

}  // namespace tg::testing

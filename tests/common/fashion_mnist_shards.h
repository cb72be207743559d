// Real Fashion-MNIST images as a TFRecord dataset on disk, for the tests that train through the Trainer (which
// reads `<data_dir>/<subset>-*` shards): PNG tf.Examples as terngrad-data convert-idx writes them.
#pragma once

#include <string>

#include "common/fashion_mnist.h"

namespace tg::testing {

// Writes the first `count` images of `d` (loaded by load_fashion_mnist) as PNG tf.Examples into `shards` shards
// `<dir>/<subset>-NNNNN-of-NNNNN`, image i into shard i % shards.
void write_fashion_mnist_shards(const IdxDataset& d, const std::string& dir, const std::string& subset, int count,
                                int shards);

// A test suite's data set, written once per suite (SetUpTestSuite): the first train_count training images in
// train_shards shards and, when test_count > 0, the first test_count test images in one shard, into a fresh
// folder named after `tag` and the process. Returns the folder, or "" without Fashion-MNIST (the tests then SKIP).
std::string write_suite_shards(const std::string& tag, int train_count, int train_shards, int test_count);

// A fresh, empty folder for the running test (named after `tag`, the process and the test), for SetUp.
std::string fresh_test_dir(const std::string& tag);

}  // namespace tg::testing

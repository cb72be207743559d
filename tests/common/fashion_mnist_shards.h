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

}  // namespace tg::testing

// Loads the real Fashion-MNIST idx files of the Debian package dataset-fashion-mnist
// (/usr/share/datasets/fashion-mnist) for accuracy tests, scaled as the reference's LeNet preprocessing:
// x = (pixel/255 - 0.5) * 2 in [-1, 1], NHWC (N, 28, 28, 1).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tg::testing {

struct IdxDataset {
  int64_t count = 0, rows = 0, cols = 0;
  std::vector<float> images;    // (count, rows, cols, 1)
  std::vector<int32_t> labels;  // (count)
};

std::string fashion_mnist_dir();  // "" when the package is not installed; an Error instead when CI=true
// subset "train" (60000) or "t10k" (10000); throws tg::Error naming the file on a bad file.
IdxDataset load_fashion_mnist(const std::string& subset);

}  // namespace tg::testing

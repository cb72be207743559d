// Fashion-MNIST as TFRecord shards (fashion_mnist_shards.h).
#include "common/fashion_mnist_shards.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "terngrad/data/example.h"
#include "terngrad/data/image_codec.h"
#include "terngrad/data/tfrecord.h"

namespace tg::testing {

void write_fashion_mnist_shards(const IdxDataset& d, const std::string& dir, const std::string& subset, int count,
                                int shards) {
  std::filesystem::create_directories(dir);
  for (int s = 0; s < shards; ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "%s-%05d-of-%05d", subset.c_str(), s, shards);
    TfRecordWriter w((std::filesystem::path(dir) / name).string());
    for (int i = s; i < count; i += shards) {
      Image img;
      img.height = img.width = 28;
      img.channels = 1;
      img.pixels.resize(784);
      for (int p = 0; p < 784; ++p)  // undo the loader's (x/255 - 0.5) * 2
        img.pixels[p] = static_cast<uint8_t>(std::lround((d.images[i * 784 + p] / 2.f + 0.5f) * 255.f));
      ImageExample ex;
      ex.encoded = encode_png(img);
      ex.format = "png";
      ex.label = d.labels[i];
      ex.height = ex.width = 28;
      ex.channels = 1;
      w.write(build_image_example(ex));
    }
    w.close();
  }
}

std::string write_suite_shards(const std::string& tag, int train_count, int train_shards, int test_count) {
  if (fashion_mnist_dir().empty()) return "";
  const std::string dir =
      (std::filesystem::temp_directory_path() / (tag + "_data_" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  write_fashion_mnist_shards(load_fashion_mnist("train"), dir, "train", train_count, train_shards);
  if (test_count > 0) write_fashion_mnist_shards(load_fashion_mnist("t10k"), dir, "test", test_count, 1);
  return dir;
}

std::string fresh_test_dir(const std::string& tag) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      (tag + "_" + std::to_string(::getpid()) + "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

}  // namespace tg::testing

// Converters: idx -> shards -> InputPipeline gives back the exact pixels and labels (synthetic files and the
// installed Fashion-MNIST test set), CIFAR-10 binary layout, inspect, and atomic shard writing (class folders:
// build_image_data_test.cc).
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>

#include "common/fashion_mnist.h"
#include "common/files.h"
#include "terngrad/core/error.h"
#include "terngrad/data/converters.h"
#include "terngrad/data/example.h"
#include "terngrad/data/image_codec.h"
#include "terngrad/data/input_pipeline.h"
#include "terngrad/data/tfrecord.h"

namespace fs = std::filesystem;
using namespace tg;
using tg::testing::temp_dir;

namespace {

std::string be32(uint32_t v) {
  return std::string{static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
                     static_cast<char>(v)};
}

void write_gz(const fs::path& p, const std::string& data) {
  gzFile f = gzopen(p.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, data.data(), static_cast<unsigned>(data.size())), static_cast<int>(data.size()));
  gzclose(f);
}

// Every image and label of an eval pass of the pipeline, images as uint8 recovered from (x/255-0.5)*2.
void read_back(const PipelineOptions& o, std::vector<std::vector<uint8_t>>* images, std::vector<int>* labels) {
  InputPipeline p(o);
  Batch b;
  const size_t n = static_cast<size_t>(o.image_size) * o.image_size;
  while (p.next(&b))
    for (int r = 0; r < b.count; ++r) {
      std::vector<uint8_t> img(n);
      for (size_t i = 0; i < n; ++i)
        img[i] = static_cast<uint8_t>(std::lround((b.images[r * n + i] / 2.0f + 0.5f) * 255.0f));
      images->push_back(img);
      labels->push_back(b.labels[r]);
    }
}

}  // namespace

TEST(ConvertIdx, RoundTripThroughThePipelineIsExact) {
  fs::path dir = temp_dir("idx");
  const int n = 25, rows = 28, cols = 28;
  std::string images = be32(0x803) + be32(n) + be32(rows) + be32(cols), labels = be32(0x801) + be32(n);
  std::vector<std::vector<uint8_t>> want;
  for (int i = 0; i < n; ++i) {
    std::vector<uint8_t> img(rows * cols);
    for (int k = 0; k < rows * cols; ++k) img[k] = static_cast<uint8_t>((k * 7 + i * 31) % 256);
    images.append(img.begin(), img.end());
    labels.push_back(static_cast<char>(i % 10));
    want.push_back(img);
  }
  write_gz(dir / "t10k-images-idx3-ubyte.gz", images);
  write_gz(dir / "t10k-labels-idx1-ubyte.gz", labels);
  for (std::string format : {"png", "raw"}) {
    fs::path out = dir / ("out_" + format);
    ConvertIdxOptions o;
    o.images = (dir / "t10k-images-idx3-ubyte.gz").string();
    o.labels = (dir / "t10k-labels-idx1-ubyte.gz").string();
    o.output_dir = out.string();
    o.num_shards = 3;
    o.format = format;
    std::vector<std::string> paths = convert_idx(o);
    ASSERT_EQ(paths.size(), 3u);
    EXPECT_EQ(fs::path(paths[0]).filename(), "test-00000-of-00003");  // subset from the t10k name
    PipelineOptions po;
    po.data_dir = out.string();
    po.subset = "test";
    po.dataset = "fashion_mnist";
    po.image_size = 28;
    po.batch_size = 10;
    po.train = false;
    std::vector<std::vector<uint8_t>> got;
    std::vector<int> got_labels;
    read_back(po, &got, &got_labels);
    ASSERT_EQ(got.size(), static_cast<size_t>(n)) << format;
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(got[i], want[i]) << format << " image " << i;
      EXPECT_EQ(got_labels[i], i % 10);
    }
  }
  // Mismatched counts and wrong magic are clear errors.
  write_gz(dir / "short-labels.gz", be32(0x801) + be32(3) + std::string(3, '\1'));
  ConvertIdxOptions bad;
  bad.images = (dir / "t10k-images-idx3-ubyte.gz").string();
  bad.labels = (dir / "short-labels.gz").string();
  bad.output_dir = (dir / "bad").string();
  EXPECT_THROW(convert_idx(bad), Error);
  bad.labels = bad.images;
  try {
    convert_idx(bad);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not an idx1 label file"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir / "bad" / "test-00000-of-00001"));
  fs::remove_all(dir);
}

TEST(ConvertIdx, InstalledFashionMnistTestSet) {
  const fs::path src = tg::testing::fashion_mnist_dir();  // CI=true: an Error when missing, never a skip
  if (src.empty()) GTEST_SKIP() << "Fashion-MNIST not installed (scripts/setup.sh installs dataset-fashion-mnist)";
  fs::path dir = temp_dir("fashion");
  ConvertIdxOptions o;
  o.images = (src / "t10k-images-idx3-ubyte.gz").string();
  o.labels = (src / "t10k-labels-idx1-ubyte.gz").string();
  o.output_dir = dir.string();
  o.num_shards = 2;
  convert_idx(o);
  InspectReport r = inspect_files(list_data_files(dir.string(), "test"), false);
  EXPECT_EQ(r.records, 10000);
  EXPECT_EQ(r.corrupt, 0);
  ASSERT_EQ(r.labels.size(), 10u);
  for (const auto& [label, count] : r.labels) EXPECT_EQ(count, 1000) << "label " << label;  // balanced test set
  EXPECT_EQ(r.image_sizes.at("28x28x1"), 10000);
  // The pipeline gives back the idx pixels of the first and last images.
  IdxImages idx = read_idx_images(o.images);
  std::vector<uint8_t> labels = read_idx_labels(o.labels);
  PipelineOptions po;
  po.data_dir = dir.string();
  po.subset = "test";
  po.dataset = "fashion_mnist";
  po.image_size = 28;
  po.batch_size = 128;
  po.train = false;
  std::vector<std::vector<uint8_t>> got;
  std::vector<int> got_labels;
  read_back(po, &got, &got_labels);
  ASSERT_EQ(got.size(), 10000u);
  for (int i : {0, 1, 4999, 5000, 9999}) {
    EXPECT_TRUE(std::equal(got[i].begin(), got[i].end(), idx.pixels.begin() + i * 784)) << "image " << i;
    EXPECT_EQ(got_labels[i], labels[i]);
  }
  fs::remove_all(dir);
}

TEST(ConvertCifar10, PlanesBecomeInterleavedPixels) {
  fs::path dir = temp_dir("cifar");
  auto batch = [&](const std::string& name, int count, int base) {
    std::ofstream f(dir / name, std::ios::binary);
    for (int i = 0; i < count; ++i) {
      f.put(static_cast<char>((base + i) % 10));
      for (int c = 0; c < 3; ++c)
        for (int p = 0; p < 1024; ++p) f.put(static_cast<char>((p + 50 * c + base + i) % 256));
    }
  };
  for (int b = 1; b <= 5; ++b) batch("data_batch_" + std::to_string(b) + ".bin", 2, b * 10);
  batch("test_batch.bin", 3, 100);
  ConvertCifar10Options o;
  o.input_dir = dir.string();
  o.output_dir = (dir / "out").string();
  o.train_shards = 2;
  std::vector<std::string> paths = convert_cifar10(o);
  EXPECT_EQ(paths.size(), 3u);
  auto test = read_all_tfrecords((dir / "out" / "test-00000-of-00001").string());
  ASSERT_EQ(test.size(), 3u);
  ImageExample ex = parse_image_example(test[1], "t");
  EXPECT_EQ(ex.label, 101 % 10);
  Image img = decode_image(ex.encoded, ex.format, 0, 0, 0, 0, "t");
  ASSERT_EQ(img.channels, 3);
  ASSERT_EQ(img.height, 32);
  for (int p : {0, 33, 1023})
    for (int c = 0; c < 3; ++c) EXPECT_EQ(img.pixels[p * 3 + c], (p + 50 * c + 101) % 256);
  InspectReport r = inspect_files(list_data_files((dir / "out").string(), "train"), true);
  EXPECT_EQ(r.records, 10);
  EXPECT_EQ(r.image_sizes.at("32x32x3"), 10);
  fs::remove(dir / "test_batch.bin");
  EXPECT_THROW(convert_cifar10(o), Error);
  fs::remove_all(dir);
}

TEST(Inspect, ReportsCorruptRecords) {
  fs::path dir = temp_dir("inspect");
  fs::path f = dir / "train-00000-of-00001";
  {
    TfRecordWriter w(f.string());
    ImageExample ex;
    ex.encoded = "abc";
    ex.label = 3;
    w.write(build_image_example(ex));
    w.write(build_image_example(ex));
    w.close();
  }
  fs::resize_file(f, fs::file_size(f) - 1);
  InspectReport r = inspect_files({f.string()}, false);
  EXPECT_EQ(r.records, 1);
  EXPECT_EQ(r.corrupt, 1);
  ASSERT_FALSE(r.errors.empty());
  EXPECT_NE(r.errors[0].find("truncated"), std::string::npos);
  EXPECT_NE(format_report(r).find("image/class/label (1)"), std::string::npos);
  fs::remove_all(dir);
}

TEST(WriteSharded, FailureLeavesNoShardUnderItsFinalName) {
  fs::path dir = temp_dir("atomic");
  EXPECT_THROW(write_sharded(10, 2, "--train_shards", dir.string(), "train", 2,
                             [](size_t i) -> std::string {
                               if (i == 7) TG_THROW("example {} failed", i);
                               return "x";
                             }),
               Error);
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_NE(e.path().filename(), "train-00001-of-00002") << "half-written shard left behind";
  // No temporaries either.
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
  try {
    write_sharded(1, 2, "--train_shards", dir.string(), "train", 1, [](size_t) { return std::string(); });
    FAIL() << "1 example filled 2 shards";
  } catch (const Error& e) {  // the flag to change is named
    EXPECT_STREQ(e.what(),
                 "1 examples cannot fill 2 train shards: give --train_shards 1 or fewer (each shard holds at least one "
                 "example)");
  }
  fs::remove_all(dir);
}

// Converters: idx -> shards -> InputPipeline gives back the exact pixels and labels (synthetic files and the
// installed Fashion-MNIST test set), CIFAR-10 binary layout, class folders (labels 1..K, resize, RAW),
// inspect, and atomic shard writing.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <set>

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

TEST(BuildImageData, ClassFoldersToShards) {
  fs::path dir = temp_dir("folders");
  const std::vector<std::string> classes = {"n01440764", "n01443537"};
  {
    std::ofstream lf(dir / "labels.txt");
    for (auto& c : classes) lf << c << "\n";
  }
  int count = 0;
  for (const char* subset : {"train", "validation"})
    for (size_t k = 0; k < classes.size(); ++k) {
      fs::create_directories(dir / subset / classes[k]);
      for (int i = 0; i < 3; ++i, ++count) {
        Image img;
        img.height = 40 + i * 10;
        img.width = 60;
        img.channels = 3;
        img.pixels.assign(img.size(), static_cast<uint8_t>(60 * k + 20));
        std::string bytes = i == 2 ? encode_png(img) : encode_jpeg(img, 95);
        std::ofstream f(dir / subset / classes[k] / (std::to_string(i) + (i == 2 ? ".png" : ".JPEG")),
                        std::ios::binary);
        f << bytes;
      }
    }
  BuildImageDataOptions o;
  o.train_directory = (dir / "train").string();
  o.validation_directory = (dir / "validation").string();
  o.labels_file = (dir / "labels.txt").string();
  o.output_dir = (dir / "out").string();
  o.train_shards = 2;
  o.validation_shards = 1;
  o.num_threads = 2;
  std::vector<std::string> paths = build_image_data(o);
  EXPECT_EQ(paths.size(), 3u);
  InspectReport r = inspect_files(list_data_files(o.output_dir, "train"), true);
  EXPECT_EQ(r.records, 6);
  EXPECT_EQ(r.corrupt + r.undecodable, 0);
  EXPECT_EQ(r.labels, (std::map<int64_t, int64_t>{{1, 3}, {2, 3}}));  // 1..K, 0 is background
  EXPECT_EQ(r.formats.at("JPEG"), 6);
  EXPECT_EQ(r.feature_keys.count("image/filename"), 1u);
  // Labels match the folder colour, and the pipeline reads them with ImageNet preprocessing.
  for (const auto& rec : read_all_tfrecords(paths[0])) {
    ImageExample ex = parse_image_example(rec, "t");
    Image img = decode_image(ex.encoded, ex.format, 0, 0, 0, 3, "t");
    EXPECT_NEAR(img.pixels[0], 60 * (ex.label - 1) + 20, 3);
    EXPECT_EQ(ex.class_text, classes[ex.label - 1]);
  }
  PipelineOptions po;
  po.data_dir = o.output_dir;
  po.subset = "validation";
  po.dataset = "imagenet";
  po.imagenet_preprocessing = PreprocessKind::kAlexnet;
  po.image_size = 32;
  po.batch_size = 4;
  po.train = false;
  {
    InputPipeline p(po);
    Batch b;
    int seen = 0;
    while (p.next(&b)) seen += b.count;
    EXPECT_EQ(seen, 6);
  }
  // Resize + RAW pixels.
  o.output_dir = (dir / "raw").string();
  o.validation_directory.clear();
  o.validation_fraction = 0;  // no validation subset held out
  o.resize = 16;
  o.raw_pixel = true;
  build_image_data(o);
  InspectReport raw = inspect_files(list_data_files(o.output_dir, "train"), true);
  EXPECT_EQ(raw.formats.at("RAW"), 6);
  EXPECT_EQ(raw.image_sizes.at("16x16x3"), 6);
  // Without --labels_file: the classes are the train folder's sub-folders, sorted, recorded in labels.txt beside the
  // shards; shard counts fit the images (6 train, 6 validation: one each, not 1024 and 128).
  BuildImageDataOptions auto_o;
  auto_o.train_directory = (dir / "train").string();
  auto_o.validation_directory = (dir / "validation").string();
  auto_o.output_dir = (dir / "auto").string();
  auto_o.num_threads = 2;
  EXPECT_EQ(build_image_data(auto_o).size(), 12u);
  EXPECT_EQ(tg::testing::slurp(dir / "auto" / "labels.txt"), "n01440764\nn01443537\n");
  EXPECT_EQ(inspect_files(list_data_files(auto_o.output_dir, "train"), true).labels,
            (std::map<int64_t, int64_t>{{1, 3}, {2, 3}}));
  // No validation folder: --validation_fraction of each class is held out of the train images (seeded): 3 images a
  // class at 0.5 -> 2 to validation, 1 to train; the same split every time; a class of one image is refused.
  BuildImageDataOptions held = auto_o;
  held.validation_directory.clear();
  held.validation_fraction = 0.5;
  held.output_dir = (dir / "held").string();
  build_image_data(held);
  EXPECT_EQ(inspect_files(list_data_files(held.output_dir, "train"), true).labels,
            (std::map<int64_t, int64_t>{{1, 1}, {2, 1}}));
  EXPECT_EQ(inspect_files(list_data_files(held.output_dir, "validation"), true).labels,
            (std::map<int64_t, int64_t>{{1, 2}, {2, 2}}));
  auto validation_files = [&] {  // the held-out images, by class and file name
    std::set<std::string> names;
    for (const std::string& shard : list_data_files(held.output_dir, "validation"))
      for (const auto& rec : read_all_tfrecords(shard)) {
        const ImageExample ex = parse_image_example(rec, shard);
        names.insert(ex.class_text + "/" + ex.filename);
      }
    return names;
  };
  const std::set<std::string> first = validation_files();
  EXPECT_EQ(first.size(), 4u);
  build_image_data(held);
  EXPECT_EQ(validation_files(), first) << "the split is seeded";
  fs::create_directories(dir / "train1" / "a");
  fs::create_directories(dir / "train1" / "b");
  fs::copy_file(dir / "train" / "n01440764" / "0.JPEG", dir / "train1" / "a" / "0.JPEG");
  fs::copy_file(dir / "train" / "n01440764" / "1.JPEG", dir / "train1" / "b" / "1.JPEG");
  fs::copy_file(dir / "train" / "n01440764" / "0.JPEG", dir / "train1" / "b" / "0.JPEG");
  held.train_directory = (dir / "train1").string();
  held.output_dir = (dir / "held1").string();
  try {
    build_image_data(held);
    FAIL() << "a class of one image was split";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("class 'a' has 1 image(s): too few to hold out --validation_fraction 0.5"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(dir / "held1" / "labels.txt")) << "nothing written";
  // An empty class folder and a folder with no class folders are named.
  fs::create_directories(dir / "train" / "n00000000");
  try {
    build_image_data(auto_o);
    FAIL() << "an empty class folder was converted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("n00000000' holds no image"), std::string::npos) << e.what();
  }
  fs::remove(dir / "train" / "n00000000");
  auto_o.train_directory = (dir / "train" / "n01440764").string();
  try {
    build_image_data(auto_o);
    FAIL() << "a folder of images taken as a folder of classes";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no class sub-folders"), std::string::npos) << e.what();
  }
  // A missing class folder is named.
  std::ofstream(dir / "labels.txt", std::ios::app) << "n99999999\n";
  try {
    build_image_data(o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("n99999999"), std::string::npos) << e.what();
  }
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

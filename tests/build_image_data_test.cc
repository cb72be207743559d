// build-image-data: class folders -> shards (labels 1..K, resize, RAW, the seeded validation split), the scan
// before any write (files that are not images skipped and listed, unreadable images refused with nothing
// written), one channel count and size for every image, and the description the trainer reads (dataset.json).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "common/files.h"
#include "terngrad/core/error.h"
#include "terngrad/data/converters.h"
#include "terngrad/data/dataset_description.h"
#include "terngrad/data/dataset_info.h"
#include "terngrad/data/example.h"
#include "terngrad/data/image_codec.h"
#include "terngrad/data/input_pipeline.h"
#include "terngrad/data/tfrecord.h"

namespace fs = std::filesystem;
using namespace tg;
using tg::testing::temp_dir;

namespace {

Image flat_image(int height, int width, int channels, uint8_t value) {
  Image img;
  img.height = height;
  img.width = width;
  img.channels = channels;
  img.pixels.assign(img.size(), value);
  return img;
}

// The message of the tg::Error `f` throws ("" when it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The output folder's entries, hidden ones included.
std::set<std::string> entries(const fs::path& dir) {
  std::set<std::string> names;
  if (fs::exists(dir))
    for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

// The labels an evaluation pass of the pipeline reads from <data_dir>/validation-* as `dataset` (AlexNet's ImageNet
// preprocessing at 32x32).
std::multiset<int> validation_labels(const std::string& data_dir, const std::string& dataset) {
  PipelineOptions po;
  po.data_dir = data_dir;
  po.subset = "validation";
  po.dataset = dataset;
  po.imagenet_preprocessing = PreprocessKind::kAlexnet;
  po.image_size = 32;
  po.batch_size = 4;
  po.train = false;
  InputPipeline p(po);
  Batch b;
  std::multiset<int> labels;
  while (p.next(&b))
    for (int i = 0; i < b.count; ++i) labels.insert(b.labels[i]);
  return labels;
}

}  // namespace

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
  EXPECT_EQ(validation_labels(o.output_dir, "imagenet"), (std::multiset<int>{1, 1, 1, 2, 2, 2}));
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
  // shards; shard counts fit the images (6 train, 6 validation: one shard each, not 1024 and 128).
  BuildImageDataOptions auto_o;
  auto_o.train_directory = (dir / "train").string();
  auto_o.validation_directory = (dir / "validation").string();
  auto_o.output_dir = (dir / "auto").string();
  auto_o.num_threads = 2;
  EXPECT_EQ(build_image_data(auto_o).size(), 2u);
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

// A photo folder as people have them: colour JPEGs and gray PNGs of several sizes, a notes file and a .DS_Store.
// Every image becomes one channel count and size (mixed sizes: 256x256), the other files are skipped and listed,
// and dataset.json says what the trainer needs; its facts are dataset_info("custom", folder).
TEST(BuildImageData, MixedImagesBecomeOneDescribedDataset) {
  const fs::path dir = temp_dir("mixed");
  for (int k = 0; k < 3; ++k)
    for (int i = 0; i < 5; ++i) {
      const fs::path folder = dir / "photos" / ("class" + std::to_string(k));
      fs::create_directories(folder);
      const uint8_t v = static_cast<uint8_t>(50 * k + 30);
      if (i % 2 == 0)
        tg::testing::dump(folder / (std::to_string(i) + ".jpg"), encode_jpeg(flat_image(30 + 7 * i, 40, 3, v), 95));
      else
        tg::testing::dump(folder / (std::to_string(i) + ".png"), encode_png(flat_image(20, 20 + 9 * i, 1, v)));
    }
  tg::testing::dump(dir / "photos" / "class0" / "notes.txt", "taken in May");
  tg::testing::dump(dir / "photos" / "class1" / ".DS_Store", std::string("\0\1\2", 3));
  BuildImageDataOptions o;
  o.train_directory = (dir / "photos").string();
  o.output_dir = (dir / "out").string();
  o.validation_fraction = 0.2;  // 1 of each class's 5
  o.num_threads = 2;
  EXPECT_EQ(build_image_data(o).size(), 2u);
  EXPECT_EQ(entries(dir / "out"),
            (std::set<std::string>{"dataset.json", "labels.txt", "train-00000-of-00001", "validation-00000-of-00001"}));
  InspectReport r = inspect_files(list_data_files(o.output_dir, "train"), true);
  EXPECT_EQ(r.image_sizes, (std::map<std::string, int64_t>{{"256x256x3", 12}}));
  const std::optional<DatasetDescription> d = find_dataset_description(o.output_dir);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->classes, (std::vector<std::string>{"class0", "class1", "class2"}));
  EXPECT_EQ(d->num_classes(), 4);
  EXPECT_EQ(d->channels, 3);
  EXPECT_EQ(d->height, 256);
  EXPECT_EQ(d->width, 256);
  EXPECT_EQ(d->examples, (std::map<std::string, int64_t>{{"train", 12}, {"validation", 3}}));
  EXPECT_EQ(d->skipped, (std::vector<std::string>{(dir / "photos" / "class0" / "notes.txt").string(),
                                                  (dir / "photos" / "class1" / ".DS_Store").string()}));
  const DatasetInfo info = dataset_info("custom", o.output_dir);
  EXPECT_EQ(info.num_classes, 4);
  EXPECT_EQ(info.channels, 3);
  EXPECT_EQ(info.train_examples, 12);
  EXPECT_EQ(info.eval_examples, 3);
  EXPECT_EQ(info.eval_subset, "validation");
  EXPECT_EQ(info.default_image_size, 256);
  EXPECT_NE(error_of([&] { dataset_info("custom", (dir / "photos").string()); }).find("dataset.json does not exist"),
            std::string::npos);
  EXPECT_NE(error_of([] { dataset_info("custom"); }).find("--data_dir"), std::string::npos);
  // The pipeline reads it as --dataset custom: labels 1..3, the colour of each class.
  EXPECT_EQ(validation_labels(o.output_dir, "custom"), (std::multiset<int>{1, 2, 3}));

  // --resize 0 keeps each size (the description says none); all gray -> 1 channel, kept sizes when one size.
  o.resize = 0;
  o.output_dir = (dir / "kept").string();
  build_image_data(o);
  EXPECT_EQ(find_dataset_description(o.output_dir)->height, 0);
  EXPECT_GT(inspect_files(list_data_files(o.output_dir, "train"), true).image_sizes.size(), 2u);
  const fs::path gray = dir / "gray";
  for (const char* c : {"a", "b"})
    for (int i = 0; i < 3; ++i) {
      fs::create_directories(gray / c);
      tg::testing::dump(gray / c / (std::to_string(i) + ".png"),
                        encode_png(flat_image(28, 28, 1, c[0] == 'a' ? 10 : 200)));
    }
  BuildImageDataOptions g;
  g.train_directory = gray.string();
  g.output_dir = (dir / "gray_out").string();
  g.validation_fraction = 0;
  build_image_data(g);
  const DatasetDescription gd = *find_dataset_description(g.output_dir);
  EXPECT_EQ(gd.channels, 1);
  EXPECT_EQ(gd.height, 28);  // one size up to 512: kept
  EXPECT_EQ(inspect_files(list_data_files(g.output_dir, "train"), true).image_sizes,
            (std::map<std::string, int64_t>{{"28x28x1", 6}}));
  g.channels = 3;  // asked for: gray replicated
  g.output_dir = (dir / "gray_rgb").string();
  build_image_data(g);
  EXPECT_EQ(find_dataset_description(g.output_dir)->channels, 3);
  EXPECT_EQ(inspect_files(list_data_files(g.output_dir, "train"), true).image_sizes,
            (std::map<std::string, int64_t>{{"28x28x3", 6}}));
  fs::remove_all(dir);
}

// An image that cannot be read is refused naming it, and the output folder keeps what it held: a file named as an
// image that is not one (refused at the scan) and a truncated JPEG (refused while writing, after other shards were
// written: they never leave the staging folder).
TEST(BuildImageData, AnUnreadableImageIsNamedAndNothingIsWritten) {
  const fs::path dir = temp_dir("unreadable");
  for (const char* c : {"a", "b"})
    for (int i = 0; i < 4; ++i) {
      fs::create_directories(dir / "photos" / c);
      tg::testing::dump(dir / "photos" / c / (std::to_string(i) + ".jpg"), encode_jpeg(flat_image(40, 40, 3, 90), 95));
    }
  BuildImageDataOptions o;
  o.train_directory = (dir / "photos").string();
  o.output_dir = (dir / "out").string();
  o.validation_fraction = 0;
  o.train_shards = 4;
  build_image_data(o);
  const std::set<std::string> before = entries(dir / "out");
  const std::string first_shard = tg::testing::slurp(dir / "out" / "train-00000-of-00004");
  ASSERT_FALSE(first_shard.empty());

  const fs::path fake = dir / "photos" / "b" / "9.jpg";
  tg::testing::dump(fake, "<html>not found</html>");
  o.train_shards = 2;
  EXPECT_NE(error_of([&] { build_image_data(o); }).find(fake.string() + ": neither JPEG nor PNG"), std::string::npos);
  EXPECT_EQ(entries(dir / "out"), before);
  fs::remove(fake);

  const fs::path cut = dir / "photos" / "b" / "3.jpg";
  const std::string whole = tg::testing::slurp(cut);
  tg::testing::dump(cut, whole.substr(0, whole.size() / 2));
  o.num_threads = 1;
  const std::string why = error_of([&] { build_image_data(o); });
  EXPECT_NE(why.find(cut.string() + ": undecodable JPEG"), std::string::npos) << why;
  EXPECT_EQ(entries(dir / "out"), before) << "no staging folder left, no shard replaced";
  EXPECT_EQ(tg::testing::slurp(dir / "out" / "train-00000-of-00004"), first_shard);
  // Reconverted once fixed: the earlier conversion's 4 shards are replaced by the 2 asked for.
  tg::testing::dump(cut, whole);
  build_image_data(o);
  EXPECT_EQ(list_data_files(o.output_dir, "train").size(), 2u);
  fs::remove_all(dir);
}

// The scan reads a file's first 256 KiB: a JPEG whose header comes after more metadata than that (five 60 KB APP15
// segments) is read whole, converted, not refused.
TEST(BuildImageData, AHeaderAfterLargeMetadataIsFound) {
  const fs::path dir = temp_dir("metadata");
  std::string jpeg = encode_jpeg(flat_image(24, 32, 3, 120), 95);
  std::string segments;
  for (int i = 0; i < 5; ++i) {
    const int length = 60000;  // the segment's length field counts itself
    segments += std::string("\xff\xef", 2) + static_cast<char>(length >> 8) + static_cast<char>(length & 0xff);
    segments += std::string(length - 2, 'x');
  }
  jpeg.insert(2, segments);  // after SOI
  ASSERT_GT(jpeg.size(), 256u * 1024);
  for (const char* c : {"a", "b"}) {
    fs::create_directories(dir / "photos" / c);
    tg::testing::dump(dir / "photos" / c / "big.jpg", jpeg);
    tg::testing::dump(dir / "photos" / c / "small.jpg", encode_jpeg(flat_image(24, 32, 3, 60), 95));
  }
  BuildImageDataOptions o;
  o.train_directory = (dir / "photos").string();
  o.output_dir = (dir / "out").string();
  o.validation_fraction = 0;
  build_image_data(o);
  EXPECT_EQ(find_dataset_description(o.output_dir)->height, 24);
  EXPECT_EQ(inspect_files(list_data_files(o.output_dir, "train"), true).image_sizes,
            (std::map<std::string, int64_t>{{"24x32x3", 4}}));
  fs::remove_all(dir);
}

TEST(BuildImageData, BadOptionsAreNamed) {
  BuildImageDataOptions o;
  o.output_dir = temp_dir("bad_options").string();
  o.train_directory = o.output_dir;
  o.channels = 2;
  EXPECT_NE(error_of([&] { build_image_data(o); }).find("--channels 2 is not 0 (automatic), 1 or 3"),
            std::string::npos);
  o.channels = 0;
  o.resize = -2;
  EXPECT_NE(error_of([&] { build_image_data(o); }).find("--resize -2 outside"), std::string::npos);
  EXPECT_EQ(automatic_shards(0, 1024), 1);
  EXPECT_EQ(automatic_shards(256, 1024), 1);
  EXPECT_EQ(automatic_shards(257, 1024), 2);
  EXPECT_EQ(automatic_shards(1281167, 1024), 1024);
}

// Dataset converters behind `terngrad-data`: raw datasets -> sharded TFRecord files of image tf.Examples
// (keys in example.h), and `inspect`, which reads shards back and summarises them.
//
// Shards are named "<prefix>-NNNNN-of-NNNNN" (also when compressed: TF names no suffix either); example i of n goes to
// shard s with s*n/S <= i < (s+1)*n/S (contiguous blocks, in input order). Each shard is written by one thread through
// TfRecordWriter (temporary name, then rename), so an interrupted conversion never leaves a half-written shard under a
// final name.
#pragma once

#include <cstdint>
#include <functional>
#include <istream>
#include <map>
#include <string>
#include <vector>

#include "terngrad/data/tfrecord.h"

namespace tg {

std::string shard_name(const std::string& prefix, int shard, int num_shards);

// Writes num_examples examples, make_example(i) giving the serialized Example i, into num_shards shards in
// output_dir (created if missing), shards spread over num_threads threads. Returns the shard paths. shards_flag:
// the converter's flag that set num_shards, named when there are fewer examples than shards.
std::vector<std::string> write_sharded(size_t num_examples, int num_shards, const std::string& shards_flag,
                                       const std::string& output_dir, const std::string& prefix, int num_threads,
                                       const std::function<std::string(size_t)>& make_example,
                                       TfRecordCompression compression = TfRecordCompression::kNone);

// ---- MNIST / Fashion-MNIST idx files ------------------------------------------------------------------
struct IdxImages {
  int count = 0, rows = 0, cols = 0;
  std::vector<uint8_t> pixels;  // (count, rows, cols)
};
IdxImages read_idx_images(const std::string& path);  // .gz or plain; throws tg::Error naming the file
std::vector<uint8_t> read_idx_labels(const std::string& path);

struct ConvertIdxOptions {
  std::string images, labels, output_dir;
  std::string subset;  // "train" or "test"; empty: from the file name (t10k -> test, else train)
  int num_shards = 1;
  std::string format = "png";  // "png" (as the reference) or "raw"
  int num_threads = 2;
  TfRecordCompression compression = TfRecordCompression::kNone;  // --compression gzip|zlib|none
};
std::vector<std::string> convert_idx(const ConvertIdxOptions& opt);

// ---- CIFAR-10 binary batches ---------------------------------------------------------------------------
struct ConvertCifar10Options {
  std::string input_dir;  // holds data_batch_{1..5}.bin and test_batch.bin (or a cifar-10-batches-bin/ in it)
  std::string output_dir;
  int train_shards = 10, test_shards = 1;
  int num_threads = 2;
  TfRecordCompression compression = TfRecordCompression::kNone;
};
std::vector<std::string> convert_cifar10(const ConvertCifar10Options& opt);

// ---- a folder per class of JPEG/PNG images (ImageNet layout) ------------------------------------------
struct BuildImageDataOptions {
  std::string train_directory, validation_directory;  // either may be empty to skip that subset
  // One class folder name per line; line k (0-based) gets label k + 1 (0 stays the reference's background class, so
  // a model of K classes has --num_classes K + 1). Empty: the sorted sub-folders of the train (else validation)
  // directory. Either way <output_dir>/labels.txt records the classes in label order.
  std::string labels_file;
  std::string output_dir;
  int train_shards = 0, validation_shards = 0;  // 0: the reference's 1024 and 128, fewer when there are fewer images
  // Without a validation_directory: this fraction of each class's train images (seeded; at least one) becomes the
  // validation subset; 0: none.
  double validation_fraction = 0.1;
  int num_threads = 8;
  int resize = 0;          // > 0: resize every image to resize x resize (bilinear, aspect not kept)
  int quality = 90;        // JPEG quality when an image must be (re-)encoded
  bool raw_pixel = false;  // store decoded RGB bytes with image/format "RAW"
  uint64_t seed = 12345;   // order shuffle, as the reference's random.seed(12345)
  TfRecordCompression compression = TfRecordCompression::kNone;
};
// A labels file (a --labels_file, or the labels.txt build_image_data writes): its class names, one a line, blanks
// around them and empty lines dropped; line k (0-based) is label k + 1.
std::vector<std::string> read_class_list(std::istream& in);
// JPEG files are stored byte for byte unless they must change (resize, grayscale/CMYK, which become RGB) and PNG files
// are re-encoded as JPEG, both at `quality`; with raw_pixel every image is stored decoded (RGB).
std::vector<std::string> build_image_data(const BuildImageDataOptions& opt);

// ---- inspect ----------------------------------------------------------------------------------------------
struct InspectReport {
  int64_t records = 0, corrupt = 0, undecodable = 0;
  std::map<std::string, int64_t> records_per_file;
  std::map<std::string, int64_t> feature_keys;  // key -> records holding it
  std::map<int64_t, int64_t> labels;            // label -> count
  std::map<std::string, int64_t> image_sizes;   // "HxWxC" -> count
  std::map<std::string, int64_t> formats;
  std::vector<std::string> errors;  // first problems, one line each
};
// Reads every record of every file (checking both CRCs); with decode, decodes every image too (else the
// sizes come from image/height,width,channels when present).
InspectReport inspect_files(const std::vector<std::string>& files, bool decode);
std::string format_report(const InspectReport& r);

}  // namespace tg

// Dataset converters behind `terngrad-data`: raw datasets -> sharded TFRecord files of image tf.Examples
// (keys in example.h), and `inspect`, which reads shards back and summarises them.
//
// Shards are named "<prefix>-NNNNN-of-NNNNN" (also when compressed: TF names no suffix either); example i of n goes to
// shard s with s*n/S <= i < (s+1)*n/S (contiguous blocks, in input order). Each shard is written by one thread through
// TfRecordWriter (temporary name, then rename), so an interrupted conversion never leaves a half-written shard under a
// final name.
#pragma once

#include <cstddef>
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

// ---- a folder per class of JPEG/PNG images (ImageNet layout; build_image_data.cc) ----------------------------
struct BuildImageDataOptions {
  // Folders of one sub-folder of images per class (--input_dir is --train_directory's other name); either may be
  // empty to skip that subset.
  std::string train_directory, validation_directory;
  // One class folder name per line; line k (0-based) gets label k + 1 (0 stays the reference's background class, so
  // a model of K classes has --num_classes K + 1). Empty: the sorted sub-folders of the train (else validation)
  // directory. Either way <output_dir>/labels.txt records the classes in label order.
  std::string labels_file;
  std::string output_dir;
  // 0: one shard per 256 images (kImagesPerAutomaticShard), at least 1, at most the reference's 1024 and 128.
  int train_shards = 0, validation_shards = 0;
  // Without a validation_directory: this fraction of each class's train images (seeded; at least one) becomes the
  // validation subset; 0: none.
  double validation_fraction = 0.1;
  int num_threads = 8;
  // -1 (automatic): images that share one size up to 512x512 keep it, otherwise every image becomes 256x256;
  // 0: every image keeps its own size; > 0: every image becomes resize x resize (bilinear, aspect not kept).
  int resize = -1;
  // 0 (automatic): 1 when every image is grayscale, else 3 (gray images replicated, CMYK converted); or 1, 3.
  int channels = 0;
  int quality = 90;        // JPEG quality when an image must be (re-)encoded
  bool raw_pixel = false;  // store decoded pixels with image/format "RAW"
  uint64_t seed = 12345;   // order shuffle, as the reference's random.seed(12345)
  TfRecordCompression compression = TfRecordCompression::kNone;
};
inline constexpr size_t kImagesPerAutomaticShard = 256;
// The shard count of `images` images when none is given: one per 256, in [1, reference].
int automatic_shards(size_t images, int reference);
// A labels file (a --labels_file, or the labels.txt build_image_data writes): its class names, one a line, blanks
// around them and empty lines dropped; line k (0-based) is label k + 1.
std::vector<std::string> read_class_list(std::istream& in);
// Every file of every class folder is scanned first (its first bytes): one neither JPEG nor PNG by them is skipped
// (named in a warning and in the description) unless its name ends in .jpg/.jpeg/.png, and such a file or an image
// whose header cannot be read is refused naming it, before anything is written. JPEG files are stored byte for byte
// unless they must change (resize, channel conversion) and PNG files are re-encoded as JPEG, both at `quality`; with
// raw_pixel every image is stored decoded. Shards are written into a hidden folder in output_dir and moved into place
// (replacing an earlier conversion's shards of the subset) only when every image converted; then labels.txt and
// dataset.json (data/dataset_description.h) are written. Returns the shard paths.
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

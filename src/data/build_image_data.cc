// build-image-data: a folder of class folders of JPEG/PNG images -> TFRecord shards, labels.txt and dataset.json
// (contract in converters.h). Three steps: scan (every file's header: images listed, other files skipped, an image
// that cannot be read refused before anything is written), decide (one channel count, one size, the validation
// split, shard counts), write (shards into a staging folder, moved into the output folder only when every image
// converted, then the labels and the description).
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <tuple>
#include <utility>

#include "terngrad/core/atomic_file.h"
#include "terngrad/core/error.h"
#include "terngrad/core/philox.h"
#include "terngrad/core/read_file.h"
#include "terngrad/data/converters.h"
#include "terngrad/data/dataset_description.h"
#include "terngrad/data/example.h"
#include "terngrad/data/image_codec.h"

namespace fs = std::filesystem;

namespace tg {
namespace {

struct LabeledFile {
  std::string path, class_name;
  int64_t label;
  ImageHeader header;
};

struct ScannedFolders {
  std::vector<LabeledFile> images;
  std::vector<std::string> skipped;  // files that are not images
};

// A name that says "image": such a file that is not a readable JPEG or PNG is refused, any other file skipped.
bool named_as_image(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".jpe" || ext == ".png";
}

std::string first_names(const std::vector<std::string>& names, size_t most = 5) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < most; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > most) s += fmt::format(" and {} more", names.size() - most);
  return s;
}

// The scan reads a file's first bytes only (the pixels are read once, when the image is converted): enough for the
// format and, unless metadata segments come first, for the header.
constexpr std::streamsize kScanBytes = 256 * 1024;

std::string read_head(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) TG_THROW("cannot open '{}'", path.string());
  std::string head(static_cast<size_t>(kScanBytes), '\0');
  in.read(head.data(), kScanBytes);
  if (in.bad()) TG_THROW("cannot read '{}'", path.string());
  head.resize(static_cast<size_t>(in.gcount()));
  return head;
}

// The header from the head; a head that ends before the header (large metadata first) is retried on the whole file,
// whose failure is the refusal naming it.
ImageHeader header_of(const fs::path& path, const std::string& head) {
  if (head.size() < static_cast<size_t>(kScanBytes)) return read_image_header(head, path.string());
  try {
    return read_image_header(head, path.string());
  } catch (const Error&) {
    return read_image_header(read_file(path.string()), path.string());
  }
}

// Every file of every class folder, its first bytes read and its header parsed: images in a seeded order (the same on
// every machine), the other files by name.
ScannedFolders scan_class_folders(const std::string& root, const std::vector<std::string>& classes, uint64_t seed) {
  ScannedFolders out;
  for (size_t k = 0; k < classes.size(); ++k) {
    fs::path d = fs::path(root) / classes[k];
    if (!fs::is_directory(d)) TG_THROW("class folder '{}' (of the classes) does not exist", d.string());
    std::vector<fs::path> names;
    for (const auto& e : fs::directory_iterator(d))
      if (e.is_regular_file()) names.push_back(e.path());
    std::sort(names.begin(), names.end());
    size_t found = 0;
    std::vector<std::string> skipped_here;
    for (const fs::path& n : names) {
      const std::string head = read_head(n);
      if (sniff_image_format(head) == ImageFormat::kUnknown && !named_as_image(n)) {
        skipped_here.push_back(n.string());
        continue;
      }
      out.images.push_back({n.string(), classes[k], static_cast<int64_t>(k + 1), header_of(n, head)});
      ++found;
    }
    if (found == 0)
      TG_THROW("class folder '{}' holds no image{}", d.string(),
               skipped_here.empty()
                   ? std::string()
                   : fmt::format(" ({} other files: {})", skipped_here.size(), first_names(skipped_here)));
    out.skipped.insert(out.skipped.end(), skipped_here.begin(), skipped_here.end());
  }
  if (out.images.empty()) TG_THROW("no images under '{}'", root);
  // Fisher-Yates with Philox: the same order on every machine.
  PhiloxKey key = philox_key(seed, 0x4f524452u /* "ORDR" */);
  for (size_t i = out.images.size(); i > 1; --i) {
    size_t j = std::min(i - 1, static_cast<size_t>(philox_uniform(key, i, 0, 0, 0) * static_cast<float>(i)));
    std::swap(out.images[i - 1], out.images[j]);
  }
  return out;
}

// --validation_fraction without a validation folder: of each class, round(fraction x its images) (at least 1) go to
// validation, the first ones of the seeded order `files` is in; a class of fewer than 2 images is refused.
std::pair<std::vector<LabeledFile>, std::vector<LabeledFile>> hold_out(const std::vector<LabeledFile>& files,
                                                                       const std::vector<std::string>& classes,
                                                                       double fraction) {
  std::vector<size_t> count(classes.size() + 1, 0), held(classes.size() + 1, 0), want(classes.size() + 1, 0);
  for (const LabeledFile& f : files) ++count[static_cast<size_t>(f.label)];
  for (size_t k = 1; k <= classes.size(); ++k) {
    TG_CHECK(count[k] >= 2,
             "class '{}' has {} image(s): too few to hold out --validation_fraction {} of them (at least 2: one to "
             "train on, one to validate; or give --validation_directory, or --validation_fraction 0)",
             classes[k - 1], count[k], fraction);
    want[k] =
        std::clamp<size_t>(static_cast<size_t>(std::lround(fraction * static_cast<double>(count[k]))), 1, count[k] - 1);
  }
  std::pair<std::vector<LabeledFile>, std::vector<LabeledFile>> split;
  for (const LabeledFile& f : files) {
    const size_t k = static_cast<size_t>(f.label);
    (held[k] < want[k] ? split.second : split.first).push_back(f);
    if (held[k] < want[k]) ++held[k];
  }
  return split;
}

// What every image becomes: its channel count and size (0 x 0: each keeps its own).
struct Target {
  int channels = 3;
  int height = 0, width = 0;
  bool resized = false;  // every image resized to height x width
};

constexpr int kAutoResizeKeepsUpTo = 512;  // --resize -1: images of one size up to this keep it
constexpr int kAutoResize = 256;           // ... otherwise they become 256 x 256 (the ImageNet nets crop 224)

Target decide_target(const std::vector<const LabeledFile*>& all, const BuildImageDataOptions& opt) {
  Target t;
  const bool all_gray =
      std::all_of(all.begin(), all.end(), [](const LabeledFile* f) { return f->header.source_channels == 1; });
  t.channels = opt.channels != 0 ? opt.channels : all_gray ? 1 : 3;
  std::set<std::pair<int, int>> sizes;
  for (const LabeledFile* f : all) sizes.insert({f->header.height, f->header.width});
  const bool one_size = sizes.size() == 1;
  int resize = opt.resize;
  if (resize < 0)
    resize =
        one_size && std::max(sizes.begin()->first, sizes.begin()->second) <= kAutoResizeKeepsUpTo ? 0 : kAutoResize;
  if (resize > 0) {
    t.height = t.width = resize;
    t.resized = true;
  } else if (one_size) {
    std::tie(t.height, t.width) = *sizes.begin();
  }
  return t;
}

std::string make_image_example(const LabeledFile& f, const Target& t, const BuildImageDataOptions& opt) {
  std::string bytes = read_file(f.path);
  const ImageFormat fmt = sniff_image_format(bytes);
  Image img = decode_image(bytes, "", 0, 0, 0, 0, f.path);
  const int source_channels = img.source_channels;
  img = convert_channels(std::move(img), t.channels);
  if (t.resized) img = resize_bilinear_u8(img, t.height, t.width);
  ImageExample ex;
  ex.height = img.height;
  ex.width = img.width;
  ex.channels = t.channels;
  ex.label = f.label;
  ex.colorspace = t.channels == 3 ? "RGB" : "Gray";
  ex.class_text = f.class_name;
  ex.filename = fs::path(f.path).filename().string();
  if (opt.raw_pixel) {
    ex.format = "RAW";
    ex.encoded.assign(img.pixels.begin(), img.pixels.end());
  } else {
    ex.format = "JPEG";
    const bool keep = fmt == ImageFormat::kJpeg && source_channels == t.channels && !t.resized;
    ex.encoded = keep ? std::move(bytes) : encode_jpeg(img, opt.quality);
  }
  return build_image_example(ex);
}

// The classes of a folder of class folders: its sub-folders' names, sorted.
std::vector<std::string> class_folders_of(const std::string& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) TG_THROW("'{}' is not a folder", root);
  std::vector<std::string> classes;
  for (const auto& e : fs::directory_iterator(root, ec))
    if (e.is_directory()) classes.push_back(e.path().filename().string());
  if (ec) TG_THROW("cannot list '{}': {}", root, ec.message());
  std::sort(classes.begin(), classes.end());
  if (classes.empty())
    TG_THROW("'{}' has no class sub-folders (one folder of images per class), or give --labels_file", root);
  return classes;
}

std::vector<std::string> read_labels_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) TG_THROW("cannot open --labels_file '{}'", path);
  std::vector<std::string> classes = read_class_list(in);
  if (classes.empty()) TG_THROW("--labels_file '{}' names no class", path);
  return classes;
}

// Shards are written into a hidden folder inside the output folder and moved out only when all of them are: a
// conversion that fails on its last image leaves the output folder as it was.
class StagingFolder {
 public:
  explicit StagingFolder(const std::string& output_dir)
      : output_(output_dir), path_(fs::path(output_dir) / fmt::format(".build-image-data-{}", ::getpid())) {
    std::error_code ec;
    fs::create_directories(path_, ec);
    if (!fs::is_directory(path_)) TG_THROW("cannot create '{}': {}", path_.string(), ec.message());
  }
  ~StagingFolder() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string path() const { return path_.string(); }
  // Replaces the output folder's shards of `prefix` (an earlier conversion's) by the staged ones.
  std::vector<std::string> publish(const std::string& prefix, const std::vector<std::string>& staged) {
    for (const auto& e : fs::directory_iterator(output_))
      if (e.is_regular_file() && e.path().filename().string().rfind(prefix + "-", 0) == 0 &&
          e.path().filename().string().find("-of-") != std::string::npos)
        fs::remove(e.path());
    std::vector<std::string> out;
    for (const std::string& s : staged) {
      const fs::path to = output_ / fs::path(s).filename();
      fs::rename(s, to);
      out.push_back(to.string());
    }
    return out;
  }

 private:
  fs::path output_, path_;
};

void write_text_file(const fs::path& path, const std::string& text) {
  AtomicFile f(path.string());
  f.write(text);
  f.commit();
}

}  // namespace

std::vector<std::string> read_class_list(std::istream& in) {
  std::vector<std::string> classes;
  for (std::string line; std::getline(in, line);) {
    line.erase(line.find_last_not_of(" \t\r") + 1);
    line.erase(0, line.find_first_not_of(" \t"));
    if (!line.empty()) classes.push_back(line);
  }
  return classes;
}

int automatic_shards(size_t images, int reference) {
  const size_t wanted = (images + kImagesPerAutomaticShard - 1) / kImagesPerAutomaticShard;
  return static_cast<int>(std::clamp<size_t>(wanted, 1, static_cast<size_t>(reference)));
}

std::vector<std::string> build_image_data(const BuildImageDataOptions& opt) {
  if (opt.output_dir.empty()) TG_THROW("--output_dir is required");
  if (opt.train_directory.empty() && opt.validation_directory.empty())
    TG_THROW("give --input_dir (or --train_directory) and/or --validation_directory");
  if (opt.quality < 1 || opt.quality > 100) TG_THROW("--quality {} outside 1..100", opt.quality);
  TG_CHECK(opt.channels == 0 || opt.channels == 1 || opt.channels == 3, "--channels {} is not 0 (automatic), 1 or 3",
           opt.channels);
  TG_CHECK(opt.resize >= -1 && opt.resize <= 4096, "--resize {} outside -1 (automatic), 0 (keep) .. 4096", opt.resize);
  TG_CHECK(opt.validation_fraction >= 0 && opt.validation_fraction < 1, "--validation_fraction {} outside [0, 1)",
           opt.validation_fraction);
  const std::vector<std::string> classes =
      opt.labels_file.empty()
          ? class_folders_of(opt.train_directory.empty() ? opt.validation_directory : opt.train_directory)
          : read_labels_file(opt.labels_file);

  // Scan: every file read once, before anything is written.
  ScannedFolders train, validation;
  if (!opt.train_directory.empty()) train = scan_class_folders(opt.train_directory, classes, opt.seed);
  if (!opt.validation_directory.empty()) {
    validation = scan_class_folders(opt.validation_directory, classes, opt.seed);
  } else if (!train.images.empty() && opt.validation_fraction > 0) {
    std::tie(train.images, validation.images) = hold_out(train.images, classes, opt.validation_fraction);
  }
  std::vector<std::string> skipped = train.skipped;
  skipped.insert(skipped.end(), validation.skipped.begin(), validation.skipped.end());
  if (!skipped.empty())
    spdlog::warn("skipped {} file{} that {} not JPEG or PNG: {} (listed in {})", skipped.size(),
                 skipped.size() == 1 ? "" : "s", skipped.size() == 1 ? "is" : "are", first_names(skipped),
                 dataset_description_path(opt.output_dir));

  // Decide: one channel count and one size for every image; shard counts that fit.
  std::vector<const LabeledFile*> all;
  for (const auto* list : {&train.images, &validation.images})
    for (const LabeledFile& f : *list) all.push_back(&f);
  const Target target = decide_target(all, opt);
  const int train_shards = opt.train_shards > 0 ? opt.train_shards : automatic_shards(train.images.size(), 1024);
  const int validation_shards =
      opt.validation_shards > 0 ? opt.validation_shards : automatic_shards(validation.images.size(), 128);

  // Write: staged, then moved into place; the description last.
  StagingFolder staging(opt.output_dir);
  std::vector<std::pair<std::string, std::vector<std::string>>> staged;
  auto run = [&](const std::vector<LabeledFile>& files, const std::string& prefix, int shards) {
    if (files.empty()) return;
    staged.emplace_back(prefix,
                        write_sharded(
                            files.size(), shards, "--" + prefix + "_shards", staging.path(), prefix, opt.num_threads,
                            [&](size_t i) { return make_image_example(files[i], target, opt); }, opt.compression));
  };
  run(train.images, "train", train_shards);
  run(validation.images, "validation", validation_shards);
  std::vector<std::string> out;
  for (const auto& [prefix, paths] : staged) {
    const std::vector<std::string> moved = staging.publish(prefix, paths);
    out.insert(out.end(), moved.begin(), moved.end());
  }
  std::string text;  // the classes in label order (label = line + 1)
  for (const std::string& c : classes) text += c + "\n";
  write_text_file(fs::path(opt.output_dir) / "labels.txt", text);
  DatasetDescription d;
  d.classes = classes;
  d.channels = target.channels;
  d.height = target.height;
  d.width = target.width;
  d.image_format = opt.raw_pixel ? "RAW" : "JPEG";
  if (!train.images.empty()) d.examples["train"] = static_cast<int64_t>(train.images.size());
  if (!validation.images.empty()) d.examples["validation"] = static_cast<int64_t>(validation.images.size());
  d.skipped = skipped;
  write_text_file(dataset_description_path(opt.output_dir), dataset_description_json(d));
  spdlog::info("{}: {}{}", opt.output_dir, d.summary(),
               target.resized
                   ? fmt::format(" (every image resized to {}x{}; --resize sets it)", target.height, target.width)
                   : "");
  return out;
}

}  // namespace tg

// Dataset converters (idx, CIFAR-10 binary) and the shard inspector; see converters.h (class folders:
// build_image_data.cc).
#include "terngrad/data/converters.h"

#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>
#include <utility>

#include "terngrad/core/error.h"
#include "terngrad/core/read_file.h"
#include "terngrad/data/example.h"
#include "terngrad/data/image_codec.h"
#include "terngrad/data/tfrecord.h"

namespace fs = std::filesystem;

namespace tg {

std::string shard_name(const std::string& prefix, int shard, int num_shards) {
  return fmt::format("{}-{:05d}-of-{:05d}", prefix, shard, num_shards);
}

std::vector<std::string> write_sharded(size_t num_examples, int num_shards, const std::string& shards_flag,
                                       const std::string& output_dir, const std::string& prefix, int num_threads,
                                       const std::function<std::string(size_t)>& make_example,
                                       TfRecordCompression compression) {
  if (num_shards < 1) TG_THROW("{} {} must be at least 1", shards_flag, num_shards);
  if (num_examples < static_cast<size_t>(num_shards))
    TG_THROW("{} examples cannot fill {} {} shards: give {} {} or fewer (each shard holds at least one example)",
             num_examples, num_shards, prefix, shards_flag, num_examples);
  std::error_code ec;
  fs::create_directories(output_dir, ec);
  if (!fs::is_directory(output_dir)) TG_THROW("cannot create output directory '{}': {}", output_dir, ec.message());
  std::vector<std::string> paths(num_shards);
  for (int s = 0; s < num_shards; ++s) paths[s] = (fs::path(output_dir) / shard_name(prefix, s, num_shards)).string();

  std::atomic<int> next_shard{0};
  std::mutex error_mu;
  std::exception_ptr error;
  auto work = [&] {
    try {
      for (int s; (s = next_shard.fetch_add(1)) < num_shards;) {
        {
          std::lock_guard<std::mutex> lock(error_mu);
          if (error) return;
        }
        const size_t begin = num_examples * s / num_shards, end = num_examples * (s + 1) / num_shards;
        TfRecordWriter writer(paths[s], compression);
        for (size_t i = begin; i < end; ++i) writer.write(make_example(i));
        writer.close();
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mu);
      if (!error) error = std::current_exception();
    }
  };
  const int n = std::max(1, std::min(num_threads, num_shards));
  std::vector<std::thread> threads;
  for (int t = 1; t < n; ++t) threads.emplace_back(work);
  work();
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
  return paths;
}

// ---- idx ----------------------------------------------------------------------------------------------------

namespace {

std::string read_gz_or_plain(const std::string& path) {
  if (!fs::is_regular_file(path)) TG_THROW("cannot open '{}': no such file", path);
  gzFile f = gzopen(path.c_str(), "rb");  // reads plain files transparently
  if (!f) TG_THROW("cannot open '{}'", path);
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) out.append(buf, n);
  int err = 0;
  const char* msg = gzerror(f, &err);
  std::string why = err < 0 ? msg : "";
  gzclose(f);
  if (n < 0 || err < 0) TG_THROW("cannot read '{}': {}", path, why);
  return out;
}

uint32_t be32(const std::string& s, size_t off) {
  return (static_cast<uint32_t>(static_cast<uint8_t>(s[off])) << 24) |
         (static_cast<uint32_t>(static_cast<uint8_t>(s[off + 1])) << 16) |
         (static_cast<uint32_t>(static_cast<uint8_t>(s[off + 2])) << 8) | static_cast<uint8_t>(s[off + 3]);
}

}  // namespace

IdxImages read_idx_images(const std::string& path) {
  std::string d = read_gz_or_plain(path);
  if (d.size() < 16 || be32(d, 0) != 0x803)
    TG_THROW("'{}' is not an idx3 image file (magic 0x00000803 expected)", path);
  IdxImages im;
  im.count = static_cast<int>(be32(d, 4));
  im.rows = static_cast<int>(be32(d, 8));
  im.cols = static_cast<int>(be32(d, 12));
  const size_t want = 16 + static_cast<size_t>(im.count) * im.rows * im.cols;
  if (d.size() != want)
    TG_THROW("'{}': {} images of {}x{} need {} bytes, file has {}", path, im.count, im.rows, im.cols, want, d.size());
  im.pixels.assign(d.begin() + 16, d.end());
  return im;
}

std::vector<uint8_t> read_idx_labels(const std::string& path) {
  std::string d = read_gz_or_plain(path);
  if (d.size() < 8 || be32(d, 0) != 0x801) TG_THROW("'{}' is not an idx1 label file (magic 0x00000801 expected)", path);
  const size_t count = be32(d, 4);
  if (d.size() != 8 + count) TG_THROW("'{}': {} labels need {} bytes, file has {}", path, count, 8 + count, d.size());
  return std::vector<uint8_t>(d.begin() + 8, d.end());
}

std::vector<std::string> convert_idx(const ConvertIdxOptions& opt) {
  if (opt.images.empty()) TG_THROW("--images is required");
  if (opt.labels.empty()) TG_THROW("--labels is required");
  if (opt.output_dir.empty()) TG_THROW("--output_dir is required");
  if (opt.format != "png" && opt.format != "raw") TG_THROW("--format '{}' is not png or raw", opt.format);
  IdxImages im = read_idx_images(opt.images);
  std::vector<uint8_t> labels = read_idx_labels(opt.labels);
  if (labels.size() != static_cast<size_t>(im.count))
    TG_THROW("--images has {} images but --labels has {} labels", im.count, labels.size());
  std::string subset = opt.subset;
  if (subset.empty()) subset = fs::path(opt.images).filename().string().rfind("t10k", 0) == 0 ? "test" : "train";
  const size_t pixels = static_cast<size_t>(im.rows) * im.cols;
  return write_sharded(
      im.count, opt.num_shards, "--num_shards", opt.output_dir, subset, opt.num_threads,
      [&](size_t i) {
        Image img;
        img.height = im.rows;
        img.width = im.cols;
        img.channels = 1;
        img.pixels.assign(im.pixels.begin() + i * pixels, im.pixels.begin() + (i + 1) * pixels);
        ImageExample ex;
        ex.encoded = opt.format == "png" ? encode_png(img) : std::string(img.pixels.begin(), img.pixels.end());
        ex.format = opt.format == "png" ? "png" : "RAW";
        ex.label = labels[i];
        ex.height = im.rows;
        ex.width = im.cols;
        ex.channels = 1;
        return build_image_example(ex);
      },
      opt.compression);
}

// ---- CIFAR-10 -------------------------------------------------------------------------------------------

std::vector<std::string> convert_cifar10(const ConvertCifar10Options& opt) {
  if (opt.input_dir.empty()) TG_THROW("--input_dir is required");
  if (opt.output_dir.empty()) TG_THROW("--output_dir is required");
  fs::path dir = opt.input_dir;
  if (!fs::exists(dir / "test_batch.bin") && fs::exists(dir / "cifar-10-batches-bin" / "test_batch.bin"))
    dir = dir / "cifar-10-batches-bin";
  constexpr size_t kRecord = 1 + 3 * 32 * 32;
  auto load = [&](const std::vector<std::string>& names) {
    std::string all;
    for (const auto& n : names) {
      fs::path p = dir / n;
      std::string d = read_file(p.string(), " (--input_dir should hold the CIFAR-10 binary batches)");
      if (d.empty() || d.size() % kRecord != 0)
        TG_THROW("'{}': {} bytes is not a whole number of {}-byte CIFAR-10 records", p.string(), d.size(), kRecord);
      all += d;
    }
    return all;
  };
  auto make = [&](const std::string& all) {
    return [&all](size_t i) {
      const uint8_t* r = reinterpret_cast<const uint8_t*>(all.data()) + i * kRecord;
      if (r[0] > 9) TG_THROW("CIFAR-10 record {} has label {} outside 0..9", i, r[0]);
      Image img;
      img.height = img.width = 32;
      img.channels = 3;
      img.pixels.resize(32 * 32 * 3);
      for (int p = 0; p < 1024; ++p)  // planes R, G, B -> interleaved
        for (int c = 0; c < 3; ++c) img.pixels[p * 3 + c] = r[1 + c * 1024 + p];
      ImageExample ex;
      ex.encoded = encode_png(img);
      ex.format = "png";
      ex.label = r[0];
      ex.height = ex.width = 32;
      ex.channels = 3;
      return build_image_example(ex);
    };
  };
  std::string train =
      load({"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin", "data_batch_5.bin"});
  std::string test = load({"test_batch.bin"});
  std::vector<std::string> out = write_sharded(train.size() / kRecord, opt.train_shards, "--train_shards",
                                               opt.output_dir, "train", opt.num_threads, make(train), opt.compression);
  std::vector<std::string> t = write_sharded(test.size() / kRecord, opt.test_shards, "--test_shards", opt.output_dir,
                                             "test", opt.num_threads, make(test), opt.compression);
  out.insert(out.end(), t.begin(), t.end());
  return out;
}

// ---- inspect ----------------------------------------------------------------------------------------------

InspectReport inspect_files(const std::vector<std::string>& files, bool decode) {
  InspectReport r;
  auto problem = [&](const std::string& msg) {
    if (r.errors.size() < 20) r.errors.push_back(msg);
  };
  for (const auto& path : files) {
    TfRecordReader reader(path);
    std::string rec, err;
    uint64_t off = 0;
    int64_t n = 0;
    for (;;) {
      RecordStatus st = reader.read(&rec, &off, &err);
      if (st == RecordStatus::kEnd) break;
      if (st != RecordStatus::kOk) {
        ++r.corrupt;
        problem(err);
        if (st == RecordStatus::kCorruptFile) break;
        continue;
      }
      ++n;
      const std::string where = describe_record(path, off, reader.compression());
      try {
        for (const auto& k : example_feature_keys(rec, where)) ++r.feature_keys[k];
        ImageExample ex = parse_image_example(rec, where);
        ++r.labels[ex.label];
        ++r.formats[ex.format.empty() ? "(none)" : ex.format];
        int64_t h = ex.height, w = ex.width, c = ex.channels;
        if (decode) {
          try {
            Image img = decode_image(ex.encoded, ex.format, ex.height, ex.width, ex.channels, 0, where);
            h = img.height, w = img.width, c = img.channels;
          } catch (const Error& e) {
            ++r.undecodable;
            problem(e.what());
            continue;
          }
        }
        ++r.image_sizes[h > 0 ? fmt::format("{}x{}x{}", h, w, c) : std::string("(not recorded)")];
      } catch (const Error& e) {
        ++r.corrupt;
        problem(e.what());
      }
    }
    r.records += n;
    r.records_per_file[path] = n;
  }
  return r;
}

std::string format_report(const InspectReport& r) {
  std::string s =
      fmt::format("files: {}\nrecords: {}\ncorrupt records: {}\n", r.records_per_file.size(), r.records, r.corrupt);
  if (r.undecodable) s += fmt::format("undecodable images: {}\n", r.undecodable);
  for (const auto& [f, n] : r.records_per_file) s += fmt::format("  {}: {} records\n", f, n);
  s += "feature keys:\n";
  for (const auto& [k, n] : r.feature_keys) s += fmt::format("  {} ({})\n", k, n);
  s += "image formats:\n";
  for (const auto& [k, n] : r.formats) s += fmt::format("  {}: {}\n", k, n);
  s += "image sizes (HxWxC):\n";
  for (const auto& [k, n] : r.image_sizes) s += fmt::format("  {}: {}\n", k, n);
  s += "labels:\n";
  for (const auto& [k, n] : r.labels) s += fmt::format("  {}: {}\n", k, n);
  for (const auto& e : r.errors) s += fmt::format("error: {}\n", e);
  return s;
}

}  // namespace tg

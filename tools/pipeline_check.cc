// pipeline_check: how many images per second the input pipeline sustains on real JPEG TFRecords through a
// model's ImageNet training preprocessing, so a GPU run can tell whether the card would starve
// (scripts/gpu_check.sh, input-pipeline section). The shards are made on the spot in a temporary folder:
// photo-like synthetic images (smooth colour fields with texture, ImageNet's typical 500x375, JPEG quality 90:
// about the size of an ImageNet JPEG), written as tf.Examples by the converters' writer, read back by the
// trainer's InputPipeline (readers, shuffle buffer, decode + crop/flip/resize threads, batches).
//
//   pipeline_check [--net resnet50] [--images 2048] [--threads N] [--readers R] [--batch 256] [--seconds 10]
//
// Prints one line: "pipeline_check: <net> (<preprocessing> at <size>px), <threads> preprocess threads, <readers>
// readers: <rate> images/s (<batches> batches of <batch> after one warm-up batch; JPEG <w>x<h>, <kb> KB avg)".
// Exit 0 when the pipeline ran, 1 on an error (one line naming it), 2 on a usage error.
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "terngrad/core/enum_names.h"
#include "terngrad/data/converters.h"
#include "terngrad/data/example.h"
#include "terngrad/data/image_codec.h"
#include "terngrad/data/input_pipeline.h"
#include "terngrad/models/registry.h"

namespace fs = std::filesystem;

namespace tg {
namespace {

constexpr int kWidth = 500, kHeight = 375;  // ImageNet's most common size
constexpr int kDistinctImages = 64;         // encoded once each, reused round-robin by the records

struct Options {
  std::string net = "resnet50";
  int images = 2048, threads = 0, readers = 4, batch = 256;
  double seconds = 10;
};

// A photo-like image: smooth colour fields, some texture and edges (compresses like a photograph, not noise).
Image synthetic_photo(int seed) {
  Image img;
  img.height = kHeight, img.width = kWidth, img.channels = 3;
  img.pixels.resize(img.size());
  for (int y = 0; y < kHeight; ++y)
    for (int x = 0; x < kWidth; ++x)
      for (int c = 0; c < 3; ++c) {
        // fine grain (sensor noise, foliage): what makes a photo's JPEG ~100 KB rather than ~50
        const uint32_t h = (static_cast<uint32_t>(x) * 73856093u) ^ (static_cast<uint32_t>(y) * 19349663u) ^
                           (static_cast<uint32_t>(seed * 3 + c) * 83492791u);
        const double v = 128 + 70 * std::sin((x + 7 * seed) * 0.013 * (c + 1)) * std::cos((y - 3 * seed) * 0.021) +
                         25 * std::sin((x * y + seed * 101) * 0.0007) + static_cast<double>((h >> 8) % 71) - 35;
        img.pixels[(static_cast<size_t>(y) * kWidth + x) * 3 + c] = static_cast<uint8_t>(std::clamp(v, 0.0, 255.0));
      }
  return img;
}

int usage() {
  std::fprintf(stderr,
               "usage: pipeline_check [--net resnet50] [--images 2048] [--threads N (0: all cores)] [--readers 4] "
               "[--batch 256] [--seconds 10]\n");
  return 2;
}

int run(const Options& o) {
  const ModelInfo& model = find_model(o.net);
  const int threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const fs::path root = fs::temp_directory_path() / ("tg_pipeline_check_" + std::to_string(getpid()));
  fs::remove_all(root);
  std::vector<std::string> jpegs(kDistinctImages);
#pragma omp parallel for num_threads(threads) schedule(dynamic)
  for (int i = 0; i < kDistinctImages; ++i) jpegs[i] = encode_jpeg(synthetic_photo(i), 90);
  double bytes = 0;
  for (const auto& j : jpegs) bytes += static_cast<double>(j.size());
  write_sharded(static_cast<size_t>(o.images), 8, "--train_shards", root.string(), "train", std::min(threads, 8),
                [&](size_t i) {
                  ImageExample ex;
                  ex.encoded = jpegs[i % kDistinctImages];
                  ex.format = "JPEG";
                  ex.label = static_cast<int64_t>(1 + i % 1000);
                  ex.height = kHeight, ex.width = kWidth, ex.channels = 3;
                  return build_image_example(ex);
                });

  PipelineOptions p;
  p.data_dir = root.string();
  p.dataset = "imagenet";
  p.imagenet_preprocessing = parse_enum<PreprocessKind>(model.imagenet_preprocessing);
  p.image_size = static_cast<int>(model.default_image_size > 0 ? model.default_image_size : 224);
  p.batch_size = o.batch;
  p.data.num_readers = o.readers;
  p.data.num_preprocess_threads = threads;
  p.data.shuffle_buffer = std::min(o.images, 1024);
  int batches = 0;
  double elapsed = 0;
  {
    InputPipeline pipeline(p);
    Batch b;
    pipeline.next(&b);  // warm-up: threads started, queues primed
    const auto t0 = std::chrono::steady_clock::now();
    do {
      pipeline.next(&b);
      ++batches;
      elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } while (elapsed < o.seconds);
  }
  fs::remove_all(root);
  std::printf(
      "pipeline_check: %s (%s preprocessing at %dpx), %d preprocess threads, %d readers: %.1f images/s (%d batches "
      "of %d after one warm-up batch; JPEG %dx%d, %.0f KB avg)\n",
      o.net.c_str(), model.imagenet_preprocessing, p.image_size, threads, o.readers,
      static_cast<double>(batches) * o.batch / elapsed, batches, o.batch, kWidth, kHeight,
      bytes / kDistinctImages / 1024);
  return 0;
}

}  // namespace
}  // namespace tg

int main(int argc, char** argv) {
  tg::Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    try {
      if (a == "--help" || a == "-h") {
        std::printf("pipeline_check: images/s of the input pipeline on JPEG TFRecords made on the spot\n");
        tg::usage();
        return 0;
      } else if (a == "--net" && has_value) {
        o.net = argv[++i];
      } else if (a == "--images" && has_value) {
        o.images = std::stoi(argv[++i]);
      } else if (a == "--threads" && has_value) {
        o.threads = std::stoi(argv[++i]);
      } else if (a == "--readers" && has_value) {
        o.readers = std::stoi(argv[++i]);
      } else if (a == "--batch" && has_value) {
        o.batch = std::stoi(argv[++i]);
      } else if (a == "--seconds" && has_value) {
        o.seconds = std::stod(argv[++i]);
      } else {
        return tg::usage();
      }
    } catch (const std::exception&) {
      std::fprintf(stderr, "pipeline_check: %s: '%s' is not a number\n", a.c_str(), argv[i]);
      return 2;
    }
  }
  if (o.images < o.batch || o.batch < 1 || o.readers < 1 || o.threads < 0 || !(o.seconds > 0)) {
    std::fprintf(stderr,
                 "pipeline_check: need --images >= --batch >= 1, --readers >= 1, --threads >= 0, "
                 "--seconds > 0\n");
    return 2;
  }
  try {
    return tg::run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pipeline_check: %s\n", e.what());
    return 1;
  }
}

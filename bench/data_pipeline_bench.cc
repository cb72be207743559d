// Input pipeline throughput (images/sec): (a) PNG 28x28 records (MNIST) and (b) JPEG 256x256 records through
// ImageNet train preprocessing at 224 (AlexNet: random crop + flip + mean; and Inception-style), with 1 and 2
// preprocess threads; plus the single-thread cost of JPEG decoding and of each preprocessing recipe.
// Fixture shards are generated once in a temporary folder. Run: build/bench/data_pipeline_bench
// (see bench/README.md for the recorded figures).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "terngrad/data/converters.h"
#include "terngrad/data/example.h"
#include "terngrad/data/image_codec.h"
#include "terngrad/data/input_pipeline.h"
#include "terngrad/data/preprocess.h"

namespace fs = std::filesystem;
using namespace tg;

namespace {

// A smooth image with some texture: compresses like a photograph, not like noise.
Image synthetic(int h, int w, int c, int seed) {
  Image img;
  img.height = h;
  img.width = w;
  img.channels = c;
  img.pixels.resize(img.size());
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int k = 0; k < c; ++k) {
        double v = 128 + 60 * std::sin((x + seed) * 0.05 + k) * std::cos(y * 0.07) + ((x * 7 + y * 13 + seed) % 17);
        img.pixels[(static_cast<size_t>(y) * w + x) * c + k] = static_cast<uint8_t>(std::clamp(v, 0.0, 255.0));
      }
  return img;
}

struct Fixtures {
  fs::path root;
  std::string jpeg256;
  Fixtures() {
    root = fs::temp_directory_path() / ("tg_data_bench_" + std::to_string(getpid()));
    fs::remove_all(root);
    write_sharded(4096, 4, "--train_shards", (root / "png").string(), "train", 2, [](size_t i) {
      ImageExample ex;
      ex.encoded = encode_png(synthetic(28, 28, 1, static_cast<int>(i)));
      ex.format = "png";
      ex.label = static_cast<int64_t>(i % 10);
      return build_image_example(ex);
    });
    jpeg256 = encode_jpeg(synthetic(256, 256, 3, 1), 90);
    write_sharded(1024, 4, "--train_shards", (root / "jpeg").string(), "train", 2, [](size_t i) {
      ImageExample ex;
      ex.encoded = encode_jpeg(synthetic(256, 256, 3, static_cast<int>(i)), 90);
      ex.format = "JPEG";
      ex.label = static_cast<int64_t>(1 + i % 1000);
      ex.height = ex.width = 256;
      ex.channels = 3;
      return build_image_example(ex);
    });
  }
  ~Fixtures() { fs::remove_all(root); }
};

Fixtures& fixtures() {
  static Fixtures f;
  return f;
}

void run_pipeline(benchmark::State& state, PipelineOptions o) {
  InputPipeline p(o);
  Batch b;
  p.next(&b);  // warm-up: threads started, queues primed
  int64_t images = 0;
  for (auto _ : state) {
    p.next(&b);
    images += b.count;
  }
  state.SetItemsProcessed(images);
  state.counters["images/s"] = benchmark::Counter(static_cast<double>(images), benchmark::Counter::kIsRate);
}

void BM_PipelineMnistPng(benchmark::State& state) {
  PipelineOptions o;
  o.data_dir = (fixtures().root / "png").string();
  o.dataset = "mnist";
  o.batch_size = 64;
  o.data.num_preprocess_threads = static_cast<int>(state.range(0));
  o.data.shuffle_buffer = 1024;
  run_pipeline(state, o);
}
BENCHMARK(BM_PipelineMnistPng)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_PipelineImagenetJpeg(benchmark::State& state) {
  PipelineOptions o;
  o.data_dir = (fixtures().root / "jpeg").string();
  o.dataset = "imagenet";
  o.imagenet_preprocessing = state.range(1) ? PreprocessKind::kInception : PreprocessKind::kAlexnet;
  o.image_size = 224;
  o.batch_size = 32;
  o.data.num_preprocess_threads = static_cast<int>(state.range(0));
  o.data.shuffle_buffer = 256;
  run_pipeline(state, o);
}
BENCHMARK(BM_PipelineImagenetJpeg)
    ->ArgsProduct({{1, 2}, {0, 1}})
    ->ArgNames({"threads", "inception"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

void BM_DecodeJpeg256(benchmark::State& state) {
  const std::string& bytes = fixtures().jpeg256;
  for (auto _ : state) benchmark::DoNotOptimize(decode_jpeg(bytes, 3, "bench"));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DecodeJpeg256)->Unit(benchmark::kMicrosecond);

void BM_Preprocess256To224(benchmark::State& state) {
  Image img = synthetic(256, 256, 3, 3);
  PreprocessSpec spec{state.range(0) ? PreprocessKind::kInception : PreprocessKind::kAlexnet, 224, 3, true};
  std::vector<float> out(224 * 224 * 3);
  uint32_t r = 0;
  for (auto _ : state) {
    AugmentRng rng(1, 0, 0, r++);
    preprocess_image(img, spec, rng, out.data(), "bench");
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Preprocess256To224)->Arg(0)->Arg(1)->ArgName("inception")->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();

// train_step_bench: images/sec of one full CPU training step (forward + backward + momentum update) of a
// real network from the model registry, at its real input size, on make_backend("cpu", {threads}).
// bench/pytorch_peers.py times the same networks in PyTorch; bench/run_benchmarks.sh runs both, interleaved.
//
//   train_step_bench [--net=lenet,cifarnet] [--threads=1,2] [--batch=N] [--count_allocs] [benchmark flags]
//
// --net:      comma-separated names (default lenet) from the table below; a network the registry does not
//             know reports an error for its benchmark and the others still run. "all" = every network.
// --threads:  comma-separated thread counts (default 1,2).
// --batch:    overrides the per-network default batch (lenet 64, cifarnet 128, the ImageNet nets 8).
// --trainer=fp32,terngrad: also times terngrad-train's whole step (tg::Trainer in benchmark mode: synthetic
//             input, the gradient exchange, the optimizer with the EMA) with gradients exchanged in fp32 or as
//             TernGrad codes (clip 2.5), per-worker batch as above, each worker count of --workers=1,2
//             (workers of one process, like --num_nodes). Rows "trainer_step/..." also report the mean phase
//             times (ms_<phase>) of the trainer's log line.
// --count_allocs: also runs 5 steady-state steps with the host allocator (malloc & co.) counted and prints
//             how many allocations each step made (0 means the step allocates nothing).
// --trace_allocs: with --count_allocs, prints a raw backtrace of every counted allocation on stderr.
//
// Each benchmark reports `images/s` (a rate counter over wall time), `allocs/step` (heap allocations per
// timed step, from tests/alloc_counter) and `faults/step` (minor page faults per timed step). Inputs are fixed
// random images and labels; the learning rate is small (1e-3) so the loss stays finite on random data for any number of
// steps.
#include <benchmark/benchmark.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "alloc_counter/alloc_counter.h"
#include "bench/bench_args.h"
#include "terngrad/backend/backend.h"
#include "terngrad/models/registry.h"
#include "terngrad/nn/net.h"
#include "terngrad/optim/optimizer.h"
#include "terngrad/train/trainer.h"

namespace tg {
namespace {

// The networks at their real input sizes (the reference's layer tables).
struct NetCase {
  std::string name;
  int64_t image_size, channels, num_classes, batch;
  float label_smoothing = 0.f;  // Inception-v3: 0.1, as the reference
};

const std::vector<NetCase>& net_cases() {
  static const std::vector<NetCase> cases = {
      {"lenet", 28, 1, 10, 64},
      {"cifarnet", 24, 3, 10, 128},
      {"alexnet", 224, 3, 1001, 8},
      {"resnet50", 224, 3, 1001, 8},
      {"inception_v3", 299, 3, 1001, 8, 0.1f},
  };
  return cases;
}

// One replica ready to train: backend, net, parameters, optimizer, a fixed batch.
struct Trainee {
  std::unique_ptr<Backend> backend;
  Net net;
  std::unique_ptr<ParameterStore> store;
  std::unique_ptr<Optimizer> optimizer;
  std::vector<float> images;    // (N, H, W, C)
  std::vector<int32_t> labels;  // (N)
  Tensor x, y;
  int64_t step = 0;

  Trainee(const NetCase& c, int threads, int64_t batch) {
    backend = make_backend("cpu", {threads});
    ModelConfig config;
    config.image_size = c.image_size;
    config.channels = c.channels;
    config.num_classes = c.num_classes;
    config.label_smoothing = c.label_smoothing;
    build_model(c.name, config, net);
    net.setup(*backend, batch);
    store = std::make_unique<ParameterStore>(net.param_specs(), net.state_specs(), *backend);
    store->initialize(1);
    net.bind(*store);
    OptimizerOptions oo;
    oo.optimizer = "momentum";
    oo.momentum = 0.9f;
    optimizer = std::make_unique<Optimizer>(oo, store->params(), *backend);

    std::mt19937 rng(123);
    std::uniform_real_distribution<float> pixel(-1.f, 1.f);
    std::uniform_int_distribution<int32_t> label(0, static_cast<int32_t>(c.num_classes - 1));
    images.resize(static_cast<size_t>(batch * c.image_size * c.image_size * c.channels));
    labels.resize(static_cast<size_t>(batch));
    for (float& v : images) v = pixel(rng);
    for (int32_t& v : labels) v = label(rng);
    x = Tensor(images.data(), Shape{batch, c.image_size, c.image_size, c.channels}, DType::kF32, Device::cpu());
    y = Tensor(labels.data(), Shape{batch}, DType::kI32, Device::cpu());
  }

  float train_step() {
    float loss = net.forward(x, y, /*training=*/true, static_cast<uint32_t>(step));
    net.backward();
    optimizer->apply(*backend, store->params(), net.grads(), step, 1e-3f);
    backend->synchronize();
    ++step;
    return loss;
  }
};

// Google Benchmark calls a benchmark function several times (growing iteration counts); the replica is
// built once per (net, threads, batch) and kept until another one is needed.
Trainee& trainee_for(const NetCase& c, int threads, int64_t batch) {
  static std::unique_ptr<Trainee> current;
  static std::string current_key;
  std::string key = c.name + "/" + std::to_string(threads) + "/" + std::to_string(batch);
  if (!current || key != current_key) {
    current.reset();
    current_key.clear();
    auto t = std::make_unique<Trainee>(c, threads, batch);
    for (int i = 0; i < 2; ++i) t->train_step();  // primitives created, caches warm
    current = std::move(t);
    current_key = key;
  }
  return *current;
}

// The timed loop of a benchmark: step() per iteration with heap allocations and minor page faults counted;
// sets images/s, allocs/step and faults/step.
template <typename Step>
void run_counted(benchmark::State& state, int64_t batch, Step&& step) {
  const int64_t before = alloc_counter::count();
  const long faults_before = alloc_counter::minor_page_faults();
  alloc_counter::start();
  for (auto _ : state) step();
  alloc_counter::stop();
  const double steps = static_cast<double>(state.iterations());
  state.counters["faults/step"] = static_cast<double>(alloc_counter::minor_page_faults() - faults_before) / steps;
  state.counters["images/s"] = benchmark::Counter(steps * static_cast<double>(batch), benchmark::Counter::kIsRate);
  state.counters["allocs/step"] = static_cast<double>(alloc_counter::count() - before) / steps;
  state.SetItemsProcessed(state.iterations() * batch);
}

// make() for a benchmark's setup; on failure the benchmark reports the error and runs nothing.
template <typename Make>
auto setup_or_skip(benchmark::State& state, Make&& make) -> decltype(make()) {
  try {
    return make();
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    for (auto _ : state) {
    }
    return nullptr;
  }
}

void bm_train_step(benchmark::State& state, NetCase c, int threads, int64_t batch) {
  Trainee* t = setup_or_skip(state, [&] { return &trainee_for(c, threads, batch); });
  if (!t) return;
  float loss = 0.f;
  run_counted(state, batch, [&] { loss = t->train_step(); });
  state.counters["loss"] = loss;
}

// Runs a few steady-state steps with allocation counting on and prints the count of each.
void report_allocations(const NetCase& c, int threads, int64_t batch) {
  try {
    Trainee t(c, threads, batch);
    for (int i = 0; i < 2; ++i) t.train_step();
    std::printf("%s threads=%d batch=%lld heap allocations per steady-state step:", c.name.c_str(), threads,
                static_cast<long long>(batch));
    for (int i = 0; i < 5; ++i) {
      const int64_t before = alloc_counter::count();
      alloc_counter::start();
      t.train_step();
      alloc_counter::stop();
      std::printf(" %lld", static_cast<long long>(alloc_counter::count() - before));
    }
    std::printf("\n");
  } catch (const std::exception& e) {
    std::printf("%s: %s\n", c.name.c_str(), e.what());
  }
}

// ---- the whole trainer step (--trainer) ---------------------------------------------------------------------
// terngrad-train's own step in benchmark mode (synthetic input, the exchange, optimizer + EMA), on one
// process: `workers` workers of batch/workers examples each, gradients in grad_bits (32 fp32, 1 TernGrad
// with clip 2.5).
struct TrainerCase {
  NetCase net;
  int threads, workers, grad_bits;
  int64_t batch;  // total over the workers
};

struct TrainerRun {
  std::string dir;
  std::unique_ptr<Trainer> trainer;
  explicit TrainerRun(const TrainerCase& c) {
    dir = (std::filesystem::temp_directory_path() / ("tg_train_step_bench_" + std::to_string(::getpid()))).string();
    std::filesystem::remove_all(dir);
    TrainConfig cfg;
    cfg.train_dir = dir;
    cfg.benchmark_mode = true;
    cfg.dataset = c.net.num_classes == 10 ? (c.net.channels == 1 ? "fashion_mnist" : "cifar10") : "imagenet";
    cfg.net = c.net.name;
    cfg.image_size = c.net.image_size;
    cfg.threads = c.threads;
    cfg.num_nodes = c.workers;
    cfg.batch_size = c.batch;
    cfg.grad_bits = c.grad_bits;
    cfg.clip_factor = c.grad_bits == 1 ? 2.5f : 0.f;
    cfg.learning_rate_decay_type = "fixed";
    cfg.initial_learning_rate = 1e-3;
    cfg.label_smoothing = c.net.label_smoothing;
    cfg.max_steps = 1 << 30;
    trainer = std::make_unique<Trainer>(cfg);
    trainer->run_steps(2);  // primitives created, caches warm
  }
  ~TrainerRun() { std::filesystem::remove_all(dir); }
};

void bm_trainer_step(benchmark::State& state, TrainerCase c) {
  std::unique_ptr<TrainerRun> run = setup_or_skip(state, [&] { return std::make_unique<TrainerRun>(c); });
  if (!run) return;
  PhaseTimes sum;
  run_counted(state, c.batch, [&] { sum += run->trainer->run_steps(1); });
  for (const auto& [name, ms] : sum.scaled(1e3 / static_cast<double>(state.iterations())).named("ms_"))
    state.counters[name] = ms;
}

const NetCase& find_case(const std::string& name) {
  for (const NetCase& c : net_cases())
    if (c.name == name) return c;
  std::string known;
  for (const NetCase& c : net_cases()) known += (known.empty() ? "" : ", ") + c.name;
  TG_THROW("--net '{}' has no benchmark case (known: {}, all)", name, known);
}

}  // namespace
}  // namespace tg

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  std::string nets = "lenet", threads = "1,2";
  int64_t batch_override = 0;
  bool count_allocs = false;
  std::string trainer_bits, workers = "1";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* flag) -> const char* {
      size_t n = std::strlen(flag);
      return a.compare(0, n, flag) == 0 ? a.c_str() + n : nullptr;
    };
    if (const char* v = value("--net=")) {
      nets = v;
    } else if (const char* v = value("--threads=")) {
      threads = v;
    } else if (const char* v = value("--batch=")) {
      batch_override = std::atoll(v);
    } else if (const char* v = value("--trainer=")) {
      trainer_bits = v;
    } else if (const char* v = value("--workers=")) {
      workers = v;
    } else if (a == "--count_allocs") {
      count_allocs = true;
    } else if (a == "--trace_allocs") {  // with --count_allocs: where each counted allocation comes from
      tg::alloc_counter::set_tracing(true);
    } else {
      std::fprintf(stderr, "train_step_bench: unknown flag %s (see the header of bench/train_step_bench.cc)\n",
                   argv[i]);
      return 2;
    }
  }
  std::vector<std::string> names = tg::split_commas(nets);
  if (nets == "all") {
    names.clear();
    for (const auto& c : tg::net_cases()) names.push_back(c.name);
  }
  try {
    for (const std::string& name : names) {
      const tg::NetCase& c = tg::find_case(name);
      const int64_t batch = batch_override > 0 ? batch_override : c.batch;
      for (const std::string& t : tg::split_commas(threads)) {
        const int th = std::atoi(t.c_str());
        if (count_allocs) tg::report_allocations(c, th, batch);
        std::string bm = "train_step/" + c.name + "/batch:" + std::to_string(batch) + "/threads:" + t;
        benchmark::RegisterBenchmark(bm.c_str(), tg::bm_train_step, c, th, batch)
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
        for (const std::string& bits : tg::split_commas(trainer_bits)) {
          TG_CHECK(bits == "fp32" || bits == "terngrad", "--trainer={}: the codings are fp32, terngrad", bits);
          for (const std::string& w : tg::split_commas(workers)) {
            const int nw = std::atoi(w.c_str());
            TG_CHECK(nw >= 1, "--workers={}: counts of at least 1", w);
            tg::TrainerCase tc{c, th, nw, bits == "fp32" ? 32 : 1, batch * nw};
            std::string tb =
                "trainer_step/" + c.name + "/" + bits + "/workers:" + w + "x" + std::to_string(batch) + "/threads:" + t;
            benchmark::RegisterBenchmark(tb.c_str(), tg::bm_trainer_step, tc)
                ->UseRealTime()
                ->Unit(benchmark::kMillisecond);
          }
        }
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_step_bench: %s\n", e.what());
    return 2;
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

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
// --count_allocs: also runs 5 steady-state steps with the host allocator (malloc & co.) counted and prints
//             how many allocations each step made (0 means the step allocates nothing).
// --trace_allocs: with --count_allocs, prints a raw backtrace of every counted allocation on stderr.
//
// Each benchmark reports `images/s` (a rate counter over wall time), `allocs/step` (heap allocations per
// timed step, from the malloc interposer below) and `faults/step` (minor page faults per timed step). Inputs are fixed
// random images and labels; the learning rate is small (1e-3) so the loss stays finite on random data for any number of
// steps.
#include <benchmark/benchmark.h>
#include <execinfo.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "terngrad/backend/backend.h"
#include "terngrad/models/registry.h"
#include "terngrad/nn/net.h"
#include "terngrad/optim/optimizer.h"

// ---- heap allocation counter ---------------------------------------------------------------------------
// The executable defines malloc & co. and forwards to glibc's implementations, so every allocation in the
// process (ours, oneDNN's, libstdc++'s, OpenMP's) passes through here. Counting is switched on only around
// the steps being measured.
extern "C" {
void* __libc_malloc(size_t);
void __libc_free(void*);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
}

namespace {
std::atomic<bool> g_counting{false};
std::atomic<bool> g_tracing{false};  // --trace_allocs: a raw backtrace per counted allocation, on stderr
std::atomic<int64_t> g_allocations{0};
thread_local bool t_in_trace = false;
inline void note_allocation() {
  if (!g_counting.load(std::memory_order_relaxed)) return;
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (g_tracing.load(std::memory_order_relaxed) && !t_in_trace) {
    t_in_trace = true;  // backtrace() may allocate on its first call
    void* frames[16];
    int n = backtrace(frames, 16);
    static const char kSep[] = "---- allocation\n";
    (void)!write(2, kSep, sizeof(kSep) - 1);
    backtrace_symbols_fd(frames, n, 2);  // "exe(+offset)": resolve with addr2line -f -C -e exe offset
    t_in_trace = false;
  }
}
}  // namespace

extern "C" {
void* malloc(size_t n) {
  note_allocation();
  return __libc_malloc(n);
}
void free(void* p) { __libc_free(p); }
void* calloc(size_t n, size_t s) {
  note_allocation();
  return __libc_calloc(n, s);
}
void* realloc(void* p, size_t n) {
  note_allocation();
  return __libc_realloc(p, n);
}
void* memalign(size_t a, size_t n) {
  note_allocation();
  return __libc_memalign(a, n);
}
void* aligned_alloc(size_t a, size_t n) {
  note_allocation();
  return __libc_memalign(a, n);
}
int posix_memalign(void** out, size_t a, size_t n) {
  note_allocation();
  void* p = __libc_memalign(a, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
}

namespace tg {
namespace {

// The networks at their real input sizes (DESIGN.md, reference section 3).
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
    oo.kind = OptimizerKind::MOMENTUM;
    oo.momentum = 0.9f;
    optimizer = std::make_unique<Optimizer>(oo, store->params(), *backend);

    std::mt19937 rng(123);
    std::uniform_real_distribution<float> pixel(-1.f, 1.f);
    std::uniform_int_distribution<int32_t> label(0, static_cast<int32_t>(c.num_classes - 1));
    images.resize(static_cast<size_t>(batch * c.image_size * c.image_size * c.channels));
    labels.resize(static_cast<size_t>(batch));
    for (float& v : images) v = pixel(rng);
    for (int32_t& v : labels) v = label(rng);
    x = Tensor(images.data(), Shape{batch, c.image_size, c.image_size, c.channels}, DType::F32, Device::cpu());
    y = Tensor(labels.data(), Shape{batch}, DType::I32, Device::cpu());
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

// Minor page faults of the process so far: a step that touches only memory it touched before takes none.
long minor_page_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

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

void bm_train_step(benchmark::State& state, NetCase c, int threads, int64_t batch) {
  Trainee* t = nullptr;
  try {
    t = &trainee_for(c, threads, batch);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    for (auto _ : state) {
    }
    return;
  }
  const int64_t before = g_allocations.load();
  const long faults_before = minor_page_faults();
  g_counting = true;
  float loss = 0.f;
  for (auto _ : state) loss = t->train_step();
  g_counting = false;
  const double steps = static_cast<double>(state.iterations());
  state.counters["faults/step"] = static_cast<double>(minor_page_faults() - faults_before) / steps;
  state.counters["images/s"] = benchmark::Counter(steps * static_cast<double>(batch), benchmark::Counter::kIsRate);
  state.counters["allocs/step"] = static_cast<double>(g_allocations.load() - before) / steps;
  state.counters["loss"] = loss;
  state.SetItemsProcessed(state.iterations() * batch);
}

// Runs a few steady-state steps with allocation counting on and prints the count of each.
void report_allocations(const NetCase& c, int threads, int64_t batch) {
  try {
    Trainee t(c, threads, batch);
    for (int i = 0; i < 2; ++i) t.train_step();
    std::printf("%s threads=%d batch=%lld heap allocations per steady-state step:", c.name.c_str(), threads,
                static_cast<long long>(batch));
    for (int i = 0; i < 5; ++i) {
      const int64_t before = g_allocations.load();
      g_counting = true;
      t.train_step();
      g_counting = false;
      std::printf(" %lld", static_cast<long long>(g_allocations.load() - before));
    }
    std::printf("\n");
  } catch (const std::exception& e) {
    std::printf("%s: %s\n", c.name.c_str(), e.what());
  }
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
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
    } else if (a == "--count_allocs") {
      count_allocs = true;
    } else if (a == "--trace_allocs") {  // with --count_allocs: where each counted allocation comes from
      g_tracing = true;
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

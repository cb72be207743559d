// codec_bench: speed of the CPU ternary codec (src/backend/cpu/ternary_codec.cc) on whole-model gradients, as
// GB/s of fp32 gradient (4n bytes per iteration), next to a memcpy of the same 4n bytes in the same run.
//
//   codec_bench [--sizes=1250000,25000000,61000000] [--threads=1,2] [--isa=auto|generic|avx2|avx512] [--workers=2]
//               [benchmark flags]
//
// --sizes:   comma-separated gradient sizes in float elements (default: LeNet 1.25M, ResNet-50 25M, AlexNet
//            61M); a suffix K or M multiplies by 10^3 or 10^6 (1.25M).
// --threads: comma-separated compute thread counts (default 1,2); set_compute_threads before each benchmark.
// --isa:     force one instruction-set path of the loops (set_ternary_codec_isa; default: the best the CPU has).
// --workers: how many workers' gathered codes the decodes read (default 2; 2 to 127); a value other than 2 is
//            part of every benchmark's name (`/workers:4`).
//
// Benchmarks per (size, threads), in this order:
//   memcpy          copy of the gradient (4n bytes read, 4n written) split over the same threads (parallel_for):
//                   the memory-speed yardstick
//   scalers         tensor_stats_cpu + ternary_scaler (ternary_scaler_cpu, clip_factor 2.5)
//   encode          ternary_encode_cpu with that scaler
//   scalers_encode  both
//   decode          ternary_decode_gathered_cpu of 2 (--workers) workers' gathered codes
//   total           scalers + encode + decode: one worker's codec work in a step of the allgather2 exchange
//   total_ops       the same three through the CPU backend's codec ops (Backend::ternary_scaler, ternary_encode,
//                   ternary_decode_gathered over Tensor views, the scaler an f32 (1) tensor): what the schemes'
//                   TernaryCoding costs on the CPU; the difference to total is the ops' checks and views
//   decay_scalers   weight decay then the scalers, as before TernGrad fused them: backward's loop g += wd * w
//                   (Backend::axpy's) and ternary_scaler_cpu (the gradient is `out`, the parameter `g`)
//   decay_fused     the same in one pass: ternary_scaler_with_adds_cpu (TernGrad's scalers stage)
//   decode_update   the decode then the optimizer's pass, as before TernGrad fused them: decode (above) into the
//                   gradient, then Backend::optimizer_update (momentum 0.9 with the moving average, the trainer's
//                   default) reading it
//   update_coded    the same in one pass: Backend::optimizer_update_coded from the workers' gathered codes
//                   (the decoded gradient never written)
// The gradient is one tensor of n normal(0, 1e-3) values (the exchange encodes a fused gradient tensor by
// tensor; one large tensor is the best case for threading, the per-tensor calls add a little). Every buffer
// is 64-byte aligned, as the trainer's slabs, and allocated and first-touched before timing. After the run a table
// prints each benchmark's median time and GB/s and total's time as a multiple of memcpy's (target: at most 3x for 25M
// and 61M).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "bench/bench_args.h"
#include "terngrad/backend/backend.h"
#include "terngrad/backend/ternary_codec.h"
#include "terngrad/core/parallel.h"
#include "terngrad/core/philox.h"

namespace tg {
namespace {

constexpr float kClipFactor = 2.5f;

// 64-byte aligned host memory, as the trainer's slabs (terngrad/core/buffer.h).
template <typename T>
struct Aligned {
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T[], Free> p;
  explicit Aligned(int64_t count) : p(static_cast<T*>(std::aligned_alloc(64, (count * sizeof(T) + 63) / 64 * 64))) {
    if (!p) throw std::bad_alloc();
    std::memset(p.get(), 0, count * sizeof(T));  // first touch, before any timing
  }
  T* data() { return p.get(); }
};

// Buffers of one gradient size, built once and kept for the whole run (the largest set is ~9n bytes).
struct Gradient {
  int64_t n = 0, nbytes = 0;
  Aligned<float> g;    // (n) the gradient, normal(0, 1e-3)
  Aligned<float> out;  // (n) memcpy destination and decoded average
  int workers = 2;
  Aligned<uint8_t> packed;     // (workers, nbytes) the workers' gathered codes
  Aligned<float> w, acc, ema;  // (n) each: the optimizer's parameter, momentum slot and moving average
  float s = 0.f;               // its scaler

  Gradient(int64_t n_, int workers_)
      : n(n_),
        nbytes((n_ + 3) / 4),
        g(n_),
        out(n_),
        workers(workers_),
        packed(workers_ * nbytes),
        w(n_),
        acc(n_),
        ema(n_) {
    std::mt19937 rng(static_cast<uint32_t>(n));
    std::normal_distribution<float> dist(0.f, 1e-3f);
    for (int64_t i = 0; i < n; ++i) g.data()[i] = dist(rng);
    s = ternary_scaler_cpu(g.data(), n, kClipFactor);
    // the other workers' codes (a key each), as received by the all-gather
    for (int k = 1; k < workers; ++k)
      ternary_encode_cpu(g.data(), n, s, philox_key(1, static_cast<uint32_t>(k)), 0, 0, packed.data() + k * nbytes);
  }
};

int g_workers = 2;  // --workers

Gradient& gradient(int64_t n) {
  static std::map<int64_t, std::unique_ptr<Gradient>> cache;
  auto& p = cache[n];
  if (!p) p = std::make_unique<Gradient>(n, g_workers);
  return *p;
}

enum class Op {
  Memcpy,
  Scalers,
  Encode,
  ScalersEncode,
  Decode,
  Total,
  TotalOps,
  DecayScalers,
  DecayFused,
  DecodeUpdate,
  UpdateCoded
};
const char* op_name(Op op) {
  switch (op) {
    case Op::Memcpy:
      return "memcpy";
    case Op::Scalers:
      return "scalers";
    case Op::Encode:
      return "encode";
    case Op::ScalersEncode:
      return "scalers_encode";
    case Op::Decode:
      return "decode";
    case Op::Total:
      return "total";
    case Op::TotalOps:
      return "total_ops";
    case Op::DecayScalers:
      return "decay_scalers";
    case Op::DecayFused:
      return "decay_fused";
    case Op::DecodeUpdate:
      return "decode_update";
    case Op::UpdateCoded:
      return "update_coded";
  }
  return "?";
}
constexpr Op kOps[] = {Op::Memcpy,   Op::Scalers,      Op::Encode,     Op::ScalersEncode, Op::Decode,     Op::Total,
                       Op::TotalOps, Op::DecayScalers, Op::DecayFused, Op::DecodeUpdate,  Op::UpdateCoded};
constexpr float kWeightDecay = 5e-4f;

// One CPU backend per thread count, created before timing.
Backend& cpu_backend(int threads) {
  static std::map<int, std::unique_ptr<Backend>> cache;
  auto& b = cache[threads];
  if (!b) b = make_backend("cpu", BackendOptions{threads});
  return *b;
}

void bm_codec(benchmark::State& state, Op op, int64_t n, int threads) {
  Gradient& d = gradient(n);
  set_compute_threads(threads);
  const PhiloxKey key = philox_key(1, 0);
  uint32_t step = 0;
  Backend& be = cpu_backend(threads);
  set_compute_threads(threads);
  float scaler = 0.f;
  const Tensor tgrad(d.g.data(), Shape{n}, DType::kF32, Device::cpu());
  const Tensor tout(d.out.data(), Shape{n}, DType::kF32, Device::cpu());
  const Tensor tscaler(&scaler, Shape{1}, DType::kF32, Device::cpu());
  const int W = d.workers;
  const Tensor tpacked(d.packed.data(), Shape{W * d.nbytes}, DType::kU8, Device::cpu());
  const Tensor tw(d.w.data(), Shape{n}, DType::kF32, Device::cpu()),
      tacc(d.acc.data(), Shape{n}, DType::kF32, Device::cpu()),
      tema(d.ema.data(), Shape{n}, DType::kF32, Device::cpu());
  OptimizerStep momentum;
  momentum.kind = OptimizerKind::kMomentum;
  momentum.lr = 1e-3f;
  momentum.momentum = 0.9f;
  momentum.ema_decay = 0.9999f;
  CodedAverage coded;
  coded.gathered = tpacked;
  coded.stride = d.nbytes;
  coded.scaler = tscaler;
  coded.num_workers = W;
  if (op == Op::DecodeUpdate || op == Op::UpdateCoded) scaler = d.s;
  for (auto _ : state) {
    float s = d.s;
    switch (op) {
      case Op::Memcpy:  // on the same threads as the codec: the memory speed they can reach together
        parallel_for(n, 1 << 16, [&](int64_t b, int64_t e) {
          std::memcpy(d.out.data() + b, d.g.data() + b, (e - b) * sizeof(float));
        });
        break;
      case Op::Scalers:
        s = ternary_scaler_cpu(d.g.data(), n, kClipFactor);
        break;
      case Op::Encode:
        ternary_encode_cpu(d.g.data(), n, s, key, step, 0, d.packed.data());
        break;
      case Op::ScalersEncode:
        s = ternary_scaler_cpu(d.g.data(), n, kClipFactor);
        ternary_encode_cpu(d.g.data(), n, s, key, step, 0, d.packed.data());
        break;
      case Op::Decode:
        ternary_decode_gathered_cpu(d.packed.data(), d.nbytes, W, n, s, d.out.data());
        break;
      case Op::Total:
        s = ternary_scaler_cpu(d.g.data(), n, kClipFactor);
        ternary_encode_cpu(d.g.data(), n, s, key, step, 0, d.packed.data());
        ternary_decode_gathered_cpu(d.packed.data(), d.nbytes, W, n, s, d.out.data());
        break;
      case Op::TotalOps:
        be.ternary_scaler(tgrad, kClipFactor, tscaler);
        be.ternary_encode(tgrad, tscaler, key, step, 0, tpacked.slice0(0, d.nbytes), Tensor());
        be.ternary_decode_gathered(tpacked, d.nbytes, W, tscaler, tout);
        s = scaler;
        break;
      case Op::DecayScalers: {
        float* out = d.out.data();
        const float* w = d.g.data();
        parallel_for(n, 1 << 16, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) out[i] += kWeightDecay * w[i];
        });
        s = ternary_scaler_cpu(out, n, kClipFactor);
        break;
      }
      case Op::DecayFused:
        s = ternary_scaler_with_adds_cpu(d.out.data(), d.g.data(), kWeightDecay, nullptr, n, kClipFactor);
        break;
      case Op::DecodeUpdate:
        be.ternary_decode_gathered(tpacked, d.nbytes, W, tscaler, tout);
        be.optimizer_update(momentum, tw, tout, tacc, Tensor(), tema);
        break;
      case Op::UpdateCoded:
        be.optimizer_update_coded(momentum, tw, coded, tacc, Tensor(), tema);
        break;
    }
    benchmark::DoNotOptimize(s);
    benchmark::ClobberMemory();
    ++step;  // fresh random bits each iteration, as in training
  }
  state.SetBytesProcessed(state.iterations() * n * static_cast<int64_t>(sizeof(float)));
}

// Console output as usual, plus every run's time per iteration kept for the summary table.
class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  struct Key {
    int64_t n;
    int threads;
    Op op;
    bool operator<(const Key& o) const { return std::tie(n, threads, op) < std::tie(o.n, o.threads, o.op); }
  };
  std::map<std::string, Key> keys;             // benchmark name -> what it measures
  std::map<Key, std::vector<double>> seconds;  // per iteration, one entry per repetition

  std::map<Key, double> median_seconds;  // Google Benchmark's own median aggregate, when reported

  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      auto it = keys.find(r.run_name.function_name);
      if (it == keys.end() || r.error_occurred || r.iterations == 0) continue;
      const double per_iteration = r.real_accumulated_time / static_cast<double>(r.iterations);
      if (r.run_type == Run::RT_Iteration) seconds[it->second].push_back(per_iteration);
      if (r.run_type == Run::RT_Aggregate && r.aggregate_name == "median") median_seconds[it->second] = per_iteration;
    }
    ConsoleReporter::ReportRuns(runs);
  }

  void print_summary() const {
    std::printf("\nSummary (%s path): median over repetitions; GB/s of fp32 gradient (4n bytes); total / memcpy time\n",
                enum_name(ternary_codec_isa()));
    std::printf("%12s %7s", "elements", "threads");
    for (Op op : kOps) std::printf(" %15s", op_name(op));
    std::printf(" %14s\n", "total/memcpy");
    std::map<std::pair<int64_t, int>, std::map<Op, double>> rows;
    for (const auto& [k, v] : seconds) {
      std::vector<double> t = v;
      std::sort(t.begin(), t.end());
      const size_t m = t.size();
      rows[{k.n, k.threads}][k.op] = m % 2 ? t[m / 2] : 0.5 * (t[m / 2 - 1] + t[m / 2]);
    }
    for (const auto& [k, t] : median_seconds) rows[{k.n, k.threads}][k.op] = t;
    for (const auto& [nt, ops] : rows) {
      std::printf("%12lld %7d", static_cast<long long>(nt.first), nt.second);
      for (Op op : kOps) {
        auto it = ops.find(op);
        if (it == ops.end()) {
          std::printf(" %15s", "-");
        } else {
          const double gbs = 4.0 * static_cast<double>(nt.first) / it->second * 1e-9;
          std::printf(" %6.2fms %5.1fGB/s", it->second * 1e3, gbs);
        }
      }
      auto m = ops.find(Op::Memcpy), t = ops.find(Op::Total);
      if (m != ops.end() && t != ops.end()) std::printf(" %13.2fx", t->second / m->second);
      std::printf("\n");
    }
  }
};

// "1.25M" -> 1250000, "4K" -> 4000, "1000" -> 1000; 0 for anything else.
int64_t parse_size(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  double mult = 1.0;
  if (end && (*end == 'M' || *end == 'm')) {
    mult = 1e6;
    ++end;
  } else if (end && (*end == 'K' || *end == 'k')) {
    mult = 1e3;
    ++end;
  }
  if (!end || *end != '\0' || !(v > 0)) return 0;
  return static_cast<int64_t>(std::llround(v * mult));
}

}  // namespace
}  // namespace tg

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  std::string sizes = "1.25M,25M,61M", threads = "1,2";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--sizes=", 0) == 0) {
      sizes = a.substr(8);
    } else if (a.rfind("--threads=", 0) == 0) {
      threads = a.substr(10);
    } else if (a.rfind("--workers=", 0) == 0) {
      char* end = nullptr;
      const long w = std::strtol(a.c_str() + 10, &end, 10);
      if (end == a.c_str() + 10 || *end != '\0' || w < 2 || w > 127) {
        std::fprintf(stderr, "codec_bench: --workers=%s: expected a count from 2 to 127\n", a.c_str() + 10);
        return 2;
      }
      tg::g_workers = static_cast<int>(w);
    } else if (a.rfind("--isa=", 0) == 0) {
      const std::string isa = a.substr(6);
      tg::CodecIsa want = tg::CodecIsa::kAuto;
      try {
        want = tg::parse_enum<tg::CodecIsa>(isa, "--isa");
      } catch (const tg::Error& e) {
        std::fprintf(stderr, "codec_bench: %s\n", e.what());
        return 2;
      }
      if (tg::set_ternary_codec_isa(want) != want && want != tg::CodecIsa::kAuto) {
        std::fprintf(stderr, "codec_bench: this CPU cannot run the %s path\n", isa.c_str());
        return 2;
      }
    } else {
      std::fprintf(stderr, "codec_bench: unknown flag %s (see the header of bench/codec_bench.cc)\n", argv[i]);
      return 2;
    }
  }
  tg::SummaryReporter reporter;
  for (const std::string& sz : tg::split_commas(sizes)) {
    const int64_t n = tg::parse_size(sz);
    if (n <= 0) {
      std::fprintf(stderr, "codec_bench: --sizes entry '%s' is not a positive element count\n", sz.c_str());
      return 2;
    }
    tg::gradient(n);  // allocated, first-touched and filled before any timing
    for (const std::string& t : tg::split_commas(threads)) {
      const int th = std::atoi(t.c_str());
      if (th < 1) {
        std::fprintf(stderr, "codec_bench: --threads entry '%s' is not a positive count\n", t.c_str());
        return 2;
      }
      for (tg::Op op : tg::kOps) {
        const std::string name = std::string(tg::op_name(op)) + "/n:" + std::to_string(n) + "/threads:" + t +
                                 (tg::g_workers != 2 ? "/workers:" + std::to_string(tg::g_workers) : "");
        reporter.keys[name] = {n, th, op};
        benchmark::RegisterBenchmark(name.c_str(), tg::bm_codec, op, n, th)
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
  std::printf("codec path: %s\n", tg::enum_name(tg::ternary_codec_isa()));
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.print_summary();
  benchmark::Shutdown();
  return 0;
}

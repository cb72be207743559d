// Tests of the gradient schemes over real groups of ranks: one std::thread per rank, each with its own CPU
// backend and GradientExchange, meeting through ThreadCommunicators laid out as M nodes x L ranks (a world group,
// one group per node, one cross group per local rank), as the Topology builds them:
//   - hierarchical on one node gives the fp32 scheme's bits (one node = fp32 averaging);
//   - hierarchical with one rank per node gives the terngrad scheme's bits (allgather2 and allreduce8 nodes);
//   - hierarchical on 2 x 2 is unbiased (a statistical test: the mean of many steps' averages against the true
//     average, within bounds from the ternary variance), the same bits overlapped or not, for any bucketing and
//     any backend thread count, with --local_bits 16 too; its byte counters split intra- and inter-node traffic;
//   - error feedback: bit for bit against a reference written from its definition, overlapped or not;
//   - per-bucket scalers (--scaler_bucket): the same bits overlapped or not, for any bucketing and thread count, left
//     coded or decoded, with error feedback; unbiased; one rank per node hierarchical = terngrad; the extra scalers
//     counted in the byte model;
//   - the GPU's overlap schedule (OverlapEngine::kStream, run inline on the CPU): the bits of --overlap=false and of
//     the communication thread for every scheme with collectives, and a bucket exchanged as soon as it is complete;
//   - the registry: names, the choice from --grad_bits / --exchange / the layout, errors naming the choices.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <thread>

#include "terngrad/backend/backend.h"
#include "terngrad/backend/ternary_codec.h"
#include "terngrad/comm/thread_communicator.h"
#include "terngrad/core/error.h"
#include "terngrad/core/half_convert.h"
#include "terngrad/core/philox.h"
#include "terngrad/core/timeline.h"
#include "terngrad/exchange/gradient_exchange.h"
#include "terngrad/exchange/scheme_registry.h"
#include "terngrad/math/ternary_math.h"

namespace tg {
namespace {

const std::vector<ParamInfo> kParams = {{"conv1/weights", 150}, {"conv1/biases", 6},    {"conv2/weights", 1203},
                                        {"fc/weights", 957},    {"logits/weights", 40}, {"logits/biases", 4}};

// Worker w's gradient of tensor t, element i at step k (a fixed pattern per worker plus a step-dependent part).
float grad_value(int w, int t, int64_t i) {
  const uint32_t h = static_cast<uint32_t>(w * 7919 + t * 104729 + i * 31);
  const float u = static_cast<float>((h * 2654435761u) >> 8) / 16777216.f;  // [0, 1)
  return 0.02f * (u - 0.5f) + 0.003f * static_cast<float>(w % 3) - 0.001f * static_cast<float>(t);
}

struct RankGrads {
  std::vector<std::vector<std::vector<float>>> data;  // [local worker][tensor][element]
  void fill(int first_worker) {
    for (size_t l = 0; l < data.size(); ++l)
      for (size_t t = 0; t < kParams.size(); ++t)
        for (int64_t i = 0; i < kParams[t].numel; ++i)
          data[l][t][i] = grad_value(first_worker + static_cast<int>(l), static_cast<int>(t), i);
  }
  explicit RankGrads(int workers) : data(workers) {
    for (auto& w : data)
      for (auto& p : kParams) w.emplace_back(p.numel);
  }
  std::vector<std::vector<Tensor>> views() {
    std::vector<std::vector<Tensor>> v;
    for (auto& w : data) {
      v.emplace_back();
      for (auto& g : w)
        v.back().emplace_back(g.data(), Shape{static_cast<int64_t>(g.size())}, DType::kF32, Device::cpu());
    }
    return v;
  }
};

// M nodes x L ranks as thread groups: rank r = node * L + local.
struct Layout {
  int nodes = 1, local = 1;
  std::vector<std::unique_ptr<ThreadCommunicator>> world;
  std::vector<std::vector<std::unique_ptr<ThreadCommunicator>>> node_groups;   // [node][local]
  std::vector<std::vector<std::unique_ptr<ThreadCommunicator>>> cross_groups;  // [local][node]
  Layout(int m, int l) : nodes(m), local(l) {
    world = make_thread_communicators(m * l);
    for (int n = 0; n < m; ++n) node_groups.push_back(make_thread_communicators(l));
    for (int k = 0; k < l; ++k) cross_groups.push_back(make_thread_communicators(m));
  }
  int ranks() const { return nodes * local; }
  // `flat`: only the world group (the flat schemes' view).
  ExchangeComms comms(int r, bool flat) const {
    ExchangeComms c;
    c.world = world[r].get();
    if (flat) return c;
    c.local = node_groups[r / local][r % local].get();
    c.cross = cross_groups[r % local][r / local].get();
    return c;
  }
};

struct RunOptions {
  int grad_bits = 1;
  float clip_factor = 0.f;
  int64_t scaler_bucket = 0;  // --scaler_bucket
  ExchangeOptions exchange;
  bool flat = false;  // give the exchange only the world group
  int workers_per_rank = 1;
  int backend_threads = 1;
  int steps = 1;
  uint32_t first_step = 3;
  // Weight decay (on the "weights" tensors): added to the gradients before the exchange (as backward does), or
  // left to the exchange (GradientExchange::apply_weight_decay).
  float weight_decay = 0.f;
  bool decay_in_exchange = false;
  // GradientExchange::defer_decode: the ternary tensors' average is read back from the coded averages (decoded
  // here by the backend's decode ops) instead of the gradient.
  bool defer_decode = false;
  // ... and after each step every bucket's deferred decode is done through GradientScheme::decode_deferred (what
  // the scheduler does while it waits), so nothing is left coded.
  bool decode_deferred = false;
};

// The parameters weight decay reads: fixed values per tensor.
std::vector<std::vector<float>> decay_params() {
  std::vector<std::vector<float>> p;
  for (size_t t = 0; t < kParams.size(); ++t) {
    p.emplace_back(kParams[t].numel);
    for (int64_t i = 0; i < kParams[t].numel; ++i) p.back()[i] = 0.05f * grad_value(97, static_cast<int>(t), i) * 40.f;
  }
  return p;
}
float decay_of(const RunOptions& o, size_t t) {
  return kParams[t].name.find("weights") != std::string::npos ? o.weight_decay : 0.f;
}

// Every rank's first worker's gradient after each step (the average), [rank][step][tensor][element]; stats of
// rank 0's last step.
struct RunResult {
  std::vector<std::vector<std::vector<std::vector<float>>>> out;
  std::vector<std::vector<std::vector<std::vector<float>>>> grads;  // the first worker's gradient itself, likewise
  std::vector<ExchangeStats> stats;                                 // per rank, last step
  std::string scheme;
};

RunResult run_layout(Layout& lay, const RunOptions& o) {
  CompressionFlags f;
  f.grad_bits = o.grad_bits;
  f.clip_factor = o.clip_factor;
  f.scaler_bucket = o.scaler_bucket;
  f.size_to_binarize = 7;  // conv1/biases stays fp32
  const CompressionPolicy pol(f, kParams);
  const int R = lay.ranks();
  RunResult res;
  res.out.resize(R);
  res.grads.resize(R);
  res.stats.resize(R);
  std::vector<std::string> errors(R);
  std::vector<std::string> names(R);
  std::vector<std::thread> threads;
  for (int r = 0; r < R; ++r)
    threads.emplace_back([&, r] {
      try {
        BackendOptions bo;
        bo.threads = o.backend_threads;
        std::unique_ptr<Backend> be = make_backend("cpu", bo);
        be->bind_thread();
        RankGrads g(o.workers_per_rank);
        GradientExchange ex(*be, pol, g.views(), {0}, lay.comms(r, o.flat), o.exchange);
        names[r] = ex.scheme().describe();
        std::vector<std::vector<float>> params = decay_params();
        if (o.weight_decay != 0.f && o.decay_in_exchange) {
          WeightDecayTerms terms;
          for (size_t t = 0; t < kParams.size(); ++t) {
            const float d = decay_of(o, t);
            terms.coefficients.push_back(d);
            terms.params.push_back(
                d != 0.f ? Tensor(params[t].data(), Shape{kParams[t].numel}, DType::kF32, Device::cpu()) : Tensor());
          }
          ex.apply_weight_decay(std::move(terms));
        }
        if (o.defer_decode) ex.defer_decode();
        for (int s = 0; s < o.steps; ++s) {
          g.fill(r * o.workers_per_rank);
          if (o.weight_decay != 0.f && !o.decay_in_exchange)  // backward's axpy
            for (auto& worker : g.data)
              for (size_t t = 0; t < kParams.size(); ++t)
                for (int64_t i = 0; i < kParams[t].numel; ++i) worker[t][i] += decay_of(o, t) * params[t][i];
          ex.begin(o.first_step + s);
          for (int first = pol.num_tensors(); first >= 0; --first) {  // as backward reports them
            ex.tensors_ready(first);
            ex.progress();
          }
          res.stats[r] = ex.finish();
          if (o.decode_deferred) {
            for (int b = 0; b < ex.num_buckets(); ++b) ex.scheme().coded_update()->decode_deferred(b);
            for (int b = 0; b < ex.num_buckets(); ++b)
              if (ex.scheme().coded_update()->decode_deferred(b))
                throw Error("decode_deferred: a bucket decoded twice");
          }
          std::vector<std::vector<float>> average = g.data[0];
          if (o.defer_decode) {
            const std::vector<CodedAverage>* coded = ex.coded_averages();
            if (!coded) throw Error("defer_decode: no coded averages after the step");
            int defined = 0;
            for (size_t t = 0; t < kParams.size(); ++t) {
              const CodedAverage& c = (*coded)[t];
              if (!c.defined()) continue;
              ++defined;
              const Tensor out(average[t].data(), Shape{kParams[t].numel}, DType::kF32, Device::cpu());
              for_each_coded_part(c, out.numel(), [&](const CodedAverage& part, int64_t b, int64_t n) {
                if (part.gathered)
                  be->ternary_decode_gathered(part.gathered, part.stride, part.num_workers, part.scaler,
                                              out.slice0(b, b + n), part.bucket);
                else
                  be->ternary_decode_sums(part.code_sums, part.scaler, part.num_workers, out.slice0(b, b + n),
                                          part.bucket);
              });
            }
            if (defined != (o.decode_deferred ? 0 : pol.num_ternary()) && !o.exchange.overlap)
              throw Error(
                  fmt::format("defer_decode: {} coded averages for {} ternary tensors", defined, pol.num_ternary()));
          }
          res.out[r].push_back(average);
          res.grads[r].push_back(g.data[0]);
        }
      } catch (const std::exception& e) {
        errors[r] = e.what();
        lay.world[r]->abort(e.what());
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < R; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  res.scheme = names[0];
  return res;
}

void expect_same_bits(const RunResult& a, const RunResult& b, const std::string& what) {
  ASSERT_EQ(a.out.size(), b.out.size()) << what;
  for (size_t r = 0; r < a.out.size(); ++r)
    for (size_t s = 0; s < a.out[r].size(); ++s)
      for (size_t t = 0; t < kParams.size(); ++t)
        for (size_t i = 0; i < a.out[r][s][t].size(); ++i)
          ASSERT_EQ(a.out[r][s][t][i], b.out[r][s][t][i])
              << what << ": rank " << r << " step " << s << " " << kParams[t].name << "[" << i << "]";
}

TEST(HierarchicalScheme, OneNodeIsFp32Averaging) {
  for (int L : {2, 3}) {
    Layout h(1, L), f(1, L);
    RunOptions o;
    o.exchange.exchange = "hierarchical";
    o.exchange.bucket_mb = 4.0 / 1024;  // 4 KiB of fp32 gradient: several buckets
    o.workers_per_rank = 2;
    const RunResult hier = run_layout(h, o);
    EXPECT_NE(hier.scheme.find("hierarchical"), std::string::npos) << hier.scheme;
    RunOptions of = o;
    of.grad_bits = 32;
    of.flat = true;
    of.exchange.exchange = "auto";
    const RunResult fp32 = run_layout(f, of);
    EXPECT_EQ(fp32.scheme, "fp32");
    expect_same_bits(hier, fp32, fmt::format("1 node x {} ranks", L));
  }
}

TEST(HierarchicalScheme, OneRankPerNodeIsTernGrad) {
  for (int M : {3, 8}) {  // allgather2 between 3 nodes, allreduce8 between 8
    Layout h(M, 1), t(M, 1);
    RunOptions o;
    o.exchange.exchange = "hierarchical";
    o.clip_factor = 2.5f;
    o.steps = 2;
    const RunResult hier = run_layout(h, o);
    RunOptions ot = o;
    ot.flat = true;
    ot.exchange.exchange = M < 8 ? "allgather2" : "allreduce8";
    const RunResult tern = run_layout(t, ot);
    EXPECT_NE(tern.scheme.find("terngrad"), std::string::npos) << tern.scheme;
    expect_same_bits(hier, tern, fmt::format("{} nodes x 1 rank", M));
  }
}

// Every rank ends with the same bits, whatever the overlap, the bucketing or the backend's thread count.
TEST(HierarchicalScheme, DeterministicAcrossOverlapBucketsAndThreads) {
  RunOptions base;
  base.exchange.exchange = "hierarchical";
  base.clip_factor = 2.5f;
  base.steps = 2;
  base.exchange.overlap = false;
  Layout l0(2, 2);
  const RunResult ref = run_layout(l0, base);
  for (int r = 1; r < 4; ++r)
    for (size_t t = 0; t < kParams.size(); ++t) ASSERT_EQ(ref.out[r][1][t], ref.out[0][1][t]) << "rank " << r;
  struct Variant {
    bool overlap;
    double bucket_mb;
    int threads;
  };
  for (Variant v :
       {Variant{true, 25, 1}, Variant{true, 2.0 / 1024, 1}, Variant{true, 2.0 / 1024, 2}, Variant{false, 25, 2},
        // one tensor per bucket: the tensors of an even size (conv1, logits) are reduced in place in the gradient
        Variant{true, 4.0 / (1024 * 1024), 1}}) {
    Layout l(2, 2);
    RunOptions o = base;
    o.exchange.overlap = v.overlap;
    o.exchange.bucket_mb = v.bucket_mb;
    o.backend_threads = v.threads;
    expect_same_bits(run_layout(l, o), ref,
                     fmt::format("overlap {} bucket_mb {} threads {}", v.overlap, v.bucket_mb, v.threads));
  }
}

// E[average] = the true average over all workers: the mean of K steps' averages (each step draws new codes)
// against it, per element within 6 standard errors (variance of the M nodes' ternarizations of their averages,
// s|a| - a^2 each, over M^2, over K) plus the 16-bit uniform's rounding bias; and the squared z-scores average
// about 1.
TEST(HierarchicalScheme, Unbiased) {
  const int M = 2, L = 2, K = 300;
  Layout lay(M, L);
  RunOptions o;
  o.exchange.exchange = "hierarchical";
  o.steps = K;
  const RunResult res = run_layout(lay, o);
  const int N = M * L;
  double z2 = 0;
  int64_t count = 0;
  for (size_t t = 0; t < kParams.size(); ++t) {
    if (t == 1) continue;  // conv1/biases: fp32, exact
    const int64_t n = kParams[t].numel;
    // The shared scaler (c = 0): max over workers of max|g|.
    float s = 0;
    for (int w = 0; w < N; ++w)
      for (int64_t i = 0; i < n; ++i) s = std::max(s, std::fabs(grad_value(w, static_cast<int>(t), i)));
    for (int64_t i = 0; i < n; ++i) {
      double truth = 0, var = 0;
      for (int node = 0; node < M; ++node) {
        double a = 0;
        for (int k = 0; k < L; ++k) a += grad_value(node * L + k, static_cast<int>(t), i);
        a /= L;
        truth += a / M;
        var += (s * std::fabs(a) - a * a) / (M * M);
      }
      double mean = 0;
      for (int k = 0; k < K; ++k) mean += res.out[0][k][t][i];
      mean /= K;
      const double se = std::sqrt(std::max(var, 0.0) / K);
      const double bias = s * (std::ldexp(1.0, -17) + std::ldexp(1.0, -24));
      ASSERT_LE(std::fabs(mean - truth), 6 * se + bias + 1e-9) << kParams[t].name << "[" << i << "]";
      if (se > 0) {
        z2 += (mean - truth) * (mean - truth) / (se * se);
        ++count;
      }
    }
  }
  const double mean_z2 = z2 / count;
  EXPECT_NEAR(mean_z2, 1.0, 5 * std::sqrt(2.0 / count) + 0.05) << count << " elements";
}

TEST(HierarchicalScheme, Fp16InsideTheNodeAndByteCounters) {
  Layout lay(2, 2);
  RunOptions o;
  o.exchange.exchange = "hierarchical";
  o.exchange.local_bits = 16;
  const RunResult half = run_layout(lay, o);
  Layout lay32(2, 2);
  o.exchange.local_bits = 32;
  const RunResult full = run_layout(lay32, o);
  // fp16 inside the node rounds the sums: close to the fp32 path, not the same bits.
  bool differs = false;
  for (size_t t = 0; t < kParams.size(); ++t)
    for (int64_t i = 0; i < kParams[t].numel; ++i) {
      differs = differs || half.out[0][0][t][i] != full.out[0][0][t][i];
      EXPECT_NEAR(half.out[0][0][t][i], full.out[0][0][t][i], 0.01) << kParams[t].name << "[" << i << "]";
    }
  EXPECT_TRUE(differs);
  for (int r = 0; r < 4; ++r) {
    const ExchangeStats& st = full.stats[r];
    EXPECT_GT(st.intra_node_bytes, 0u) << r;
    EXPECT_GT(st.inter_node_bytes, 0u) << r;
    EXPECT_EQ(st.intra_node_bytes + st.inter_node_bytes, st.process_wire_bytes) << r;
    EXPECT_GT(half.stats[r].inter_node_bytes, 0u);
    EXPECT_LT(half.stats[r].intra_node_bytes, st.intra_node_bytes) << "fp16 halves the traffic inside a node";
  }
  // Between nodes only 2-bit codes (and the fp32-kept biases) travel: far fewer bytes than inside the node.
  EXPECT_LT(full.stats[0].inter_node_bytes * 8, full.stats[0].intra_node_bytes);
}

// With several nodes the all-gather inside the node carries the nodes' codes; the average left coded for the
// optimizer (defer_decode: one part per local rank's block) is the average the decode stage writes: allgather2
// (2 nodes) and allreduce8 (8), 2 and 3 local ranks, one and two workers per rank, overlapped or not, a tensor
// per bucket (conv1's reduced in place) or several, fp16 inside the node, with weight decay; decoded late
// (decode_deferred) too. The fp32 tensors' average is written to the gradient, the ternary ones' is not.
TEST(HierarchicalScheme, AverageLeftCodedIsTheDecodedAverage) {
  struct Variant {
    int nodes, local, workers;
    bool overlap;
    double bucket_mb;
    int local_bits;
  };
  for (Variant v :
       {Variant{2, 2, 1, false, 2.0 / 1024, 32}, Variant{2, 2, 1, true, 4.0 / (1024 * 1024), 32},
        Variant{2, 3, 2, true, 2.0 / 1024, 32}, Variant{8, 2, 1, false, 25, 32}, Variant{2, 2, 1, false, 25, 16}}) {
    const std::string what = fmt::format("{} nodes x {} ranks x {} workers, overlap {}, bucket_mb {}, local_bits {}",
                                         v.nodes, v.local, v.workers, v.overlap, v.bucket_mb, v.local_bits);
    RunOptions o;
    o.exchange.exchange = "hierarchical";
    o.clip_factor = 2.5f;
    o.steps = 2;
    o.workers_per_rank = v.workers;
    o.exchange.overlap = v.overlap;
    o.exchange.bucket_mb = v.bucket_mb;
    o.exchange.local_bits = v.local_bits;
    o.weight_decay = 5e-3f;
    o.decay_in_exchange = true;
    Layout l0(v.nodes, v.local);
    const RunResult decoded = run_layout(l0, o);
    o.defer_decode = true;
    Layout l1(v.nodes, v.local);
    const RunResult coded = run_layout(l1, o);
    expect_same_bits(coded, decoded, what);
    EXPECT_EQ(coded.grads[0][1][1], decoded.out[0][1][1]) << what;  // conv1/biases: fp32
    if (!v.overlap) {
      EXPECT_NE(coded.grads[0][1][2], decoded.out[0][1][2]) << what;  // conv2/weights: left coded
    }
    o.decode_deferred = true;
    Layout l2(v.nodes, v.local);
    const RunResult late = run_layout(l2, o);
    expect_same_bits(late, decoded, what + ", decoded late");
    EXPECT_EQ(late.grads[0][1][2], decoded.out[0][1][2]) << what;
  }
}

// The GPU's overlap schedule (OverlapEngine::kStream: each complete bucket's stages enqueued at once, in bucket
// order, with the groups moved to the side stream; on the CPU the stages run inline) gives the bits of
// --overlap=false and of the communication thread, for every scheme with collectives, several buckets and steps,
// one and two workers per rank, with error feedback.
TEST(OverlapEngines, TheStreamScheduleGivesTheSameBits) {
  struct Case {
    const char* what;
    int nodes, local, grad_bits, workers;
    std::string mode;
    bool flat, feedback;
  };
  for (const Case& c : {Case{"allgather2", 2, 1, 1, 2, "allgather2", true, false},
                        Case{"allgather2, error feedback", 3, 1, 1, 1, "allgather2", true, true},
                        Case{"allreduce8", 8, 1, 1, 1, "allreduce8", true, false},
                        Case{"hierarchical", 2, 2, 1, 2, "hierarchical", false, false},
                        Case{"fp32", 2, 1, 32, 2, "auto", true, false}}) {
    RunOptions o;
    o.grad_bits = c.grad_bits;
    o.clip_factor = c.grad_bits == 32 ? 0.f : 2.5f;
    o.flat = c.flat;
    o.workers_per_rank = c.workers;
    o.steps = 2;
    o.exchange.exchange = c.mode;
    o.exchange.error_feedback = c.feedback;
    o.exchange.bucket_mb = 2.0 / 1024;  // 2 KiB of fp32 gradient: several buckets
    o.exchange.overlap = false;
    Layout l0(c.nodes, c.local);
    const RunResult ref = run_layout(l0, o);
    for (OverlapEngine e : {OverlapEngine::kThread, OverlapEngine::kStream}) {
      o.exchange.overlap = true;
      o.exchange.overlap_engine = e;
      Layout l(c.nodes, c.local);
      expect_same_bits(run_layout(l, o), ref,
                       fmt::format("{}, {}", c.what, e == OverlapEngine::kStream ? "stream" : "thread"));
    }
  }
}

// The stream schedule starts a bucket inside backward: once the last tensors are reported final, their average
// is in the gradient (fp32, 2 ranks) while the first tensor still holds the rank's own gradient, until finish().
TEST(OverlapEngines, TheStreamScheduleExchangesABucketAsSoonAsItIsComplete) {
  CompressionFlags f;
  f.grad_bits = 32;
  const CompressionPolicy pol(f, kParams);
  const int T = pol.num_tensors();
  Layout lay(2, 1);
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      try {
        std::unique_ptr<Backend> be = make_backend("cpu", BackendOptions{});
        RankGrads g(1);
        g.fill(r);
        ExchangeOptions xo;
        xo.bucket_mb = 0.5 / 1024;  // 512 B: the logits' two tensors make the first bucket
        xo.overlap_engine = OverlapEngine::kStream;
        GradientExchange ex(*be, pol, g.views(), {0}, lay.comms(r, true), xo);
        if (!ex.overlapped_on_stream()) throw Error("not overlapped on the stream schedule");
        ex.begin(0);
        ex.tensors_ready(ex.bucket(0).begin);
        const float average = 0.5f * (grad_value(0, T - 1, 3) + grad_value(1, T - 1, 3));
        if (g.data[0][T - 1][3] != average) throw Error(fmt::format("bucket 0 not exchanged: {}", g.data[0][T - 1][3]));
        if (g.data[0][0][3] != grad_value(r, 0, 3)) throw Error("tensor 0 changed before it was reported final");
        ex.finish();
        const float first = 0.5f * (grad_value(0, 0, 3) + grad_value(1, 0, 3));
        if (g.data[0][0][3] != first)
          throw Error(fmt::format("tensor 0 not averaged by finish(): {}", g.data[0][0][3]));
      } catch (const std::exception& e) {
        errors[r] = e.what();
        lay.world[r]->abort(e.what());
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// With a timeline, the stream schedule puts every stage of every bucket between two device marks on a track "side
// stream (rank r)" (on the CPU a mark is the host's time), in stage order, resolved at the next begin() or by
// flush_timeline().
TEST(OverlapEngines, TheStreamScheduleDrawsItsStagesOnASideStreamTrack) {
  CompressionFlags f;
  f.grad_bits = 1;
  const CompressionPolicy pol(f, kParams);
  Layout lay(2, 1);
  std::vector<std::string> errors(2), json(2);
  std::vector<int> buckets(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      try {
        std::unique_ptr<Backend> be = make_backend("cpu", BackendOptions{});
        Timeline tl("unused.json", 1, 2, r);
        RankGrads g(1);
        ExchangeOptions xo;
        xo.exchange = "allgather2";
        xo.bucket_mb = 2.0 / 1024;
        xo.overlap_engine = OverlapEngine::kStream;
        GradientExchange ex(*be, pol, g.views(), {0}, lay.comms(r, true), xo, &tl);
        buckets[r] = ex.num_buckets();
        for (int step = 1; step <= 2; ++step) {
          tl.set_step(step);
          g.fill(r);
          ex.begin(static_cast<uint32_t>(step));
          for (int first = pol.num_tensors(); first >= 0; --first) ex.tensors_ready(first);
          ex.finish();
        }
        ex.flush_timeline();
        json[r] = tl.events_json();
      } catch (const std::exception& e) {
        errors[r] = e.what();
        lay.world[r]->abort(e.what());
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(errors[r], "") << "rank " << r;
    ASSERT_GE(buckets[r], 2);
    EXPECT_NE(json[r].find(fmt::format("\"side stream (rank {})\"", r)), std::string::npos) << json[r];
    // 5 stages (scalers, share scalers, encode, exchange codes, decode) per bucket and step, category "device".
    size_t spans = 0;
    for (size_t at = json[r].find("\"cat\":\"device\""); at != std::string::npos;
         at = json[r].find("\"cat\":\"device\"", at + 1))
      ++spans;
    EXPECT_EQ(spans, static_cast<size_t>(5 * 2 * buckets[r])) << json[r];
    const size_t share = json[r].find("\"name\":\"share scalers\""),
                 codes = json[r].find("\"name\":\"exchange codes\"");
    EXPECT_TRUE(share != std::string::npos && codes != std::string::npos && share < codes);
  }
}

// Weight decay applied by the TernGrad and hierarchical schemes in their scalers' pass (the ternary tensors fused,
// the fp32-kept ones by axpy) gives the bits of decaying the gradients first, as backward did: both flat modes, with
// and without error feedback and overlap, several buckets and steps; the hierarchical scheme on 2 nodes and on one.
// Schemes that do not apply it refuse the terms.
// One rank alone exchanging fp32 gradients (what the fp32 scheme refuses to do).
struct Fp32Exchange {
  CompressionPolicy pol{[] {
                          CompressionFlags f;
                          f.grad_bits = 32;
                          return f;
                        }(),
                        kParams};
  std::unique_ptr<Backend> be = make_backend("cpu", BackendOptions{});
  RankGrads g{1};
  GradientExchange ex{*be, pol, g.views(), {0}, ExchangeComms{}, ExchangeOptions{}};
};

// The flat terngrad scheme over 3 steps with clipping and weight decay, in buckets of 2 KiB.
RunOptions flat_terngrad(const std::string& mode, bool feedback, bool overlap, int workers_per_rank) {
  RunOptions o;
  o.flat = true;
  o.clip_factor = 2.5f;
  o.workers_per_rank = workers_per_rank;
  o.steps = 3;
  o.exchange.exchange = mode;
  o.exchange.error_feedback = feedback;
  o.exchange.overlap = overlap;
  o.exchange.bucket_mb = 2.0 / 1024;
  o.weight_decay = 5e-3f;
  return o;
}

TEST(TernGradScheme, WeightDecayInTheScalersPassGivesTheSameBits) {
  for (const char* mode : {"allgather2", "allreduce8"})
    for (bool feedback : {false, true})
      for (bool overlap : {false, true}) {
        RunOptions o = flat_terngrad(mode, feedback, overlap, 2);
        Layout l0(2, 1);
        const RunResult before = run_layout(l0, o);
        o.decay_in_exchange = true;
        Layout l1(2, 1);
        const RunResult fused = run_layout(l1, o);
        expect_same_bits(fused, before, fmt::format("{}, feedback {}, overlap {}", mode, feedback, overlap));
        o.weight_decay = 0.f;
        Layout l2(2, 1);
        const RunResult none = run_layout(l2, o);
        EXPECT_NE(none.out[0][2][0], fused.out[0][2][0]) << "the decay changes the average";
      }
  // The hierarchical scheme likewise (2 nodes x 2 ranks: fused; one node of 4: nothing ternary, all by axpy).
  for (int nodes : {2, 1})
    for (bool overlap : {false, true}) {
      RunOptions o;
      o.exchange.exchange = "hierarchical";
      o.clip_factor = 2.5f;
      o.steps = 2;
      o.exchange.overlap = overlap;
      o.exchange.bucket_mb = 2.0 / 1024;
      o.weight_decay = 5e-3f;
      Layout l0(nodes, 4 / nodes);
      const RunResult before = run_layout(l0, o);
      o.decay_in_exchange = true;
      Layout l1(nodes, 4 / nodes);
      expect_same_bits(run_layout(l1, o), before, fmt::format("hierarchical, {} nodes, overlap {}", nodes, overlap));
    }
  // The fp32 scheme leaves the decay to backward.
  Fp32Exchange f;
  GradientExchange& ex = f.ex;
  WeightDecayTerms terms;
  terms.params.resize(kParams.size());
  terms.coefficients.assign(kParams.size(), 0.f);
  EXPECT_THROW(ex.apply_weight_decay(terms), Error) << ex.scheme_name();
}

// The average left coded for the optimizer (GradientExchange::defer_decode) is the average the decode stage
// writes: allgather2 and allreduce8, with error feedback and weight decay, overlapped or not (the scheduler then
// decodes some buckets while it waits), one and two workers per rank, and a rank alone; the gradients of the
// tensors left coded are not written with the average; a bucket decoded late (decode_deferred) is, once.
TEST(TernGradScheme, AverageLeftCodedIsTheDecodedAverage) {
  for (const char* mode : {"allgather2", "allreduce8"})
    for (bool feedback : {false, true})
      for (bool overlap : {false, true})
        for (int ranks : {2, 1}) {
          const std::string what = fmt::format("{}, feedback {}, overlap {}, {} ranks", mode, feedback, overlap, ranks);
          RunOptions o = flat_terngrad(mode, feedback, overlap, overlap ? 1 : 2);
          o.decay_in_exchange = true;
          Layout l0(ranks, 1);
          const RunResult decoded = run_layout(l0, o);
          o.defer_decode = true;
          Layout l1(ranks, 1);
          const RunResult coded = run_layout(l1, o);
          expect_same_bits(coded, decoded, what);
          // The gradient itself holds the average of an fp32 tensor (conv1/biases), and without overlap (no wait in
          // which to decode early) not of a ternary one (conv2/weights; the decode stage left it coded).
          EXPECT_EQ(coded.grads[0][2][1], decoded.out[0][2][1]) << what;
          if (!overlap) {
            EXPECT_NE(coded.grads[0][2][2], decoded.out[0][2][2]) << what;
          }
          // Every bucket decoded through decode_deferred after the step: the average in the gradient itself.
          o.decode_deferred = true;
          Layout l2(ranks, 1);
          const RunResult late = run_layout(l2, o);
          expect_same_bits(late, decoded, what + ", decoded late");
          EXPECT_EQ(late.grads[0][2][2], decoded.out[0][2][2]) << what;
        }
  // The schemes that decode into the gradients refuse it, naming themselves.
  Fp32Exchange f;
  GradientExchange& ex = f.ex;
  EXPECT_THROW(ex.defer_decode(), Error) << ex.scheme_name();
  EXPECT_EQ(ex.coded_averages(), nullptr);
}

// Error feedback against its definition: r starts at 0; each step g' = g + r, the shared scaler of g' (max over
// workers), codes of g', average s * sum / N, r = g' - s * code.
TEST(ErrorFeedback, MatchesItsDefinition) {
  for (bool overlap : {false, true}) {
    const int R = 2, W = 2, N = R * W, steps = 3;
    Layout lay(R, 1);
    RunOptions o;
    o.flat = true;
    o.clip_factor = 2.5f;
    o.workers_per_rank = W;
    o.steps = steps;
    o.exchange.error_feedback = true;
    o.exchange.overlap = overlap;
    o.exchange.bucket_mb = 2.0 / 1024;
    o.exchange.seed = 77;
    const RunResult res = run_layout(lay, o);
    EXPECT_NE(res.scheme.find("error feedback"), std::string::npos) << res.scheme;
    CompressionFlags f;
    f.grad_bits = 1;
    f.clip_factor = o.clip_factor;
    f.size_to_binarize = 7;
    const CompressionPolicy pol(f, kParams);  // as run_layout's
    // The reference.
    std::vector<std::vector<std::vector<float>>> r(N);  // [worker][tensor][element]
    for (int w = 0; w < N; ++w)
      for (auto& p : kParams) r[w].emplace_back(p.numel, 0.f);
    for (int k = 0; k < steps; ++k) {
      const uint32_t step = o.first_step + k;
      for (size_t t = 0; t < kParams.size(); ++t) {
        const int64_t n = kParams[t].numel;
        std::vector<std::vector<float>> gp(N, std::vector<float>(n));
        for (int w = 0; w < N; ++w)
          for (int64_t i = 0; i < n; ++i) gp[w][i] = grad_value(w, static_cast<int>(t), i) + r[w][t][i];
        if (pol.tensors()[t].coding == GradCoding::kF32) {  // the sum in worker order in each rank, then over ranks
          for (int64_t i = 0; i < n; ++i) {
            const float a = gp[0][i] + gp[1][i], b = gp[2][i] + gp[3][i];
            ASSERT_EQ(res.out[0][k][t][i], (a + b) / N);
          }
          continue;
        }
        float s = 0;
        for (int w = 0; w < N; ++w) s = std::max(s, ternary_scaler_cpu(gp[w].data(), n, o.clip_factor));
        for (int64_t i = 0; i < n; ++i) {
          int sum = 0;
          for (int w = 0; w < N; ++w) {
            const int c = ternarize_one(gp[w][i], s, philox_key(o.exchange.seed, w), i, step, static_cast<uint32_t>(t));
            sum += c;
            r[w][t][i] = gp[w][i] - ternary_decode_value(s, c, 1);
          }
          ASSERT_EQ(res.out[0][k][t][i], ternary_decode_value(s, sum, N))
              << "overlap " << overlap << " step " << k << " " << kParams[t].name << "[" << i << "]";
          ASSERT_EQ(res.out[1][k][t][i], res.out[0][k][t][i]);
        }
      }
    }
  }
}

TEST(GradientSchemes, RegistryAndChoice) {
  std::vector<std::string> names;
  for (const SchemeInfo& s : gradient_schemes()) names.push_back(s.name);
  EXPECT_EQ(names, (std::vector<std::string>{"fp32", "fp16", "none", "powersgd", "terngrad", "hierarchical"}));
  ExchangeLayout flat{8, 8, 1}, nodes{8, 2, 4}, one_node{4, 1, 4};
  EXPECT_EQ(scheme_name_for(1, "auto", flat), "terngrad");
  EXPECT_EQ(scheme_name_for(1, "auto", nodes), "hierarchical");
  EXPECT_EQ(scheme_name_for(1, "auto", one_node), "terngrad");
  EXPECT_EQ(scheme_name_for(32, "auto", nodes), "fp32");
  EXPECT_EQ(scheme_name_for(16, "allgather2", nodes), "fp16");
  EXPECT_EQ(scheme_name_for(32, "hierarchical", nodes), "hierarchical");
  EXPECT_EQ(scheme_name_for(1, "none", nodes), "none");
  try {
    scheme_name_for(16, "hierarchical", nodes);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--grad_bits 1"), std::string::npos) << e.what();
  }
  SchemeContext ctx;
  try {
    make_gradient_scheme("topk", ctx);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown gradient scheme 'topk': the known ones are fp32, fp16, none, "
                                         "powersgd, terngrad, hierarchical"),
              std::string::npos)
        << e.what();
  }
}

// --exchange none: each rank keeps its own workers' average; nothing moves.
TEST(GradientSchemes, NoneAveragesLocallyAndMovesNothing) {
  Layout lay(2, 1);
  RunOptions o;
  o.flat = true;
  o.workers_per_rank = 2;
  o.exchange.exchange = "none";
  const RunResult res = run_layout(lay, o);
  EXPECT_EQ(res.scheme, "none");
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(res.stats[r].process_wire_bytes, 0u);
    for (size_t t = 0; t < kParams.size(); ++t)
      for (int64_t i = 0; i < kParams[t].numel; ++i)
        ASSERT_EQ(res.out[r][0][t][i],
                  (grad_value(2 * r, static_cast<int>(t), i) + grad_value(2 * r + 1, static_cast<int>(t), i)) / 2);
  }
}

// With the host check off (as on a GPU), a non-finite shared scaler gives no error in the step but raises the
// scheme's device flag, which the trainer reads before writing a checkpoint.
TEST(GradientSchemes, NonFiniteScalerRaisesTheDeviceFlag) {
  CompressionFlags f;
  f.grad_bits = 1;
  const CompressionPolicy pol(f, kParams);
  std::unique_ptr<Backend> be = make_backend("cpu");
  RankGrads g(2);
  g.fill(0);
  ExchangeOptions xo;
  xo.host_scaler_check = false;
  GradientExchange ex(*be, pol, g.views(), {0}, nullptr, xo);
  ex.run(1);
  EXPECT_FALSE(ex.take_nonfinite_flag());
  g.fill(0);
  g.data[1][2][5] = std::nanf("");
  ex.run(2);
  EXPECT_TRUE(ex.take_nonfinite_flag());
  EXPECT_FALSE(ex.take_nonfinite_flag()) << "reading clears it";
  // The summaries name the tensor whose scaler was not finite (the trainer's message before a checkpoint).
  std::vector<std::string> nonfinite;
  for (const TensorSummary& x : ex.summaries())
    if (!std::isfinite(x.value)) nonfinite.push_back(std::string(x.quantity) + " " + pol.tensors()[x.tensor].name);
  EXPECT_EQ(nonfinite, std::vector<std::string>{"scaler conv2/weights"});
  // With the host check (the CPU's default) the step itself stops, naming the tensor and the step.
  ExchangeOptions checked;
  GradientExchange ex2(*be, pol, g.views(), {0}, nullptr, checked);
  g.fill(0);
  g.data[1][2][5] = std::nanf("");
  try {
    ex2.run(9);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("conv2/weights"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("step 9"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tg

namespace tg {
namespace {

// ---- per-bucket scalers (--scaler_bucket) ----------------------------------------------------------------------
// The ternary tensors here have 150, 1203 and 957 elements: buckets of 256 give them 1, 5 and 4 scalers.
constexpr int64_t kBucket = 256;

// The same bits overlapped or not, for any bucketing of the exchange and thread count, left coded or decoded, in
// both flat modes with and without error feedback, and in the hierarchical scheme on 2 x 2.
TEST(ScalerBuckets, DeterministicAcrossOverlapBucketsThreadsAndDeferredDecode) {
  struct Variant {
    bool overlap;
    double bucket_mb;
    int threads;
    bool defer;
  };
  const Variant variants[] = {{true, 25, 1, false},
                              {true, 2.0 / 1024, 2, false},
                              {false, 25, 2, true},
                              {true, 2.0 / 1024, 1, true},
                              {true, 4.0 / (1024 * 1024), 1, false}};
  auto check = [&](RunOptions base, int nodes, int local, const std::string& what) {
    base.scaler_bucket = kBucket;
    base.exchange.overlap = false;
    base.exchange.bucket_mb = 25;
    Layout l0(nodes, local);
    const RunResult ref = run_layout(l0, base);
    EXPECT_NE(ref.scheme.find(nodes > 1 && local > 1 ? "hierarchical" : "a scaler per 256 elements"), std::string::npos)
        << ref.scheme;
    for (int r = 1; r < nodes * local; ++r)
      for (size_t t = 0; t < kParams.size(); ++t)
        ASSERT_EQ(ref.out[r][1][t], ref.out[0][1][t]) << what << " rank " << r;
    for (const Variant& v : variants) {
      RunOptions o = base;
      o.exchange.overlap = v.overlap;
      o.exchange.bucket_mb = v.bucket_mb;
      o.backend_threads = v.threads;
      o.defer_decode = v.defer;
      Layout l(nodes, local);
      expect_same_bits(run_layout(l, o), ref,
                       fmt::format("{}: overlap {} bucket_mb {} threads {} left coded {}", what, v.overlap, v.bucket_mb,
                                   v.threads, v.defer));
    }
    // Per-bucket scalers change the average (the test would pass vacuously if the flag did nothing).
    RunOptions one = base;
    one.scaler_bucket = 0;
    Layout l1(nodes, local);
    const RunResult per_tensor = run_layout(l1, one);
    EXPECT_NE(per_tensor.out[0][1][2], ref.out[0][1][2]) << what;
  };
  for (const char* mode : {"allgather2", "allreduce8"})
    for (bool feedback : {false, true}) {
      RunOptions o = flat_terngrad(mode, feedback, false, 2);
      o.clip_factor = 2.5f;
      check(o, 2, 1, fmt::format("{}, feedback {}", mode, feedback));
    }
  RunOptions h;
  h.exchange.exchange = "hierarchical";
  h.clip_factor = 2.5f;
  h.steps = 2;
  check(h, 2, 2, "hierarchical 2 x 2");
}

// One rank per node: the hierarchical scheme is the terngrad scheme bit for bit, with buckets too.
TEST(ScalerBuckets, OneRankPerNodeHierarchicalIsTernGrad) {
  RunOptions o;
  o.exchange.exchange = "hierarchical";
  o.clip_factor = 2.5f;
  o.steps = 2;
  o.scaler_bucket = kBucket;
  Layout h(3, 1), t(3, 1);
  const RunResult hier = run_layout(h, o);
  o.flat = true;
  o.exchange.exchange = "allgather2";
  expect_same_bits(hier, run_layout(t, o), "3 nodes x 1 rank, buckets of 256");
}

// E[average] = the true average: the mean of K steps' averages against it, per element within 6 standard errors of
// its bucket's ternary variance (s_k |g| - g^2 per worker, s_k the max over workers of the bucket's max|g|, c = 0),
// and the squared z-scores average about 1; the per-bucket variance is below the per-tensor one.
TEST(ScalerBuckets, Unbiased) {
  const int N = 4, K = 300;
  Layout lay(N, 1);
  RunOptions o = flat_terngrad("allgather2", false, false, 1);
  o.weight_decay = 0.f;
  o.clip_factor = 0.f;
  o.steps = K;
  o.scaler_bucket = kBucket;
  const RunResult res = run_layout(lay, o);
  double z2 = 0, var_buckets = 0, var_tensor = 0;
  int64_t count = 0;
  for (size_t t : {size_t{0}, size_t{2}, size_t{3}}) {  // the ternary tensors
    const int64_t n = kParams[t].numel;
    float tensor_s = 0;
    std::vector<float> s((n + kBucket - 1) / kBucket, 0.f);
    for (int w = 0; w < N; ++w)
      for (int64_t i = 0; i < n; ++i) {
        const float a = std::fabs(grad_value(w, static_cast<int>(t), i));
        s[i / kBucket] = std::max(s[i / kBucket], a);
        tensor_s = std::max(tensor_s, a);
      }
    for (int64_t i = 0; i < n; ++i) {
      double truth = 0, var = 0;
      for (int w = 0; w < N; ++w) {
        const double g = grad_value(w, static_cast<int>(t), i);
        truth += g / N;
        var += (s[i / kBucket] * std::fabs(g) - g * g) / (N * N);
        var_tensor += (tensor_s * std::fabs(g) - g * g) / (N * N);
      }
      var_buckets += var;
      double mean = 0;
      for (int k = 0; k < K; ++k) mean += res.out[0][k][t][i];
      mean /= K;
      const double se = std::sqrt(std::max(var, 0.0) / K);
      const double bias = s[i / kBucket] * (std::ldexp(1.0, -17) + std::ldexp(1.0, -24));
      ASSERT_LE(std::fabs(mean - truth), 6 * se + bias + 1e-9) << kParams[t].name << "[" << i << "]";
      if (se > 0) {
        z2 += (mean - truth) * (mean - truth) / (se * se);
        ++count;
      }
    }
  }
  EXPECT_NEAR(z2 / count, 1.0, 5 * std::sqrt(2.0 / count) + 0.05) << count << " elements";
  EXPECT_LT(var_buckets, var_tensor);
}

// Every bucket's scaler travels: the byte model counts 4 bytes per scaler in the scalers' all-reduce.
TEST(ScalerBuckets, ScalersAreCountedInTheByteModel) {
  for (const char* mode : {"allgather2", "allreduce8"}) {
    RunOptions o = flat_terngrad(mode, false, false, 1);
    o.steps = 1;
    Layout l0(2, 1), l1(2, 1);
    const RunResult one = run_layout(l0, o);
    o.scaler_bucket = kBucket;
    const RunResult buckets = run_layout(l1, o);
    const uint64_t extra = 4 * ((1 + 5 + 4) - 3);  // scalers beyond one per ternary tensor
    EXPECT_EQ(buckets.stats[0].payload_bytes - one.stats[0].payload_bytes, extra) << mode;
    EXPECT_EQ(buckets.stats[0].moved_bytes - one.stats[0].moved_bytes,
              Communicator::allreduce_moved_bytes(4 * 10, 2) - Communicator::allreduce_moved_bytes(4 * 3, 2));
    EXPECT_GT(buckets.stats[0].process_wire_bytes, one.stats[0].process_wire_bytes);
  }
}

}  // namespace
}  // namespace tg

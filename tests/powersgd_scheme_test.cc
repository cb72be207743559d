// The powersgd scheme (src/exchange/schemes/powersgd/) over real groups of ranks (one std::thread per rank, each
// with its own CPU backend, GradientExchange and ThreadCommunicator), on tensors of the shapes the networks have:
//   - every step against a double-precision reference written from the algorithm's definition (PyTorch's hook:
//     error feedback, the warm-started Q orthogonalized, P = sum M^T Q, P orthogonalized, Q = sum M P / N,
//     M ~ Q P^T, residual = corrected M - Q P^T; tensors that do not pay averaged as fp32), with 2 ranks of 2
//     workers, and the same bits on every rank;
//   - a gradient of rank R is carried exactly by rank R;
//   - the same bits overlapped or not and for any bucketing;
//   - its per-rank state (Q, residuals) saved after some steps and loaded into a new exchange gives the bits of
//     the uninterrupted run;
//   - the byte model; bad ranks, --grad_bits, unknown names: errors naming the flag and the accepted values.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "terngrad/backend/backend.h"
#include "terngrad/comm/thread_communicator.h"
#include "terngrad/core/error.h"
#include "terngrad/exchange/gradient_exchange.h"
#include "terngrad/exchange/scheme_registry.h"

namespace tg {
namespace {

struct Param {
  std::string name;
  Shape shape;
};
// A conv kernel (3, 3, 4, 16): a 36 x 16 matrix; an FC (40, 30); biases; a small matrix that does not pay at rank 2.
const std::vector<Param> kParams = {{"conv/weights", Shape{3, 3, 4, 16}},
                                    {"conv/biases", Shape{16}},
                                    {"fc/weights", Shape{40, 30}},
                                    {"small/weights", Shape{6, 5}},
                                    {"logits/biases", Shape{5}}};
constexpr int kRank = 2;

std::vector<ParamInfo> infos() {
  std::vector<ParamInfo> v;
  for (const Param& p : kParams) v.push_back({p.name, p.shape.numel()});
  return v;
}
CompressionPolicy fp32_policy() {
  CompressionFlags f;
  f.grad_bits = 32;
  return CompressionPolicy(f, infos());
}

// Worker w's gradient at step s: a random part plus a low-rank part shared by the workers.
float grad_value(int w, int s, int t, int64_t i, int64_t cols) {
  const uint32_t h = static_cast<uint32_t>(w * 7919 + s * 65537 + t * 104729 + i * 31);
  const float u = static_cast<float>((h * 2654435761u) >> 8) / 16777216.f - 0.5f;
  const int64_t r = i / cols, c = i % cols;
  return 0.01f * u + 0.02f * std::sin(0.3f * static_cast<float>(r + s)) * std::cos(0.7f * static_cast<float>(c + t));
}

using Grads = std::vector<std::vector<std::vector<float>>>;  // [worker][tensor][element]

struct RunOptions {
  int ranks = 2, workers_per_rank = 2, steps = 3;
  bool overlap = false;
  OverlapEngine engine = OverlapEngine::kAuto;  // kStream: the GPU's schedule, run inline on the CPU
  double bucket_mb = 25;
  int powersgd_rank = kRank;
  // Optional: a gradient of its own (worker, step, tensor, element) instead of grad_value.
  std::function<float(int, int, int, int64_t)> grad;
  // Per-rank state: loaded before the first step (when not empty), saved after the last.
  std::vector<std::vector<float>>* load_state = nullptr;
  std::vector<std::vector<float>>* save_state = nullptr;
  int first_step = 0;
};

// Every rank's first worker's averaged gradient after each step: [rank][step][tensor][element]. Also the
// initial Q's of rank 0 ([tensor] in state order) and its byte model.
struct RunResult {
  std::vector<std::vector<std::vector<std::vector<float>>>> out;
  std::vector<std::vector<float>> initial_state;  // rank 0, every state entry, before the first step
  std::vector<std::string> state_names;
  ExchangeStats stats;
  std::string describe;
};

std::vector<float> read(Backend& be, const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  be.copy(Tensor(v.data(), t.shape(), DType::kF32, Device::cpu()), t);
  return v;
}

RunResult run(const RunOptions& o) {
  const CompressionPolicy pol = fp32_policy();
  auto world = make_thread_communicators(o.ranks);
  RunResult res;
  res.out.resize(o.ranks);
  std::vector<std::string> errors(o.ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < o.ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        std::unique_ptr<Backend> be = make_backend("cpu", BackendOptions{1});
        be->bind_thread();
        Grads g(o.workers_per_rank);
        std::vector<std::vector<Tensor>> views(o.workers_per_rank);
        for (int l = 0; l < o.workers_per_rank; ++l)
          for (const Param& p : kParams) {
            g[l].emplace_back(p.shape.numel());
            views[l].emplace_back(g[l].back().data(), p.shape, DType::kF32, Device::cpu());
          }
        ExchangeOptions xo;
        xo.exchange = "powersgd";
        xo.overlap = o.overlap;
        xo.overlap_engine = o.engine;
        xo.bucket_mb = o.bucket_mb;
        xo.powersgd_rank = o.powersgd_rank;
        xo.seed = 11;
        GradientExchange ex(*be, pol, views, {0}, world[r].get(), xo);
        Slab& state = *ex.scheme().rank_state();
        if (r == 0) {
          res.describe = ex.scheme().describe();
          for (int i = 0; i < state.size(); ++i) {
            res.initial_state.push_back(read(*be, state.view(i)));
            res.state_names.push_back(state.entry(i).name);
          }
        }
        if (o.load_state && !o.load_state->empty())
          for (int i = 0; i < state.size(); ++i)
            be->copy(state.view(i), Tensor((*o.load_state)[r * state.size() + i].data(), state.entry(i).shape,
                                           DType::kF32, Device::cpu()));
        for (int s = o.first_step; s < o.first_step + o.steps; ++s) {
          for (int l = 0; l < o.workers_per_rank; ++l)
            for (size_t t = 0; t < kParams.size(); ++t) {
              const Shape& sh = kParams[t].shape;
              const int w = r * o.workers_per_rank + l;
              for (int64_t i = 0; i < sh.numel(); ++i)
                g[l][t][i] = o.grad ? o.grad(w, s, static_cast<int>(t), i)
                                    : grad_value(w, s, static_cast<int>(t), i, sh[sh.rank() - 1]);
            }
          ex.begin(static_cast<uint32_t>(s));
          for (int first = pol.num_tensors(); first >= 0; --first) {
            ex.tensors_ready(first);
            ex.progress();
          }
          const ExchangeStats st = ex.finish();
          if (r == 0) res.stats = st;
          res.out[r].push_back(g[0]);
        }
        if (o.save_state) {
          if (r == 0) o.save_state->assign(static_cast<size_t>(o.ranks * state.size()), {});
          world[r]->barrier();
          for (int i = 0; i < state.size(); ++i) (*o.save_state)[r * state.size() + i] = read(*be, state.view(i));
        }
      } catch (const std::exception& e) {
        errors[r] = e.what();
        world[r]->abort(e.what());
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < o.ranks; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  return res;
}

// ---- the reference: the algorithm in double, from its definition --------------------------------------------
using Mat = std::vector<double>;  // row-major

void orthogonalize(Mat& p, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < cols; ++i) {
    double n2 = 0;
    for (int64_t r = 0; r < rows; ++r) n2 += p[r * cols + i] * p[r * cols + i];
    const double n = std::sqrt(n2);
    for (int64_t r = 0; r < rows; ++r) p[r * cols + i] = n > 0 ? p[r * cols + i] / n : 0;
    for (int64_t j = i + 1; j < cols; ++j) {
      double d = 0;
      for (int64_t r = 0; r < rows; ++r) d += p[r * cols + i] * p[r * cols + j];
      for (int64_t r = 0; r < rows; ++r) p[r * cols + j] -= d * p[r * cols + i];
    }
  }
}

// [step][tensor][element]: the average every worker receives.
std::vector<std::vector<Mat>> reference(const RunOptions& o, const RunResult& first_run) {
  const int N = o.ranks * o.workers_per_rank;
  std::vector<Mat> q;                                                    // per tensor (m x R), empty: not compressed
  std::vector<std::vector<Mat>> e(N, std::vector<Mat>(kParams.size()));  // residuals
  for (size_t t = 0; t < kParams.size(); ++t) {
    const std::string name = "powersgd/q/" + kParams[t].name;
    q.emplace_back();
    for (size_t i = 0; i < first_run.state_names.size(); ++i)
      if (first_run.state_names[i] == name)
        q.back().assign(first_run.initial_state[i].begin(), first_run.initial_state[i].end());
    for (int w = 0; w < N; ++w) e[w][t].assign(kParams[t].shape.numel(), 0.0);
  }
  std::vector<std::vector<Mat>> out;
  for (int s = 0; s < o.steps; ++s) {
    out.emplace_back();
    for (size_t t = 0; t < kParams.size(); ++t) {
      const Shape& sh = kParams[t].shape;
      const int64_t n = sh[sh.rank() - 1], m = sh.numel() / n;
      std::vector<Mat> M(N, Mat(sh.numel()));
      for (int w = 0; w < N; ++w)
        for (int64_t i = 0; i < sh.numel(); ++i) M[w][i] = grad_value(w, s, static_cast<int>(t), i, n);
      Mat avg(sh.numel(), 0.0);
      if (q[t].empty()) {
        for (int w = 0; w < N; ++w)
          for (int64_t i = 0; i < sh.numel(); ++i) avg[i] += M[w][i] / N;
        out.back().push_back(avg);
        continue;
      }
      const int64_t R = static_cast<int64_t>(q[t].size()) / m;
      for (int w = 0; w < N; ++w)
        for (int64_t i = 0; i < sh.numel(); ++i) M[w][i] += e[w][t][i];
      orthogonalize(q[t], m, R);
      Mat p(n * R, 0.0);
      for (int w = 0; w < N; ++w)
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j)
            for (int64_t c = 0; c < R; ++c) p[j * R + c] += M[w][i * n + j] * q[t][i * R + c];
      orthogonalize(p, n, R);
      Mat qn(m * R, 0.0);
      for (int w = 0; w < N; ++w)
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j)
            for (int64_t c = 0; c < R; ++c) qn[i * R + c] += M[w][i * n + j] * p[j * R + c] / N;
      q[t] = qn;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j)
          for (int64_t c = 0; c < R; ++c) avg[i * n + j] += qn[i * R + c] * p[j * R + c];
      for (int w = 0; w < N; ++w)
        for (int64_t i = 0; i < sh.numel(); ++i) e[w][t][i] = M[w][i] - avg[i];
      out.back().push_back(avg);
    }
  }
  return out;
}

void expect_same_bits(const RunResult& a, const RunResult& b, const std::string& what) {
  ASSERT_EQ(a.out.size(), b.out.size()) << what;
  for (size_t r = 0; r < a.out.size(); ++r) {
    ASSERT_EQ(a.out[r].size(), b.out[r].size()) << what;
    for (size_t s = 0; s < a.out[r].size(); ++s)
      for (size_t t = 0; t < kParams.size(); ++t)
        for (size_t i = 0; i < a.out[r][s][t].size(); ++i)
          ASSERT_EQ(a.out[r][s][t][i], b.out[r][s][t][i])
              << what << ": rank " << r << " step " << s << " " << kParams[t].name << "[" << i << "]";
  }
}

TEST(PowerSgdScheme, MatchesItsDefinitionOnEveryRank) {
  RunOptions o;
  const RunResult got = run(o);
  // Which tensors are compressed: conv (36 x 16) and fc (40 x 30) at rank 2; small (6 x 5) and the biases not.
  ASSERT_EQ(got.state_names.size(), 2u + 2u * 2u) << "2 Q's and a residual per local worker of each";
  EXPECT_EQ(got.state_names[0], "powersgd/q/conv/weights");
  EXPECT_EQ(got.state_names[1], "powersgd/q/fc/weights");
  EXPECT_EQ(got.state_names[2], "powersgd/w0/error/conv/weights");
  const std::vector<std::vector<Mat>> want = reference(o, got);
  for (int s = 0; s < o.steps; ++s)
    for (size_t t = 0; t < kParams.size(); ++t) {
      double scale = 0, worst = 0;
      for (double v : want[s][t]) scale = std::max(scale, std::abs(v));
      for (size_t i = 0; i < want[s][t].size(); ++i)
        worst = std::max(worst, std::abs(got.out[0][s][t][i] - want[s][t][i]));
      EXPECT_LE(worst, 1e-4 * scale) << "step " << s << " " << kParams[t].name << " (largest |value| " << scale << ")";
      EXPECT_GT(scale, 0) << kParams[t].name;
    }
  for (int r = 1; r < o.ranks; ++r)
    for (int s = 0; s < o.steps; ++s) EXPECT_EQ(got.out[r][s], got.out[0][s]) << "rank " << r << " step " << s;
  // The initial Q's (both: 152 numbers) are standard normal numbers from the seed: their mean and variance within
  // four standard errors of 0 and 1.
  double sum = 0, sum2 = 0, n = 0;
  for (int i = 0; i < 2; ++i)
    for (float v : got.initial_state[i]) sum += v, sum2 += static_cast<double>(v) * v, ++n;
  EXPECT_NEAR(sum / n, 0.0, 4 / std::sqrt(n));
  EXPECT_NEAR(sum2 / n, 1.0, 4 * std::sqrt(2 / n));
}

TEST(PowerSgdScheme, AGradientOfRankRIsCarriedExactly) {
  RunOptions o;
  o.steps = 1;
  // Every worker's gradient is the same rank-2 matrix: u1 v1^T + u2 v2^T.
  o.grad = [](int, int, int t, int64_t i) {
    const Shape& sh = kParams[t].shape;
    const int64_t n = sh[sh.rank() - 1], r = i / n, c = i % n;
    return static_cast<float>(std::sin(0.5 * r + t) * std::cos(0.2 * c) +
                              0.5 * std::cos(0.9 * r) * std::sin(0.4 * c + 1));
  };
  const RunResult got = run(o);
  for (size_t t = 0; t < kParams.size(); ++t) {
    const Shape& sh = kParams[t].shape;
    for (int64_t i = 0; i < sh.numel(); ++i)
      ASSERT_NEAR(got.out[0][0][t][i], o.grad(0, 0, static_cast<int>(t), i), 2e-5)
          << kParams[t].name << "[" << i << "]";
  }
}

TEST(PowerSgdScheme, SameBitsOverlappedOrNotAndForAnyBucketing) {
  RunOptions o;
  const RunResult plain = run(o);
  o.overlap = true;
  o.bucket_mb = 0.002;  // a few KiB: several buckets
  const RunResult overlapped = run(o);
  expect_same_bits(plain, overlapped, "overlap, small buckets");
  o.bucket_mb = 0.004;
  expect_same_bits(plain, run(o), "overlap, other buckets");
  o.engine = OverlapEngine::kStream;  // the GPU's schedule: each complete bucket's stages at once
  expect_same_bits(plain, run(o), "overlap on the stream schedule");
}

TEST(PowerSgdScheme, PerRankStateResumesBitForBit) {
  RunOptions whole;
  whole.steps = 4;
  const RunResult a = run(whole);
  std::vector<std::vector<float>> state;
  RunOptions first = whole;
  first.steps = 2;
  first.save_state = &state;
  run(first);
  RunOptions second = whole;
  second.steps = 2;
  second.first_step = 2;
  second.load_state = &state;
  const RunResult b = run(second);
  for (int r = 0; r < whole.ranks; ++r)
    for (int s = 0; s < 2; ++s) EXPECT_EQ(b.out[r][s], a.out[r][s + 2]) << "rank " << r << " step " << s + 2;
  // Without it (Q from the seed again, residuals zero) the steps differ: it is state, not noise.
  RunOptions fresh = second;
  fresh.load_state = nullptr;
  EXPECT_NE(run(fresh).out[0][0], a.out[0][2]);
}

TEST(PowerSgdScheme, ByteModel) {
  RunOptions o;
  o.steps = 1;
  const RunResult got = run(o);
  // conv: P 16x2 + Q 36x2; fc: P 30x2 + Q 40x2; fp32: 16 + 30 + 5 elements.
  const uint64_t p_floats = 16 * 2 + 30 * 2 + 16 + 30 + 5, q_floats = 36 * 2 + 40 * 2;
  EXPECT_EQ(got.stats.payload_bytes, 4 * (p_floats + q_floats));
  EXPECT_EQ(got.stats.moved_bytes, Communicator::allreduce_moved_bytes(4 * p_floats, 4) +
                                       Communicator::allreduce_moved_bytes(4 * q_floats, 4));
  EXPECT_EQ(got.stats.fp32_payload_bytes, 4u * (576 + 16 + 1200 + 30 + 5));
  EXPECT_NE(got.describe.find("powersgd (rank 2, 2 of 5 tensors low-rank"), std::string::npos) << got.describe;
}

TEST(PowerSgdScheme, BadRanksAndBitsNameTheFlagAndTheAcceptedValues) {
  const CompressionPolicy pol = fp32_policy();
  std::unique_ptr<Backend> be = make_backend("cpu");
  Grads g(1);
  std::vector<std::vector<Tensor>> views(1);
  for (const Param& p : kParams) {
    g[0].emplace_back(p.shape.numel());
    views[0].emplace_back(g[0].back().data(), p.shape, DType::kF32, Device::cpu());
  }
  auto error_of = [&](int rank) {
    ExchangeOptions xo;
    xo.exchange = "powersgd";
    xo.powersgd_rank = rank;
    try {
      GradientExchange ex(*be, pol, views, {0}, nullptr, xo);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of(0).find("--powersgd_rank 0 must be at least 1"), std::string::npos) << error_of(0);
  // fc (40 x 30) pays up to rank 8: 70 x 8 x 2 = 1120 < 1200; at 9, 1260 does not.
  EXPECT_EQ(error_of(8), "");
  EXPECT_NE(error_of(9).find("--powersgd_rank 9 compresses no tensor"), std::string::npos) << error_of(9);
  EXPECT_NE(error_of(9).find("the accepted values are 1 to 8"), std::string::npos) << error_of(9);
  try {
    scheme_name_for(1, "powersgd", ExchangeLayout{});
    FAIL() << "--grad_bits 1 with powersgd accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("it takes --grad_bits 32, not 1"), std::string::npos) << e.what();
  }
  EXPECT_EQ(scheme_name_for(32, "powersgd", ExchangeLayout{}), "powersgd");
  EXPECT_TRUE(exchange_compresses(32, "powersgd"));
  EXPECT_EQ(fp32_form("powersgd"), "auto");
  try {
    check_exchange_value("powersdg");
    FAIL() << "a misspelt --exchange accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("powersgd"), std::string::npos) << "the accepted values listed: " << e.what();
  }
}

}  // namespace
}  // namespace tg

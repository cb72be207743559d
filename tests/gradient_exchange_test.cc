// Tests of GradientExchange inside one process (L local workers): the average every target receives equals a
// plain reference built from the per-element ternary definition (exact: the same codes), for both exchange
// modes, fp16/fp32 remainders, several targets, any bucketing; byte model; non-finite scalers; the
// communication thread's FIFO. Across processes (MPI, overlap): tests/mpi_communicator_test.cc.
#include "terngrad/exchange/gradient_exchange.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <random>
#include <thread>

#include "terngrad/backend/backend.h"
#include "terngrad/backend/ternary_codec.h"
#include "terngrad/comm/communication_thread.h"
#include "terngrad/core/error.h"
#include "terngrad/core/philox.h"
#include "terngrad/core/timeline.h"
#include "terngrad/math/ternary_math.h"

namespace tg {
namespace {

// The CPU backend the exchanges run their codec ops on (the gradients are host tensors).
Backend& cpu_backend() {
  static std::unique_ptr<Backend> be = make_backend("cpu");
  return *be;
}

TEST(ExchangeMode, ParseAndResolve) {
  EXPECT_EQ(parse_enum<ExchangeMode>("auto"), ExchangeMode::kAuto);
  EXPECT_EQ(parse_enum<ExchangeMode>("allgather2"), ExchangeMode::kAllgather2);
  EXPECT_EQ(parse_enum<ExchangeMode>("allreduce8"), ExchangeMode::kAllreduce8);
  try {
    parse_enum<ExchangeMode>("ring");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--exchange"), std::string::npos);
  }
  EXPECT_EQ(resolve_exchange_mode(ExchangeMode::kAuto, 7), ExchangeMode::kAllgather2);
  EXPECT_EQ(resolve_exchange_mode(ExchangeMode::kAuto, 8), ExchangeMode::kAllreduce8);
  EXPECT_EQ(resolve_exchange_mode(ExchangeMode::kAllgather2, 64), ExchangeMode::kAllgather2);
}

// N workers' gradients for a small "network": conv weights, a bias, and the logits pair.
struct Workload {
  std::vector<ParamInfo> params = {
      {"conv1/weights", 151}, {"conv1/biases", 6}, {"fc/weights", 402}, {"logits/weights", 30}, {"logits/biases", 3}};
  std::vector<std::vector<std::vector<float>>> grads;  // [worker][tensor][element]
  explicit Workload(int n) {
    grads.resize(n);
    for (int w = 0; w < n; ++w) {
      std::mt19937 rng(1000 + w);
      std::normal_distribution<float> d(0.f, 0.01f);
      for (auto& p : params) {
        std::vector<float> g(p.numel);
        for (auto& x : g) x = d(rng);
        grads[w].push_back(std::move(g));
      }
    }
  }
  std::vector<Tensor> views(int w) {
    std::vector<Tensor> v;
    for (auto& g : grads[w])
      v.emplace_back(g.data(), Shape{static_cast<int64_t>(g.size())}, DType::kF32, Device::cpu());
    return v;
  }
  std::vector<std::vector<Tensor>> all_views() {
    std::vector<std::vector<Tensor>> v;
    for (size_t w = 0; w < grads.size(); ++w) v.push_back(views(static_cast<int>(w)));
    return v;
  }
};

// Reference: shared s = max over workers of the local scalers; every worker's codes from the per-element
// definition; average s * sum / N for ternary tensors, worker-order float sum / N for fp32 ones, the fp32 sum
// of fp16-rounded values rounded to fp16 once for fp16 ones.
std::vector<std::vector<float>> reference_exchange(const Workload& wl, const CompressionPolicy& pol, uint64_t seed,
                                                   uint32_t step) {
  const int N = static_cast<int>(wl.grads.size());
  std::vector<std::vector<float>> out;
  for (int t = 0; t < pol.num_tensors(); ++t) {
    const TensorCodingPlan& plan = pol.tensors()[t];
    std::vector<float> avg(plan.numel);
    if (plan.coding == GradCoding::kTernary) {
      float s = 0.f;
      for (int w = 0; w < N; ++w)
        s = std::max(s, ternary_scaler_cpu(wl.grads[w][t].data(), plan.numel, pol.flags().clip_factor));
      for (int64_t i = 0; i < plan.numel; ++i) {
        int sum = 0;
        for (int w = 0; w < N; ++w) sum += ternarize_one(wl.grads[w][t][i], s, philox_key(seed, w), i, step, t);
        avg[i] = ternary_decode_value(s, sum, N);
      }
    } else if (plan.coding == GradCoding::kF16) {
      for (int64_t i = 0; i < plan.numel; ++i) {
        float sum = 0.f;
        for (int w = 0; w < N; ++w) sum += half_to_float(float_to_half(wl.grads[w][t][i]));
        avg[i] = half_to_float(float_to_half(sum)) / N;
      }
    } else {
      for (int64_t i = 0; i < plan.numel; ++i) {
        float sum = 0.f;
        for (int w = 0; w < N; ++w) sum += wl.grads[w][t][i];
        avg[i] = N == 1 ? wl.grads[0][t][i] : sum / static_cast<float>(N);
      }
    }
    out.push_back(std::move(avg));
  }
  return out;
}

CompressionPolicy ternary_policy(const Workload& wl) {
  CompressionFlags f;
  f.grad_bits = 1;
  f.clip_factor = 2.5f;
  f.size_to_binarize = 7;  // conv1/biases (6) stays fp32
  f.quantize_logits = false;
  return CompressionPolicy(f, wl.params);
}

void expect_targets_equal(Workload& wl, const std::vector<int>& targets, const std::vector<std::vector<float>>& ref) {
  for (int w : targets)
    for (size_t t = 0; t < ref.size(); ++t)
      for (size_t i = 0; i < ref[t].size(); ++i)
        ASSERT_EQ(wl.grads[w][t][i], ref[t][i]) << "worker " << w << " tensor " << t << " element " << i;
}

void check_exchange(int N, ExchangeMode mode) {
  Workload wl(N);
  const CompressionPolicy pol = ternary_policy(wl);
  ASSERT_EQ(pol.num_ternary(), 2);
  const uint64_t seed = 4242;
  const uint32_t step = 17;
  const auto expected = reference_exchange(wl, pol, seed, step);
  ExchangeOptions o;
  o.exchange = enum_name(mode);
  o.seed = seed;
  GradientExchange ex(cpu_backend(), pol, wl.all_views(), {0}, nullptr, o);
  EXPECT_EQ(ex.num_workers(), N);
  EXPECT_FALSE(ex.overlapped());  // one process: nothing travels, nothing to overlap
  const ExchangeStats st = ex.run(step);
  expect_targets_equal(wl, {0}, expected);
  // Bytes per worker (byte model over N ranks): scalers (2 floats) all-reduced, codes gathered or summed as
  // int8, fp32 remainder all-reduced.
  const uint64_t packed = pol.packed_bytes(), f32 = 4 * pol.f32_elements();
  const bool gather = resolve_exchange_mode(mode, N) == ExchangeMode::kAllgather2;
  EXPECT_EQ(st.payload_bytes, 8 + f32 + (gather ? packed : 4 * packed));
  EXPECT_EQ(st.moved_bytes, Communicator::allreduce_moved_bytes(8, N) + Communicator::allreduce_moved_bytes(f32, N) +
                                (gather ? Communicator::allgather_moved_bytes(packed, N)
                                        : Communicator::allreduce_moved_bytes(4 * packed, N)));
  EXPECT_EQ(st.fp32_payload_bytes, 4u * pol.total_elements());
  EXPECT_EQ(st.process_wire_bytes, 0u);
  EXPECT_LT(st.payload_bytes * 2, st.fp32_payload_bytes);  // ternary is the point
}

TEST(GradientExchange, Allgather2MatchesReference) { check_exchange(4, ExchangeMode::kAllgather2); }
TEST(GradientExchange, Allreduce8MatchesReference) { check_exchange(4, ExchangeMode::kAllreduce8); }
TEST(GradientExchange, AutoWithEightWorkersUsesAllreduce8) { check_exchange(8, ExchangeMode::kAuto); }
TEST(GradientExchange, SingleWorker) { check_exchange(1, ExchangeMode::kAuto); }

TEST(GradientExchange, EveryTargetGetsTheAverageAndStepsRepeat) {
  const int N = 3;
  Workload wl(N);
  const Workload fresh(N);
  const CompressionPolicy pol = ternary_policy(wl);
  ExchangeOptions o;
  o.seed = 7;
  GradientExchange ex(cpu_backend(), pol, wl.all_views(), {0, 2}, nullptr, o);
  for (uint32_t step = 0; step < 3; ++step) {  // the buffers are reused: every step must start clean
    for (int w = 0; w < N; ++w)                // new gradients in the same memory (the exchange holds views of it)
      for (size_t t = 0; t < wl.grads[w].size(); ++t)
        std::copy(fresh.grads[w][t].begin(), fresh.grads[w][t].end(), wl.grads[w][t].begin());
    const auto expected = reference_exchange(wl, pol, 7, step);
    ex.run(step);
    expect_targets_equal(wl, {0, 2}, expected);
    EXPECT_EQ(wl.grads[1], fresh.grads[1]) << "a worker that is not a target keeps its gradient";
  }
}

TEST(GradientExchange, Fp16AndFp32) {
  const int N = 3;
  Workload wl(N);
  CompressionFlags f;
  f.grad_bits = 16;
  const CompressionPolicy pol(f, wl.params);
  const auto expected = reference_exchange(wl, pol, 1, 0);
  GradientExchange ex(cpu_backend(), pol, wl.all_views(), {0}, nullptr, ExchangeOptions{});
  ex.run(0);
  expect_targets_equal(wl, {0}, expected);
}

// The tensors reported ready during backward start the exchange early; the result is the same bits.
TEST(GradientExchange, ReadinessReportedLayerByLayerGivesTheSameBits) {
  const int N = 2;
  Workload wl(N);
  const CompressionPolicy pol = ternary_policy(wl);
  const auto expected = reference_exchange(wl, pol, 5, 3);
  ExchangeOptions o;
  o.seed = 5;
  GradientExchange ex(cpu_backend(), pol, wl.all_views(), {0}, nullptr, o);
  ex.begin(3);
  for (int first = pol.num_tensors(); first >= 0; --first) {
    ex.tensors_ready(first);
    ex.progress();
  }
  ex.finish();
  expect_targets_equal(wl, {0}, expected);
}

TEST(GradientExchange, NonFiniteGradientNamesTensorAndStep) {
  const int N = 3;
  Workload wl(N);
  CompressionFlags f;
  f.grad_bits = 1;
  const CompressionPolicy pol(f, wl.params);
  wl.grads[1][2][5] = std::numeric_limits<float>::quiet_NaN();  // fc/weights on worker 1
  GradientExchange ex(cpu_backend(), pol, wl.all_views(), {0}, nullptr, ExchangeOptions{});
  try {
    ex.run(23);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fc/weights"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("step 23"), std::string::npos) << e.what();
  }
}

TEST(GradientExchange, BadArgumentsAreErrors) {
  Workload wl(2);
  const CompressionPolicy pol = ternary_policy(wl);
  ExchangeOptions o;
  o.bucket_mb = 0;
  EXPECT_THROW(GradientExchange(cpu_backend(), pol, wl.all_views(), {0}, nullptr, o), Error);
  EXPECT_THROW(GradientExchange(cpu_backend(), pol, wl.all_views(), {2}, nullptr, ExchangeOptions{}), Error);
  auto short_views = wl.all_views();
  short_views[1].pop_back();
  EXPECT_THROW(GradientExchange(cpu_backend(), pol, short_views, {0}, nullptr, ExchangeOptions{}), Error);
  GradientExchange ex(cpu_backend(), pol, wl.all_views(), {0}, nullptr, ExchangeOptions{});
  EXPECT_THROW(ex.finish(), Error);  // no step begun
  ex.begin(0);
  EXPECT_THROW(ex.begin(1), Error);  // still in step 0
}

// Buckets: contiguous tensor ranges in backward order (the last tensors first), covering every tensor once,
// closed once they hold bucket_mb of fp32 gradient.
TEST(CompressionPolicy, RangeLayoutsTileTheFusedBuffers) {
  Workload wl(1);
  const CompressionPolicy pol = ternary_policy(wl);
  int64_t packed = 0, f32 = 0, elements = 0;
  int scalers = 0;
  for (int i = pol.num_tensors() - 1; i >= 0; --i) {  // one tensor per range, backward order
    const RangeLayout l = pol.layout({i, i + 1});
    packed += l.packed_bytes();
    f32 += l.f32_elements();
    elements += l.elements;
    scalers += l.num_scalers();
    const TensorCodingPlan& t = pol.tensors()[i];
    if (t.coding == GradCoding::kTernary) {
      EXPECT_EQ(l.packed_begin, t.offset);
      EXPECT_EQ(l.scaler_begin, t.scaler_index);
    } else {
      EXPECT_EQ(l.f32_begin, t.offset);
    }
  }
  EXPECT_EQ(packed, pol.packed_bytes());
  EXPECT_EQ(f32, pol.f32_elements());
  EXPECT_EQ(elements, pol.total_elements());
  EXPECT_EQ(scalers, pol.num_ternary());
  const RangeLayout whole = pol.layout(pol.all());
  EXPECT_EQ(whole.packed_begin, 0);
  EXPECT_EQ(whole.packed_end, pol.packed_bytes());
  EXPECT_THROW(pol.layout({2, 1}), Error);
  EXPECT_THROW(pol.layout({0, pol.num_tensors() + 1}), Error);
}

TEST(CommunicationThread, RunsJobsInOrderAndRethrowsErrors) {
  CommunicationThread thread(4);
  struct Log {
    std::vector<int64_t> order;
    std::atomic<bool> first_may_end{false};  // job 0 runs until then: 4 jobs in flight at any speed
  } log;
  auto append = [](void* ctx, int64_t arg) {
    Log& l = *static_cast<Log*>(ctx);
    while (arg == 0 && !l.first_may_end) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    l.order.push_back(arg);
  };
  uint64_t last = 0;
  for (int64_t k = 0; k < 4; ++k) last = thread.post({append, &log, k});
  EXPECT_THROW(thread.post({append, &log, 9}), Error);  // capacity 4 in flight
  log.first_may_end = true;
  thread.wait(last);
  EXPECT_TRUE(thread.done(last));
  EXPECT_EQ(log.order, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_LE(thread.begin_time(last), thread.end_time(last));
  // A job's CPU time is the thread's, not the wall clock's: 60 ms asleep costs next to nothing, 30 ms of work
  // costs (on a loaded machine, at least half of) 30 ms.
  auto sleeper = [](void*, int64_t) { std::this_thread::sleep_for(std::chrono::milliseconds(60)); };
  auto worker = [](void* ctx, int64_t) {
    const double until = thread_cpu_seconds() + 0.03;
    volatile double x = 0;
    while (thread_cpu_seconds() < until) x = x + 1;
    *static_cast<double*>(ctx) = x;
  };
  double sink = 0;
  const uint64_t slept = thread.post({sleeper, nullptr, 0}), worked = thread.post({worker, &sink, 0});
  thread.wait(worked);
  EXPECT_LT(thread.cpu_seconds(slept), 0.02);
  EXPECT_GE(std::chrono::duration<double>(thread.end_time(slept) - thread.begin_time(slept)).count(), 0.06);
  EXPECT_GE(thread.cpu_seconds(worked), 0.03);
  EXPECT_LT(thread.cpu_seconds(worked), 1.0);
  // A failing job: its error reaches the waiter, the jobs queued behind it are skipped, later posts rethrow.
  std::atomic<bool> gate{false};
  auto blocked = [](void* ctx, int64_t) {
    while (!static_cast<std::atomic<bool>*>(ctx)->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };
  auto fail = [](void*, int64_t) { throw Error("peer went away"); };
  thread.post({blocked, &gate, 0});
  const uint64_t bad = thread.post({fail, nullptr, 0});
  const uint64_t after = thread.post({append, &log, 5});
  gate = true;
  try {
    thread.wait(after);
    FAIL() << "expected the job's error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("peer went away"), std::string::npos);
  }
  EXPECT_THROW(thread.done(bad), Error);
  EXPECT_THROW(thread.post({append, &log, 6}), Error);
  EXPECT_EQ(log.order.size(), 4u) << "jobs after a failure are skipped";
}

}  // namespace
}  // namespace tg

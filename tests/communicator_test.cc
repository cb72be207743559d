// Tests of the in-process communicator (4 participant threads): all-reduce sum/max over every supported
// dtype, all-gather, broadcast, byte counters, argument mismatch and abort without deadlock; and of
// GradientExchange over N local workers against a plain reference built from the per-element ternary
// definition (exact: both use the same codes).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "terngrad/comm/gradient_exchange.h"
#include "terngrad/comm/local_communicator.h"
#include "terngrad/compress/ternary_codec.h"
#include "terngrad/core/error.h"
#include "terngrad/math/ternary_math.h"

namespace tg {
namespace {

TEST(LocalCommunicator, AllreduceSumAndMaxEveryDtype) {
  const int N = 4;
  const int64_t n = 1003;  // not divisible by N: uneven slices
  LocalGroup group(N);
  std::vector<std::vector<float>> f32_sum(N), f32_max(N);
  std::vector<std::vector<int8_t>> i8(N);
  std::vector<std::vector<int32_t>> i32(N);
  std::vector<std::vector<half_bits>> f16(N);
  auto value = [](int r, int64_t i) { return static_cast<float>((r + 1) * 0.25 + std::sin(0.1 * i + r)); };
  group.run_all([&](LocalCommunicator& c) {
    const int r = c.rank();
    f32_sum[r].resize(n);
    f32_max[r].resize(n);
    i8[r].resize(n);
    i32[r].resize(n);
    f16[r].resize(n);
    for (int64_t i = 0; i < n; ++i) {
      f32_sum[r][i] = f32_max[r][i] = value(r, i);
      i8[r][i] = static_cast<int8_t>((i + r) % 3 - 1);
      i32[r][i] = static_cast<int32_t>(i * (r - 2));
      f16[r][i] = float_to_half(value(r, i));
    }
    c.allreduce(f32_sum[r].data(), n, DType::F32, ReduceOp::Sum);
    c.allreduce(f32_max[r].data(), n, DType::F32, ReduceOp::Max);
    c.allreduce(i8[r].data(), n, DType::I8, ReduceOp::Sum);
    c.allreduce(i32[r].data(), n, DType::I32, ReduceOp::Max);
    c.allreduce(f16[r].data(), n, DType::F16, ReduceOp::Sum);
  });
  for (int64_t i = 0; i < n; ++i) {
    float sum = 0.f, mx = -1e30f, h = 0.f;
    int s8 = 0, m32 = std::numeric_limits<int>::min();
    for (int r = 0; r < N; ++r) {
      sum += value(r, i);  // rank order: the documented summation order
      mx = std::max(mx, value(r, i));
      s8 += (i + r) % 3 - 1;
      m32 = std::max<int>(m32, static_cast<int>(i * (r - 2)));
      h += half_to_float(float_to_half(value(r, i)));
    }
    for (int r = 0; r < N; ++r) {
      ASSERT_EQ(f32_sum[r][i], sum) << "rank " << r << " element " << i;
      ASSERT_EQ(f32_max[r][i], mx);
      ASSERT_EQ(i8[r][i], s8);
      ASSERT_EQ(i32[r][i], m32);
      ASSERT_EQ(f16[r][i].bits, float_to_half(h).bits);
    }
  }
}

TEST(LocalCommunicator, AllgatherBroadcastAndByteCounters) {
  const int N = 4;
  LocalGroup group(N);
  std::vector<std::vector<uint8_t>> recv(N, std::vector<uint8_t>(N * 10));
  std::vector<std::vector<int32_t>> bc(N);
  group.run_all([&](LocalCommunicator& c) {
    const int r = c.rank();
    std::vector<uint8_t> send(10);
    for (int k = 0; k < 10; ++k) send[k] = static_cast<uint8_t>(16 * r + k);
    c.allgather(send.data(), recv[r].data(), 10);
    std::fill(send.begin(), send.end(), 0xEE);  // reusing the send buffer after return must be safe
    bc[r] = {r, r * 10, r * 100};
    c.broadcast(bc[r].data(), 3 * sizeof(int32_t), 2);
    c.barrier();
    std::vector<float> x(1003, 1.f);
    c.allreduce(x.data(), 1003, DType::F32, ReduceOp::Sum);
    const CommStats& st = c.stats();
    EXPECT_EQ(st.calls, 4u);
    EXPECT_EQ(st.payload_bytes, 10u + 12u + 4012u);
    // allgather (N-1)*n = 30, broadcast n = 12, ring all-reduce 2(N-1)/N*n = 6018
    EXPECT_EQ(st.moved_bytes, 30u + 12u + 6018u);
  });
  for (int r = 0; r < N; ++r) {
    for (int w = 0; w < N; ++w)
      for (int k = 0; k < 10; ++k) ASSERT_EQ(recv[r][w * 10 + k], 16 * w + k);
    EXPECT_EQ(bc[r], (std::vector<int32_t>{2, 20, 200}));
  }
  EXPECT_EQ(Communicator::allreduce_moved_bytes(1000, 1), 0u);
  EXPECT_EQ(Communicator::allgather_moved_bytes(1000, 8), 7000u);
}

TEST(LocalCommunicator, MismatchedCallsFailOnEveryRank) {
  LocalGroup group(3);
  try {
    group.run_all([&](LocalCommunicator& c) {
      std::vector<float> x(c.rank() == 1 ? 5 : 4, 0.f);
      c.allreduce(x.data(), static_cast<int64_t>(x.size()), DType::F32, ReduceOp::Sum);
    });
    FAIL() << "expected a mismatch error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
  }
  // The group stays usable afterwards.
  group.run_all([&](LocalCommunicator& c) { c.barrier(); });
}

TEST(LocalCommunicator, FailingParticipantAbortsTheOthers) {
  LocalGroup group(4);
  try {
    group.run_all([&](LocalCommunicator& c) {
      if (c.rank() == 2) TG_THROW("worker 2 ran out of data");
      std::vector<float> x(8, 1.f);
      c.allreduce(x.data(), 8, DType::F32, ReduceOp::Sum);  // would wait forever without the abort
    });
    FAIL() << "expected the worker's error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("worker 2 ran out of data"), std::string::npos) << e.what();
  }
}

TEST(LocalCommunicator, RefusesDeviceBuffersAndUnsupportedOps) {
  LocalGroup group(1);
  LocalCommunicator& c = group.communicator(0);
  float x = 1.f;
  EXPECT_THROW(c.allreduce(&x, 1, DType::F32, ReduceOp::Sum, Device::cuda(0)), Error);
  half_bits h{0};
  EXPECT_THROW(c.allreduce(&h, 1, DType::F16, ReduceOp::Max), Error);
  c.allreduce(&x, 1, DType::F32, ReduceOp::Sum);  // one participant: identity
  EXPECT_EQ(x, 1.f);
}

TEST(ExchangeMode, ParseAndResolve) {
  EXPECT_EQ(parse_exchange_mode("auto"), ExchangeMode::Auto);
  EXPECT_EQ(parse_exchange_mode("allgather2"), ExchangeMode::Allgather2);
  EXPECT_EQ(parse_exchange_mode("allreduce8"), ExchangeMode::Allreduce8);
  try {
    parse_exchange_mode("ring");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--exchange"), std::string::npos);
  }
  EXPECT_EQ(resolve_exchange_mode(ExchangeMode::Auto, 7), ExchangeMode::Allgather2);
  EXPECT_EQ(resolve_exchange_mode(ExchangeMode::Auto, 8), ExchangeMode::Allreduce8);
  EXPECT_EQ(resolve_exchange_mode(ExchangeMode::Allgather2, 64), ExchangeMode::Allgather2);
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
    for (auto& g : grads[w]) v.emplace_back(g.data(), Shape{static_cast<int64_t>(g.size())}, DType::F32, Device::cpu());
    return v;
  }
};

// Reference: shared s = max over workers of the local scalers; every worker's codes from the per-element
// definition; average s * sum / N for ternary tensors, rank-order float sum / N for fp32 ones.
std::vector<std::vector<float>> reference_exchange(const Workload& wl, const CompressionPolicy& pol, uint64_t seed,
                                                   uint32_t step) {
  const int N = static_cast<int>(wl.grads.size());
  std::vector<std::vector<float>> out;
  for (int t = 0; t < pol.num_tensors(); ++t) {
    const TensorCodingPlan& plan = pol.tensors()[t];
    std::vector<float> avg(plan.numel);
    if (plan.coding == GradCoding::Ternary) {
      float s = 0.f;
      for (int w = 0; w < N; ++w)
        s = std::max(s, ternary_scaler_cpu(wl.grads[w][t].data(), plan.numel, pol.flags().clip_factor));
      for (int64_t i = 0; i < plan.numel; ++i) {
        int sum = 0;
        for (int w = 0; w < N; ++w) sum += ternarize_one(wl.grads[w][t][i], s, philox_key(seed, w), i, step, t);
        avg[i] = ternary_decode_value(s, sum, N);
      }
    } else {
      for (int64_t i = 0; i < plan.numel; ++i) {
        float sum = 0.f;
        for (int w = 0; w < N; ++w) sum += wl.grads[w][t][i];
        avg[i] = sum / static_cast<float>(N);
      }
    }
    out.push_back(std::move(avg));
  }
  return out;
}

void check_exchange(int N, ExchangeMode mode) {
  CompressionFlags f;
  f.grad_bits = 1;
  f.clip_factor = 2.5f;
  f.size_to_binarize = 7;  // conv1/biases (6) stays fp32
  f.quantize_logits = false;
  Workload wl(N);
  const CompressionPolicy pol(f, wl.params);
  ASSERT_EQ(pol.num_ternary(), 2);
  const uint64_t seed = 4242;
  const uint32_t step = 17;
  auto expected = reference_exchange(wl, pol, seed, step);
  LocalGroup group(N);
  std::vector<ExchangeStats> stats(N);
  std::vector<ExchangeMode> resolved(N);
  group.run_all([&](LocalCommunicator& c) {
    GradientExchange ex(pol, c, mode, seed);
    resolved[c.rank()] = ex.mode();
    stats[c.rank()] = ex.run(wl.views(c.rank()), step);
  });
  for (int w = 0; w < N; ++w) {
    for (int t = 0; t < pol.num_tensors(); ++t)
      for (size_t i = 0; i < expected[t].size(); ++i)
        ASSERT_EQ(wl.grads[w][t][i], expected[t][i]) << "worker " << w << " tensor " << t << " element " << i;
  }
  // Bytes: scalers (2 floats) all-reduced, codes gathered or summed as int8, fp32 remainder all-reduced.
  const uint64_t packed = pol.packed_bytes(), f32 = 4 * pol.f32_elements();
  const ExchangeMode m = resolved[0];
  uint64_t payload = 8 + f32 + (m == ExchangeMode::Allgather2 ? packed : 4 * packed);
  uint64_t moved = Communicator::allreduce_moved_bytes(8, N) + Communicator::allreduce_moved_bytes(f32, N) +
                   (m == ExchangeMode::Allgather2 ? Communicator::allgather_moved_bytes(packed, N)
                                                  : Communicator::allreduce_moved_bytes(4 * packed, N));
  for (int w = 0; w < N; ++w) {
    EXPECT_EQ(stats[w].payload_bytes, payload);
    EXPECT_EQ(stats[w].moved_bytes, moved);
    EXPECT_EQ(stats[w].fp32_payload_bytes, 4u * pol.total_elements());
  }
  EXPECT_LT(stats[0].payload_bytes * 2, stats[0].fp32_payload_bytes);  // ternary is the point
}

TEST(GradientExchange, Allgather2MatchesReference) { check_exchange(4, ExchangeMode::Allgather2); }
TEST(GradientExchange, Allreduce8MatchesReference) { check_exchange(4, ExchangeMode::Allreduce8); }
TEST(GradientExchange, AutoWithEightWorkersUsesAllreduce8) { check_exchange(8, ExchangeMode::Auto); }
TEST(GradientExchange, SingleWorker) { check_exchange(1, ExchangeMode::Auto); }

TEST(GradientExchange, Fp16AndFp32) {
  const int N = 3;
  Workload wl(N);
  CompressionFlags f;
  f.grad_bits = 16;
  const CompressionPolicy pol(f, wl.params);
  std::vector<std::vector<float>> expected;
  for (int t = 0; t < pol.num_tensors(); ++t) {
    std::vector<float> e(pol.tensors()[t].numel);
    for (size_t i = 0; i < e.size(); ++i) {
      float sum = 0.f;
      if (pol.tensors()[t].coding == GradCoding::F16) {
        for (int w = 0; w < N; ++w) sum += half_to_float(float_to_half(wl.grads[w][t][i]));
        e[i] = half_to_float(float_to_half(sum)) / N;
      } else {
        for (int w = 0; w < N; ++w) sum += wl.grads[w][t][i];
        e[i] = sum / N;
      }
    }
    expected.push_back(e);
  }
  LocalGroup group(N);
  group.run_all([&](LocalCommunicator& c) {
    GradientExchange ex(pol, c, ExchangeMode::Auto, 1);
    ex.run(wl.views(c.rank()), 0);
  });
  for (int w = 0; w < N; ++w)
    for (int t = 0; t < pol.num_tensors(); ++t)
      ASSERT_EQ(wl.grads[w][t], expected[t]) << "worker " << w << " tensor " << t;
}

TEST(GradientExchange, NonFiniteGradientStopsEveryWorker) {
  const int N = 3;
  Workload wl(N);
  CompressionFlags f;
  f.grad_bits = 1;
  const CompressionPolicy pol(f, wl.params);
  wl.grads[1][2][5] = std::numeric_limits<float>::quiet_NaN();  // fc/weights on worker 1
  LocalGroup group(N);
  std::vector<std::string> errors(N);
  group.run_all([&](LocalCommunicator& c) {
    GradientExchange ex(pol, c, ExchangeMode::Allgather2, 1);
    try {
      ex.run(wl.views(c.rank()), 23);
    } catch (const Error& e) {
      errors[c.rank()] = e.what();
    }
  });
  for (int w = 0; w < N; ++w) {
    EXPECT_NE(errors[w].find("fc/weights"), std::string::npos) << "worker " << w << ": " << errors[w];
    EXPECT_NE(errors[w].find("step 23"), std::string::npos) << errors[w];
  }
}

}  // namespace
}  // namespace tg

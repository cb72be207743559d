// The CPU batch norm (plain loops over fixed row chunks, double accumulation) on shapes large enough to span
// many chunks: against the double-precision reference, and bit-identical on 1 and 2 threads (the chunking,
// not the thread count, fixes the summation order).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "common/reference_ops.h"
#include "src/backend/cpu/cpu_backend.h"
#include "terngrad/math/batch_norm_math.h"

namespace tg {
namespace {

Tensor view(std::vector<float>& v) {
  return Tensor(v.data(), Shape{static_cast<int64_t>(v.size())}, DType::kF32, Device::cpu());
}

struct BnOut {
  std::vector<float> y, mean, var, dx, dgamma, dbeta;
};

BnOut run_bn(int threads, const BatchNormDesc& d, std::vector<float>& x, std::vector<float>& gamma,
             std::vector<float>& beta, std::vector<float>& dy) {
  CpuBackend be(threads);
  const size_t n = x.size(), c = static_cast<size_t>(d.c);
  BnOut o{std::vector<float>(n), std::vector<float>(c), std::vector<float>(c),
          std::vector<float>(n), std::vector<float>(c), std::vector<float>(c)};
  Tensor g = d.has_gamma ? view(gamma) : Tensor();
  be.batch_norm_forward_training(d, view(x), g, view(beta), view(o.y), view(o.mean), view(o.var));
  be.batch_norm_backward(d, view(x), g, view(o.mean), view(o.var), view(dy), view(o.dx),
                         d.has_gamma ? view(o.dgamma) : Tensor(), view(o.dbeta));
  return o;
}

double max_rel_error(const std::vector<float>& a, const ref::Vec& r) {
  double e = 0, scale = 1;
  for (size_t i = 0; i < r.size(); ++i) {
    e = std::max(e, std::fabs(a[i] - r[i]));
    scale = std::max(scale, std::fabs(r[i]));
  }
  return e / scale;
}

TEST(BatchNormLarge, MatchesReferenceAndIsThreadCountIndependent) {
  for (bool has_gamma : {false, true}) {
    for (auto [rows, channels] : {std::pair<int64_t, int64_t>{1000, 7}, {25088, 64}, {300, 2048}}) {
      BatchNormDesc d;
      d.rows = rows, d.c = channels, d.epsilon = 0.001f, d.has_gamma = has_gamma;
      std::mt19937 rng(5);
      std::normal_distribution<float> nd(0.f, 1.f);
      const int64_t n = rows * channels;
      std::vector<float> x(n), dy(n), gamma(channels), beta(channels, 0.3f);
      for (int64_t i = 0; i < n; ++i) {
        x[i] = 3.f + 2.f * nd(rng) + 0.1f * float(i % channels);
        dy[i] = nd(rng);
      }
      for (int64_t j = 0; j < channels; ++j) gamma[j] = has_gamma ? 0.5f + 0.1f * float(j) / channels : 1.f;
      if (has_gamma) gamma[0] = 0.f;  // a zero gamma must not break anything
      BnOut one = run_bn(1, d, x, gamma, beta, dy);
      BnOut two = run_bn(2, d, x, gamma, beta, dy);
      const std::string where = "rows " + std::to_string(rows) + " channels " + std::to_string(channels) +
                                (has_gamma ? " gamma" : " beta only");
      EXPECT_EQ(one.y, two.y) << where;
      EXPECT_EQ(one.dx, two.dx) << where;
      EXPECT_EQ(one.var, two.var) << where;
      EXPECT_EQ(one.dbeta, two.dbeta) << where;

      ref::Vec X(x.begin(), x.end()), G(gamma.begin(), gamma.end()), B(beta.begin(), beta.end()),
          DY(dy.begin(), dy.end()), rm, rv, rdx, rdg, rdb;
      ref::Vec ry = ref::batch_norm_forward_training(d, X, has_gamma ? G : ref::Vec(), B, &rm, &rv);
      ref::batch_norm_backward(d, X, has_gamma ? G : ref::Vec(), rm, rv, DY, &rdx, &rdg, &rdb);
      EXPECT_LT(max_rel_error(one.y, ry), 1e-4) << where;
      EXPECT_LT(max_rel_error(one.mean, rm), 1e-4) << where;
      EXPECT_LT(max_rel_error(one.var, rv), 1e-4) << where;
      EXPECT_LT(max_rel_error(one.dx, rdx), 1e-4) << where;
      EXPECT_LT(max_rel_error(one.dbeta, rdb), 1e-4) << where;
      if (has_gamma) {
        EXPECT_LT(max_rel_error(one.dgamma, rdg), 1e-4) << where;
      }
    }
  }
}

// The statistics follow batch_norm_math.h's order to the bit (the CUDA kernels' contract): chunk sums in double
// in row order, then groups of kBnGroupChunks chunks from 0, then the groups from 0. The data make the order
// visible: chunk 0 sums to 2^60, each chunk of group 1 to 4 (lost one by one against 2^60 in double, kept as
// their group's 256), the first chunk of group 2 to -2^60: the groups' order gives a mean of 256 / rows where one
// flat pass over the chunks would give 0.
TEST(BatchNormLarge, StatisticsFollowTheDocumentedOrderBitForBit) {
  const int64_t c = 2, rows = kBnChunkRows * (2 * kBnGroupChunks + 1) + 77;
  std::vector<float> x(static_cast<size_t>(rows * c), 0.f), dy(x.size(), 0.f), gamma(c, 1.f), beta(c, 0.f);
  for (int64_t j = 0; j < c; ++j) {
    for (int64_t r = 0; r < kBnChunkRows; ++r) x[r * c + j] = 0x1p52f;  // chunk 0: 2^60
    for (int64_t k = kBnGroupChunks; k < 2 * kBnGroupChunks; ++k) x[k * kBnChunkRows * c + j] = 4.f;
    for (int64_t r = 2 * kBnGroupChunks * kBnChunkRows; r < (2 * kBnGroupChunks + 1) * kBnChunkRows; ++r)
      x[r * c + j] = -0x1p52f;  // the first chunk of group 2: -2^60
  }
  BatchNormDesc d;
  d.rows = rows, d.c = c, d.epsilon = 0.001f;
  const BnOut o = run_bn(2, d, x, gamma, beta, dy);
  double total = 0.0, flat = 0.0;
  const int64_t chunks = bn_num_chunks(rows);
  for (int64_t g0 = 0; g0 < chunks; g0 += kBnGroupChunks) {
    double group = 0.0;
    for (int64_t k = g0; k < std::min(chunks, g0 + kBnGroupChunks); ++k) {
      double chunk = 0.0;
      for (int64_t r = k * kBnChunkRows; r < std::min(rows, (k + 1) * kBnChunkRows); ++r) chunk += x[r * c];
      group += chunk;
      flat += chunk;
    }
    total += group;
  }
  ASSERT_EQ(total, 256.0);
  ASSERT_EQ(flat, 0.0);  // the data do tell the orders apart
  for (int64_t j = 0; j < c; ++j)
    EXPECT_EQ(o.mean[j], static_cast<float>(total / static_cast<double>(rows))) << "channel " << j;
}

}  // namespace
}  // namespace tg

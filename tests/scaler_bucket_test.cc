// Per-bucket scalers (--scaler_bucket B, terngrad/math/ternary_math.h) at the level of the Backend's codec ops:
//   - the scalers against their definition: with c = 0 each bucket's max|g|; with c > 0 min(c*sigma, the bucket's
//     max|g|), sigma the whole tensor's (clipping stays per tensor); one bucket gives the per-tensor scaler bit for
//     bit; a NaN or Inf makes every scaler of the tensor NaN; weight decay and the residual added first; the same
//     bits on every ISA path and thread count;
//   - encode, both decodes and the coded update against the element-by-element definitions (ternarize_one and
//     ternary_decode_value with the element's bucket's scaler; the residual g - s * code), zero counts included;
//   - what the buckets are for: on a heavy-tailed gradient, the decoded average of 8 workers gets closer to the
//     true average as B falls (per tensor > 4096 > 1024 > 256);
//   - bad buckets (not a multiple of 256, negative, a scaler count that does not match) are refused naming them;
//   - the CUDA backend gives the CPU's bits for all of it (SKIPPED without a CUDA build or device).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/cuda_test_fixture.h"
#include "common/random_inputs.h"
#include "terngrad/backend/backend.h"
#include "terngrad/backend/ternary_codec.h"
#include "terngrad/core/error.h"
#include "terngrad/core/philox.h"
#include "terngrad/math/optim_math.h"
#include "terngrad/math/ternary_math.h"

namespace tg {
namespace {

using cuda_test::backends;
using cuda_test::Mem;
using cuda_test::Pair;

Backend& cpu() { return *backends().cpu; }

// A heavy-tailed gradient: normal values, one in 64 of them 30x larger (a few large elements set a tensor's
// scaler for millions, the case per-bucket scalers are for).
std::vector<float> heavy_tailed(int64_t n, uint32_t seed) {
  std::vector<float> g = testing::normal_floats(n, seed, 1e-3f);
  std::mt19937 rng(seed + 1);
  std::uniform_int_distribution<int64_t> at(0, std::max<int64_t>(0, n - 1));
  for (int64_t k = 0; k < n / 64; ++k) g[at(rng)] *= 30.f;
  return g;
}

Tensor host(std::vector<float>& v) {
  return Tensor(v.data(), Shape{static_cast<int64_t>(v.size())}, DType::kF32, Device::cpu());
}
Tensor host(std::vector<uint8_t>& v) {
  return Tensor(v.data(), Shape{static_cast<int64_t>(v.size())}, DType::kU8, Device::cpu());
}
Tensor host(std::vector<int8_t>& v) {
  return Tensor(v.data(), Shape{static_cast<int64_t>(v.size())}, DType::kI8, Device::cpu());
}
Tensor host(std::vector<int32_t>& v) {
  return Tensor(v.data(), Shape{static_cast<int64_t>(v.size())}, DType::kI32, Device::cpu());
}

std::vector<float> scalers_of(std::vector<float> g, float c, int64_t bucket, Backend& be = cpu()) {
  std::vector<float> s(ternary_num_scalers(static_cast<int64_t>(g.size()), bucket), -1.f);
  be.ternary_scaler(host(g), c, host(s), Tensor(), Tensor(), 0.f, bucket);
  return s;
}

float max_abs(const std::vector<float>& g, int64_t b, int64_t e) {
  float m = 0.f;
  for (int64_t i = b; i < e; ++i) m = std::max(m, std::fabs(g[i]));
  return m;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

TEST(ScalerBucketOps, ScalersFollowTheDefinition) {
  for (int64_t n : {int64_t{1000}, int64_t{5000}, int64_t{1000003}})
    for (int64_t bucket : {int64_t{256}, int64_t{1024}, int64_t{4096}}) {
      SCOPED_TRACE(fmt::format("n {} bucket {}", n, bucket));
      // Two scales: the second half's gradients 10x the first's.
      std::vector<float> g = heavy_tailed(n, static_cast<uint32_t>(n + bucket));
      for (int64_t i = n / 2; i < n; ++i) g[i] *= 10.f;
      const int64_t k = ternary_num_scalers(n, bucket);
      ASSERT_EQ(k, n > bucket ? (n + bucket - 1) / bucket : 1);
      // c = 0: each bucket's max|g|.
      const std::vector<float> s0 = scalers_of(g, 0.f, bucket);
      for (int64_t j = 0; j < k; ++j) ASSERT_EQ(s0[j], max_abs(g, j * bucket, std::min(n, (j + 1) * bucket))) << j;
      // c = 2.5: min(c * sigma, the bucket's max|g|) with the whole tensor's sigma (ternary_bucket_scaler): every
      // scaler at most the tensor's, the buckets holding its largest element equal to it; one bucket is the tensor's.
      const std::vector<float> s = scalers_of(g, 2.5f, bucket);
      const float tensor = scalers_of(g, 2.5f, 0)[0];
      double sum = 0, sumsq = 0;
      for (float v : g) sum += v, sumsq += double(v) * v;
      const double sigma = std::sqrt(std::max(0.0, sumsq / n - (sum / n) * (sum / n)));
      for (int64_t j = 0; j < k; ++j) {
        const float own = max_abs(g, j * bucket, std::min(n, (j + 1) * bucket));
        ASSERT_LE(s[j], tensor) << j;
        ASSERT_EQ(s[j], std::min(own, tensor)) << j << ": the tensor's clip, the bucket's max";
        ASSERT_NEAR(std::min(own, static_cast<float>(2.5 * sigma)), s[j], 1e-5 * s[j]) << j;
      }
      if (k == 1) {
        EXPECT_TRUE(same_bits(s[0], tensor));
      } else {  // a bucket of the small half below the tensor's scaler; the one holding max|g| at it
        if (bucket <= n / 2) {
          EXPECT_LT(s[0], tensor);
        }
        EXPECT_NE(std::count(s.begin(), s.end(), tensor), 0);
      }
      // A NaN or an Inf anywhere: every scaler of the tensor is NaN (the step then stops naming the tensor).
      std::vector<float> bad = g;
      bad[n / 2] = std::numeric_limits<float>::quiet_NaN();
      if (n > 1) bad[n - 1] = std::numeric_limits<float>::infinity();
      const std::vector<float> sb = scalers_of(bad, 2.5f, bucket);
      for (int64_t j = 0; j < k; ++j) EXPECT_TRUE(std::isnan(sb[j])) << j;
    }
  // With the adds of weight decay and error feedback in the same pass: the bits of adding first.
  const int64_t n = 70001, bucket = 512;
  std::vector<float> g = heavy_tailed(n, 3), w = testing::normal_floats(n, 4), r = testing::normal_floats(n, 5, 1e-4f);
  std::vector<float> added = g;
  for (int64_t i = 0; i < n; ++i) added[i] = (added[i] + 5e-4f * w[i]) + r[i];
  std::vector<float> s(ternary_num_scalers(n, bucket));
  cpu().ternary_scaler(host(g), 2.5f, host(s), host(r), host(w), 5e-4f, bucket);
  EXPECT_EQ(std::memcmp(g.data(), added.data(), 4 * n), 0) << "the gradient after the adds";
  const std::vector<float> want = scalers_of(added, 2.5f, bucket);
  EXPECT_EQ(std::memcmp(s.data(), want.data(), 4 * s.size()), 0) << "the scalers of the new gradient";
}

// The scalers, the codes (with error feedback's residual) and both decodes with buckets: the same bits on every ISA
// path the CPU has and at 1 and 2 threads.
TEST(ScalerBucketOps, SameBitsOnEveryIsaAndThreadCount) {
  const int64_t n = 300007, bucket = 1024;
  const int W = 3;
  const std::vector<float> g = heavy_tailed(n, 7);
  const int64_t nb = (n + 3) / 4;
  struct Out {
    std::vector<float> s, residual, sums_decoded, gathered_decoded;
    std::vector<uint8_t> packed;
    std::vector<int32_t> zeros;
  };
  auto run = [&](Backend& be) {
    Out o;
    o.s = scalers_of(g, 2.5f, bucket, be);
    o.packed.assign(W * nb, 0);
    o.zeros.assign(W, 0);
    o.residual.assign(n, 0.f);
    std::vector<float> gw = g;
    for (int w = 0; w < W; ++w) {
      std::vector<float> r(n, 0.f);
      std::vector<uint8_t> p(nb);
      std::vector<int32_t> z(1);
      TernaryEncodeItem it{host(gw), host(o.s), 5, host(p), host(z), host(r), bucket};
      be.ternary_encode_many(&it, 1, philox_key(11, w), 42);
      std::copy(p.begin(), p.end(), o.packed.begin() + w * nb);
      o.zeros[w] = z[0];
      if (w == 0) o.residual = r;
    }
    std::vector<int8_t> sums(n);
    be.ternary_sum_codes(host(o.packed), nb, W, host(sums));
    o.sums_decoded.assign(n, 0.f);
    o.gathered_decoded.assign(n, 0.f);
    be.ternary_decode_sums(host(sums), host(o.s), W, host(o.sums_decoded), bucket);
    be.ternary_decode_gathered(host(o.packed), nb, W, host(o.s), host(o.gathered_decoded), bucket);
    return o;
  };
  std::unique_ptr<Backend> one = make_backend("cpu", BackendOptions{1});
  const CodecIsa best = ternary_codec_isa();
  set_ternary_codec_isa(CodecIsa::kGeneric);
  const Out ref = run(*one);
  set_ternary_codec_isa(CodecIsa::kAuto);
  for (CodecIsa isa : {CodecIsa::kGeneric, CodecIsa::kAvx2, CodecIsa::kAvx512}) {
    if (static_cast<int>(isa) > static_cast<int>(best)) continue;
    set_ternary_codec_isa(isa);
    for (Backend* be : {one.get(), &cpu()}) {
      const Out o = run(*be);
      const std::string what = fmt::format("isa {}, {}", enum_name(isa), be == one.get() ? "1 thread" : "2 threads");
      EXPECT_EQ(std::memcmp(o.s.data(), ref.s.data(), 4 * o.s.size()), 0) << what;
      EXPECT_EQ(o.packed, ref.packed) << what;
      EXPECT_EQ(o.zeros, ref.zeros) << what;
      EXPECT_EQ(std::memcmp(o.residual.data(), ref.residual.data(), 4 * n), 0) << what;
      EXPECT_EQ(std::memcmp(o.sums_decoded.data(), ref.sums_decoded.data(), 4 * n), 0) << what;
      EXPECT_EQ(std::memcmp(o.gathered_decoded.data(), ref.gathered_decoded.data(), 4 * n), 0) << what;
    }
  }
  set_ternary_codec_isa(CodecIsa::kAuto);
}

// Encode, decodes and residual against the element-by-element definitions, on sizes around the bucket and unit
// boundaries, with a bucket whose scaler is 0 (all its codes 0) among them.
TEST(ScalerBucketOps, EncodeAndDecodesFollowTheDefinition) {
  const int64_t bucket = 256;
  const int W = 2;
  for (int64_t n : {int64_t{255}, int64_t{256}, int64_t{257}, int64_t{1000}, int64_t{4099}, int64_t{70001}}) {
    SCOPED_TRACE(fmt::format("n {}", n));
    std::vector<float> g = heavy_tailed(n, static_cast<uint32_t>(n));
    if (n > 2 * bucket) std::fill(g.begin() + bucket, g.begin() + 2 * bucket, 0.f);  // bucket 1: s = 0
    const std::vector<float> s = scalers_of(g, 2.5f, bucket);
    const int64_t nb = (n + 3) / 4;
    std::vector<uint8_t> packed(W * nb, 0xEE);
    std::vector<float> r(n, -7.f);
    std::vector<int32_t> zeros(W, -1);
    for (int w = 0; w < W; ++w) {
      std::vector<float> gw = g;
      std::vector<uint8_t> p(nb);
      std::vector<int32_t> z(1);
      std::vector<float> s_copy = s;
      TernaryEncodeItem it{host(gw), host(s_copy), 9, host(p), host(z), w == 0 ? host(r) : Tensor(), bucket};
      cpu().ternary_encode_many(&it, 1, philox_key(3, w), 17);
      std::copy(p.begin(), p.end(), packed.begin() + w * nb);
      zeros[w] = z[0];
    }
    std::vector<int> code_sum(n, 0);
    for (int w = 0; w < W; ++w) {
      int32_t z = 0;
      for (int64_t i = 0; i < n; ++i) {
        const float si = s[ternary_scaler_of(i, bucket)];
        const int code = ternarize_one(g[i], si, philox_key(3, w), static_cast<uint64_t>(i), 17, 9);
        ASSERT_EQ(unpack_ternary(packed.data() + w * nb, i), code) << "worker " << w << " element " << i;
        if (w == 0) {
          ASSERT_TRUE(same_bits(r[i], ternary_residual_value(g[i], si, code))) << i;
        }
        code_sum[i] += code;
        z += code == 0;
      }
      EXPECT_EQ(zeros[w], z) << "worker " << w;
    }
    if (n > 2 * bucket) {
      for (int64_t i = bucket; i < 2 * bucket; ++i) ASSERT_EQ(unpack_ternary(packed.data(), i), 0);
    }
    std::vector<int8_t> sums(n);
    cpu().ternary_sum_codes(host(packed), nb, W, host(sums));
    std::vector<float> a(n), b(n), s_copy = s;
    cpu().ternary_decode_sums(host(sums), host(s_copy), W, host(a), bucket);
    cpu().ternary_decode_gathered(host(packed), nb, W, host(s_copy), host(b), bucket);
    for (int64_t i = 0; i < n; ++i) {
      const float want = ternary_decode_value(s[ternary_scaler_of(i, bucket)], code_sum[i], W);
      ASSERT_TRUE(same_bits(a[i], want)) << "sums " << i;
      ASSERT_TRUE(same_bits(b[i], want)) << "gathered " << i;
    }
  }
}

// The update from a coded average with buckets, whole or in parts of whole buckets (the hierarchical scheme's
// layout), gives the bits of decoding first and then updating.
TEST(ScalerBucketOps, CodedUpdateGivesTheBitsOfDecodingFirst) {
  const int64_t n = 50003, bucket = 512;
  const int W = 3;
  const std::vector<float> g = heavy_tailed(n, 21);
  std::vector<float> s = scalers_of(g, 0.f, bucket);
  const int64_t nb = (n + 3) / 4;
  std::vector<uint8_t> packed = testing::random_bytes(W * nb, 5);
  std::vector<int8_t> sums(n);
  cpu().ternary_sum_codes(host(packed), nb, W, host(sums));
  OptimizerStep step;
  step.kind = OptimizerKind::kMomentum;
  step.lr = 0.1f;
  step.momentum = 0.9f;
  step.ema_decay = -1.f;
  for (bool gathered : {true, false}) {
    std::vector<float> decoded(n), w0 = testing::normal_floats(n, 2), m0(n, 0.01f);
    if (gathered)
      cpu().ternary_decode_gathered(host(packed), nb, W, host(s), host(decoded), bucket);
    else
      cpu().ternary_decode_sums(host(sums), host(s), W, host(decoded), bucket);
    std::vector<float> w_ref = w0, m_ref = m0;
    cpu().optimizer_update(step, host(w_ref), host(decoded), host(m_ref), Tensor(), Tensor());
    std::vector<float> w = w0, m = m0;
    CodedAverage c;
    c.scaler = host(s);
    c.bucket = bucket;
    c.num_workers = W;
    if (gathered) {
      c.gathered = host(packed);
      c.stride = nb;
    } else {
      c.code_sums = host(sums);
    }
    cpu().optimizer_update_coded(step, host(w), c, host(m), Tensor(), Tensor());
    EXPECT_EQ(std::memcmp(w.data(), w_ref.data(), 4 * n), 0) << "gathered " << gathered;
    EXPECT_EQ(std::memcmp(m.data(), m_ref.data(), 4 * n), 0) << "gathered " << gathered;
  }
  // Parts: two parts of 25088 elements (49 buckets), each coded as a tensor of its own, its scalers following.
  const int64_t part = 49 * bucket;
  std::vector<uint8_t> parts(2 * ((part + 3) / 4) * W + 64, 0);
  const int64_t pstride = (part + 3) / 4, block = W * pstride;
  std::vector<float> decoded(n);
  for (int p = 0; p < 2; ++p) {
    const int64_t b = p * part, count = std::min(part, n - b);
    for (int w = 0; w < W; ++w)
      for (int64_t i = 0; i < count; ++i) {
        const int code = unpack_ternary(packed.data() + w * nb, b + i);
        uint8_t& byte = parts[p * block + w * pstride + i / 4];
        byte = static_cast<uint8_t>(byte | (ternary_field(code) << (2 * (i % 4))));
      }
  }
  cpu().ternary_decode_gathered(host(packed), nb, W, host(s), host(decoded), bucket);
  std::vector<float> w_ref = testing::normal_floats(n, 4), m_ref(n, 0.f), w = w_ref, m = m_ref;
  cpu().optimizer_update(step, host(w_ref), host(decoded), host(m_ref), Tensor(), Tensor());
  CodedAverage c;
  c.scaler = host(s);
  c.bucket = bucket;
  c.num_workers = W;
  c.gathered = host(parts);
  c.stride = pstride;
  c.part = part;
  c.part_stride = block;
  cpu().optimizer_update_coded(step, host(w), c, host(m), Tensor(), Tensor());
  EXPECT_EQ(std::memcmp(w.data(), w_ref.data(), 4 * n), 0) << "parts";
  c.part = part + 256;  // not whole buckets
  EXPECT_THROW(cpu().optimizer_update_coded(step, host(w), c, host(m), Tensor(), Tensor()), Error);
}

// What the buckets are for: 8 workers' heavy-tailed gradients (each its own outliers), averaged through their codes
// (allgather2's decode); the relative error of the decoded average against the true average falls as the buckets
// shrink. Mean over 4 steps (each draws new codes).
TEST(ScalerBucketOps, DecodedAverageErrorFallsAsBucketsShrink) {
  const int64_t n = 262144;
  const int W = 8;
  std::vector<std::vector<float>> grads;
  std::vector<double> truth(n, 0.0);
  for (int w = 0; w < W; ++w) {
    grads.push_back(heavy_tailed(n, 100 + w));
    for (int64_t i = 0; i < n; ++i) truth[i] += grads[w][i] / W;
  }
  double truth_norm = 0;
  for (double v : truth) truth_norm += v * v;
  std::vector<double> errors;
  for (int64_t bucket : {int64_t{0}, int64_t{4096}, int64_t{1024}, int64_t{256}}) {
    const int64_t k = ternary_num_scalers(n, bucket), nb = (n + 3) / 4;
    std::vector<float> shared(k, 0.f);
    for (int w = 0; w < W; ++w) {  // the all-reduce MAX
      const std::vector<float> s = scalers_of(grads[w], 0.f, bucket);
      for (int64_t j = 0; j < k; ++j) shared[j] = std::max(shared[j], s[j]);
    }
    double err = 0;
    for (uint32_t step = 0; step < 4; ++step) {
      std::vector<uint8_t> gathered(W * nb);
      for (int w = 0; w < W; ++w) {
        std::vector<uint8_t> p(nb);
        cpu().ternary_encode(host(grads[w]), host(shared), philox_key(1, w), step, 0, host(p), Tensor(), bucket);
        std::copy(p.begin(), p.end(), gathered.begin() + w * nb);
      }
      std::vector<float> avg(n);
      cpu().ternary_decode_gathered(host(gathered), nb, W, host(shared), host(avg), bucket);
      for (int64_t i = 0; i < n; ++i) err += (avg[i] - truth[i]) * (avg[i] - truth[i]);
    }
    errors.push_back(std::sqrt(err / 4 / truth_norm));
  }
  for (size_t k = 1; k < errors.size(); ++k)
    EXPECT_LT(errors[k], errors[k - 1]) << fmt::format(
        "relative errors (per tensor, 4096, 1024, 256): {:.3f} {:.3f} "
        "{:.3f} {:.3f}",
        errors[0], errors[1], errors[2], errors[3]);
  EXPECT_LT(errors[3], 0.75 * errors[0]);
}

TEST(ScalerBucketOps, BadBucketsAreRefusedNamingThem) {
  std::vector<float> g = heavy_tailed(1000, 1), s4(4), s1(1);
  std::vector<uint8_t> p(250);
  auto message = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(message([&] {
              cpu().ternary_scaler(host(g), 0.f, host(s4), Tensor(), Tensor(), 0.f, 300);
            }).find("a scaler bucket of 300 elements is not 0 or a positive multiple of 256"),
            std::string::npos);
  EXPECT_NE(message([&] { cpu().ternary_scaler(host(g), 0.f, host(s4), Tensor(), Tensor(), 0.f, -256); }).find("-256"),
            std::string::npos);
  EXPECT_NE(message([&] {
              cpu().ternary_encode(host(g), host(s1), philox_key(1, 0), 0, 0, host(p), Tensor(), 256);
            }).find("has 1 elements, expected 4"),
            std::string::npos);
  EXPECT_NO_THROW(cpu().ternary_encode(host(g), host(s4), philox_key(1, 0), 0, 0, host(p), Tensor(), 256));
}

// ---- the CUDA backend against the CPU ----------------------------------------------------------------------------
class ScalerBucketCuda : public cuda_test::CudaBackendTest {};

TEST_F(ScalerBucketCuda, MatchesCpuBitForBit) {
  const int W = 3;
  for (int64_t n : {int64_t{1000}, int64_t{70001}, int64_t{1000003}})
    for (int64_t bucket : {int64_t{256}, int64_t{4096}}) {
      const std::string what = fmt::format("n {} bucket {}", n, bucket);
      const int64_t k = ternary_num_scalers(n, bucket), nb = (n + 3) / 4;
      const std::vector<float> g = heavy_tailed(n, static_cast<uint32_t>(n % 977));
      Pair pg(Shape{n}), ps(Shape{k}), pr(Shape{n}), pp(Shape{W * nb}, DType::kU8), pz(Shape{W}, DType::kI32),
          psums(Shape{n}, DType::kI8), pa(Shape{n}), pb(Shape{n}), pw(Shape{n}), pm(Shape{n});
      for (float c : {0.f, 2.5f}) {
        pg.set(g);
        cpu().ternary_scaler(pg.c.t, c, ps.c.t, Tensor(), Tensor(), 0.f, bucket);
        gpu().ternary_scaler(pg.g.t, c, ps.g.t, Tensor(), Tensor(), 0.f, bucket);
        cuda_test::expect_same_bits(ps, what + fmt::format(" scalers c {}", c));
      }
      std::vector<float> zeros(n, 0.f);
      pr.set(zeros);
      for (Mem* m : {&pp.c, &pp.g}) m->write(std::vector<uint8_t>(W * nb, 0));
      for (int w = 0; w < W; ++w)
        for (Backend* be : {&cpu(), &gpu()}) {
          const bool on_cpu = be == &cpu();
          const Pair* P[] = {&pg, &ps, &pp, &pz, &pr};
          auto t = [&](int i) { return on_cpu ? P[i]->c.t : P[i]->g.t; };
          TernaryEncodeItem it{
              t(0),  t(1), 4, t(2).slice0(w * nb, (w + 1) * nb), t(3).slice0(w, w + 1), w == 0 ? t(4) : Tensor(),
              bucket};
          be->ternary_encode_many(&it, 1, philox_key(8, w), 77);
        }
      cuda_test::expect_same_bits(pp, what + " codes");
      cuda_test::expect_same_bits(pz, what + " zero counts");
      cuda_test::expect_same_bits(pr, what + " residual");
      cpu().ternary_sum_codes(pp.c.t, nb, W, psums.c.t);
      gpu().ternary_sum_codes(pp.g.t, nb, W, psums.g.t);
      cpu().ternary_decode_sums(psums.c.t, ps.c.t, W, pa.c.t, bucket);
      gpu().ternary_decode_sums(psums.g.t, ps.g.t, W, pa.g.t, bucket);
      cuda_test::expect_same_bits(pa, what + " decode of sums");
      cpu().ternary_decode_gathered(pp.c.t, nb, W, ps.c.t, pb.c.t, bucket);
      gpu().ternary_decode_gathered(pp.g.t, nb, W, ps.g.t, pb.g.t, bucket);
      cuda_test::expect_same_bits(pb, what + " decode of gathered codes");
      OptimizerStep step;
      step.kind = OptimizerKind::kMomentum;
      step.lr = 0.1f;
      step.momentum = 0.9f;
      step.ema_decay = -1.f;
      pw.set(g);
      pm.set(zeros);
      for (Backend* be : {&cpu(), &gpu()}) {
        const bool on_cpu = be == &cpu();
        CodedAverage c;
        c.scaler = on_cpu ? ps.c.t : ps.g.t;
        c.bucket = bucket;
        c.num_workers = W;
        c.gathered = on_cpu ? pp.c.t : pp.g.t;
        c.stride = nb;
        be->optimizer_update_coded(step, on_cpu ? pw.c.t : pw.g.t, c, on_cpu ? pm.c.t : pm.g.t, Tensor(), Tensor());
      }
      cuda_test::expect_same_bits(pw, what + " coded update");
    }
}

}  // namespace
}  // namespace tg

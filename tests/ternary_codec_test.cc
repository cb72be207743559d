// Tests of the ternary gradient math and codecs: 2-bit packing format, scaler formula, determinism of the
// Philox-keyed rounding, statistical unbiasedness and zero fraction (tolerances derived from the
// per-element variance s|g| - g^2), decoding of summed codes, the compression policy and its flag errors.
#include "terngrad/compress/ternary_codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "terngrad/compress/compression_policy.h"
#include "terngrad/compress/gradient_codec.h"
#include "terngrad/core/error.h"
#include "terngrad/core/thread_pool.h"
#include "terngrad/math/ternary_math.h"

#if defined(TG_HAVE_CUDA)
#include <cuda_runtime.h>

#include "terngrad/compress/ternary_cuda.h"
#endif

namespace tg {
namespace {

Tensor host_tensor(std::vector<float>& v) {
  return Tensor(v.data(), Shape{static_cast<int64_t>(v.size())}, DType::F32, Device::cpu());
}

std::vector<float> normal_gradient(int64_t n, uint32_t seed, float stddev = 1e-3f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, stddev);
  std::vector<float> g(n);
  for (auto& x : g) x = dist(rng);
  return g;
}

std::vector<int> encode_codes(const std::vector<float>& g, float s, PhiloxKey key, uint32_t step, uint32_t tensor) {
  const int64_t n = static_cast<int64_t>(g.size());
  std::vector<uint8_t> packed((n + 3) / 4);
  ternary_encode_cpu(g.data(), n, s, key, step, tensor, packed.data());
  std::vector<int> codes(n);
  for (int64_t i = 0; i < n; ++i) codes[i] = unpack_ternary(packed.data(), i);
  return codes;
}

// Population statistics in double: the oracle of the scaler.
void reference_stats(const std::vector<float>& g, double* sigma, double* max_abs) {
  double mean = 0;
  for (float x : g) mean += x;
  mean /= g.size();
  double ss = 0, mx = 0;
  for (float x : g) {
    ss += (x - mean) * (x - mean);
    mx = std::max(mx, std::fabs(static_cast<double>(x)));
  }
  *sigma = std::sqrt(ss / g.size());
  *max_abs = mx;
}

TEST(TernaryPack, FieldFormatIsDocumentedOne) {
  // element 0 in bits 0-1: +1 -> 01, element 1: -1 -> 10, element 2: 0 -> 00, element 3: +1 -> 01
  EXPECT_EQ(pack_ternary4(1, -1, 0, 1), 0x01 | (0x2 << 2) | (0x0 << 4) | (0x1 << 6));
  EXPECT_EQ(pack_ternary4(0, 0, 0, 0), 0);
  EXPECT_EQ(pack_ternary4(-1, -1, -1, -1), 0xAA);
  EXPECT_EQ(ternary_code_of_field(3), 0);  // never written; reads as 0
}

TEST(TernaryPack, RoundTripAllSizes) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> d(-1, 1);
  for (int64_t n : {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 1001}) {
    std::vector<int> codes(n);
    for (auto& c : codes) c = d(rng);
    std::vector<uint8_t> packed((n + 3) / 4, 0xFF);
    for (int64_t b = 0; b < (n + 3) / 4; ++b) {
      int c[4] = {0, 0, 0, 0};
      for (int k = 0; k < 4; ++k) {
        if (4 * b + k < n) c[k] = codes[4 * b + k];
      }
      packed[b] = pack_ternary4(c[0], c[1], c[2], c[3]);
    }
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(unpack_ternary(packed.data(), i), codes[i]) << "n=" << n << " i=" << i;
    std::vector<int8_t> unpacked(n);
    ternary_unpack_cpu(packed.data(), n, unpacked.data());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(unpacked[i], codes[i]);
    if (n % 4) {
      EXPECT_EQ(packed.back() >> (2 * (n % 4)), 0) << "padding fields must be 00, n=" << n;
    }
  }
}

TEST(TernaryEncode, PackedPathMatchesPerElementDefinition) {
  const PhiloxKey key = philox_key(1234, 3);
  for (int64_t n : {1, 3, 5, 10, 4097}) {
    std::vector<float> g = normal_gradient(n, 11 + n);
    g[0] = 0.f;  // exact zero stays zero
    const float s = 1.5e-3f;
    std::vector<int> codes = encode_codes(g, s, key, 42, 5);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(codes[i], ternarize_one(g[i], s, key, i, 42, 5)) << "i=" << i;
    EXPECT_EQ(codes[0], 0);
  }
}

TEST(TernaryEncode, VectorLanesMatchTheDefinitionAndCountZeros) {
  // Sizes around the 64-element lane groups of the vectorized path, and a large one.
  const PhiloxKey key = philox_key(99, 1);
  for (int64_t n : {63, 64, 65, 127, 129, 100003}) {
    std::vector<float> g = normal_gradient(n, 5 + n);
    const float s = 2e-3f;
    std::vector<uint8_t> packed((n + 3) / 4);
    const int64_t zeros = ternary_encode_cpu(g.data(), n, s, key, 7, 3, packed.data());
    int64_t counted = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int code = unpack_ternary(packed.data(), i);
      ASSERT_EQ(code, ternarize_one(g[i], s, key, i, 7, 3)) << "n=" << n << " i=" << i;
      counted += code == 0;
    }
    EXPECT_EQ(zeros, counted) << "n=" << n;
  }
}

TEST(TernaryEncode, ThreadPoolGivesSameBits) {
  const int64_t n = 200003;
  std::vector<float> g = normal_gradient(n, 5);
  const PhiloxKey key = philox_key(99, 1);
  std::vector<uint8_t> a((n + 3) / 4), b((n + 3) / 4);
  int64_t za = ternary_encode_cpu(g.data(), n, 2e-3f, key, 3, 2, a.data());
  ThreadPool pool(2);
  int64_t zb = ternary_encode_cpu(g.data(), n, 2e-3f, key, 3, 2, b.data(), &pool);
  EXPECT_EQ(a, b);
  EXPECT_EQ(za, zb);
  int64_t zeros = 0;
  for (int64_t i = 0; i < n; ++i) zeros += unpack_ternary(a.data(), i) == 0;
  EXPECT_EQ(za, zeros);
}

TEST(TernaryScaler, NoClipIsMaxAbs) {
  std::vector<float> g = {0.5f, -3.f, 1.f, 2.f};
  EXPECT_EQ(ternary_scaler_cpu(g.data(), 4, 0.f), 3.f);
}

TEST(TernaryScaler, ClipAtCSigmaWhenSmallerThanMax) {
  // Mostly small values and one outlier: 2.5 sigma < max|g|.
  std::vector<float> g = normal_gradient(10000, 3);
  g[17] = 1.f;
  double sigma, mx;
  reference_stats(g, &sigma, &mx);
  ASSERT_LT(2.5 * sigma, mx);
  const float s = ternary_scaler_cpu(g.data(), g.size(), 2.5f);
  EXPECT_NEAR(s, 2.5 * sigma, 1e-6 * 2.5 * sigma);
}

TEST(TernaryScaler, MaxAbsWhenSmallerThanCSigma) {
  // Values +-1 (sigma = 1, max = 1): c*sigma = 2.5 > max|g|, so s = max|g| (the paper), not 2.5 (the reference).
  std::vector<float> g(1000);
  for (size_t i = 0; i < g.size(); ++i) g[i] = (i % 2) ? 1.f : -1.f;
  double sigma, mx;
  reference_stats(g, &sigma, &mx);
  ASSERT_NEAR(sigma, 1.0, 1e-12);
  EXPECT_EQ(ternary_scaler_cpu(g.data(), g.size(), 2.5f), 1.f);
  // mean is subtracted: a constant offset does not change sigma.
  std::vector<float> h = {10.f, 12.f};  // mean 11, sigma 1, max 12
  EXPECT_FLOAT_EQ(ternary_scaler_cpu(h.data(), 2, 2.5f), 2.5f);
}

TEST(TernaryScaler, NonFiniteGradientGivesNonFiniteScaler) {
  std::vector<float> g = {1.f, std::numeric_limits<float>::quiet_NaN(), 2.f};
  EXPECT_FALSE(std::isfinite(ternary_scaler_cpu(g.data(), 3, 0.f)));
  EXPECT_FALSE(std::isfinite(ternary_scaler_cpu(g.data(), 3, 2.5f)));
  g[1] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(std::isfinite(ternary_scaler_cpu(g.data(), 3, 0.f)));
  EXPECT_FALSE(std::isfinite(ternary_scaler_cpu(g.data(), 3, 2.5f)));
}

TEST(TernaryEncode, ZeroScalerGivesAllZeros) {
  std::vector<float> g = normal_gradient(1001, 8);
  std::vector<int> codes = encode_codes(g, 0.f, philox_key(1, 0), 0, 0);
  for (int c : codes) ASSERT_EQ(c, 0);
  // A constant tensor has sigma 0, so s = min(c*0, max) = 0 under clipping.
  std::vector<float> k(37, 0.25f);
  EXPECT_EQ(ternary_scaler_cpu(k.data(), k.size(), 2.5f), 0.f);
  std::vector<float> z(37, 0.f);
  EXPECT_EQ(ternary_scaler_cpu(z.data(), z.size(), 0.f), 0.f);
}

TEST(TernaryEncode, DeterministicPerKeyAndDifferentPerWorkerAndStep) {
  const int64_t n = 4000;
  std::vector<float> g = normal_gradient(n, 9);
  const float s = 2e-3f;
  auto a = encode_codes(g, s, philox_key(777, 0), 10, 1);
  auto b = encode_codes(g, s, philox_key(777, 0), 10, 1);
  EXPECT_EQ(a, b);
  auto differ = [&](const std::vector<int>& x, const std::vector<int>& y) {
    int64_t d = 0;
    for (int64_t i = 0; i < n; ++i) d += x[i] != y[i];
    return d;
  };
  // With |g|/s about 0.4 on average, two independent draws disagree on roughly half of the elements.
  EXPECT_GT(differ(a, encode_codes(g, s, philox_key(777, 1), 10, 1)), n / 5);  // other worker
  EXPECT_GT(differ(a, encode_codes(g, s, philox_key(777, 0), 11, 1)), n / 5);  // other step
  EXPECT_GT(differ(a, encode_codes(g, s, philox_key(777, 0), 10, 2)), n / 5);  // other tensor
  EXPECT_GT(differ(a, encode_codes(g, s, philox_key(778, 0), 10, 1)), n / 5);  // other seed
}

// E[s * code] = clip(g, -s, s) =: gc, Var = s|gc| - gc^2. Over K encodings (steps 0..K-1):
//  - clipped elements (|g| >= s) are always exactly +-s;
//  - every element whose count of non-zero codes is near normal (K p (1-p) >= 10, p = |gc|/s) lies within
//    6 standard errors, and the mean of their squared z-scores is 1 within 5 of its standard errors
//    (Var z^2 = 2 + (1 - 6pq)/(Kpq) <= 2.1): this checks the variance too, not only the mean;
//  - the sum of the deviations (signed by g) over all random elements is within 5 of its standard errors
//    (catches a small bias in magnitude shared by all elements, including those with rare non-zero codes).
TEST(TernaryStatistics, UnbiasedWithinStandardErrors) {
  const int64_t n = 2048;
  const int K = 1600;
  std::vector<float> g = normal_gradient(n, 21);
  const float s = ternary_scaler_cpu(g.data(), n, 2.5f);  // some elements are clipped
  const PhiloxKey key = philox_key(2017, 4);
  std::vector<double> sum(n, 0.0);
  std::vector<uint8_t> packed((n + 3) / 4);
  for (int k = 0; k < K; ++k) {
    ternary_encode_cpu(g.data(), n, s, key, static_cast<uint32_t>(k), 0, packed.data());
    for (int64_t i = 0; i < n; ++i) sum[i] += s * unpack_ternary(packed.data(), i);
  }
  int64_t clipped = 0, normal_elems = 0;
  double z2 = 0.0, total_dev = 0.0, total_var = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double gc = std::max<double>(-s, std::min<double>(s, g[i]));
    const double mean = sum[i] / K;
    if (std::fabs(g[i]) >= s) {
      ++clipped;
      ASSERT_EQ(mean, s * (g[i] > 0 ? 1.0 : -1.0)) << "clipped element " << i << " must always be +-s";
      continue;
    }
    const double var = s * std::fabs(gc) - gc * gc;  // of one draw of s * code
    total_dev += (gc > 0 ? 1 : -1) * (mean - gc);    // signed by g: a bias in magnitude adds up
    total_var += var / K;
    const double p = std::fabs(gc) / s;
    if (K * p * (1 - p) < 10) continue;
    const double se = std::sqrt(var / K);
    ASSERT_LE(std::fabs(mean - gc), 6 * se) << "element " << i << " g=" << g[i] << " s=" << s;
    z2 += (mean - gc) * (mean - gc) / (se * se);
    ++normal_elems;
  }
  EXPECT_GT(clipped, 0) << "the test gradient should exercise clipping at 2.5 sigma";
  ASSERT_GT(normal_elems, n / 2);
  EXPECT_NEAR(z2 / normal_elems, 1.0, 5 * std::sqrt(2.1 / normal_elems));
  EXPECT_LE(std::fabs(total_dev), 5 * std::sqrt(total_var));
}

// Zero fraction: E[#zeros] = sum(1 - min(|g|/s, 1)), Var = sum p(1-p); within 5 standard deviations.
TEST(TernaryStatistics, ZeroFractionMatchesExpectation) {
  const int64_t n = 100000;
  for (float c : {0.f, 2.5f}) {
    std::vector<float> g = normal_gradient(n, 31);
    const float s = ternary_scaler_cpu(g.data(), n, c);
    std::vector<uint8_t> packed((n + 3) / 4);
    const int64_t zeros = ternary_encode_cpu(g.data(), n, s, philox_key(5, 0), 0, 0, packed.data());
    double expected = 0, var = 0;
    for (float x : g) {
      double p_zero = 1.0 - std::min(1.0, std::fabs(x) / static_cast<double>(s));
      expected += p_zero;
      var += p_zero * (1 - p_zero);
    }
    EXPECT_NEAR(static_cast<double>(zeros), expected, 5 * std::sqrt(var)) << "clip_factor " << c;
  }
}

CompressionPolicy ternary_policy(const std::vector<ParamInfo>& params, bool quantize_logits = true,
                                 int64_t size_to_binarize = 1) {
  CompressionFlags f;
  f.grad_bits = 1;
  f.clip_factor = 2.5f;
  f.quantize_logits = quantize_logits;
  f.size_to_binarize = size_to_binarize;
  return CompressionPolicy(f, params);
}

TEST(GradientCodec, DecodesSummedCodesOfWorkers) {
  const std::vector<ParamInfo> params = {{"a", 13}, {"b", 8}, {"c", 1}};
  GradientCodec codec(ternary_policy(params), 31337);
  const CompressionPolicy& pol = codec.policy();
  ASSERT_EQ(pol.num_ternary(), 3);
  EXPECT_EQ(pol.packed_bytes(), 4 + 2 + 1);
  const int N = 3;
  std::vector<std::vector<std::vector<float>>> g(N);
  std::vector<float> shared(3, 0.f);
  std::vector<std::vector<float>> local(N);
  for (int w = 0; w < N; ++w) {
    for (size_t t = 0; t < params.size(); ++t) g[w].push_back(normal_gradient(params[t].numel, 100 * w + t));
    std::vector<Tensor> views;
    for (auto& v : g[w]) views.push_back(host_tensor(v));
    local[w] = codec.local_scalers(views);
    for (int t = 0; t < 3; ++t) shared[t] = std::max(shared[t], local[w][t]);
  }
  std::vector<uint8_t> gathered(N * pol.packed_bytes());
  std::vector<int8_t> sums(4 * pol.packed_bytes(), 0), codes(4 * pol.packed_bytes());
  for (int w = 0; w < N; ++w) {
    std::vector<Tensor> views;
    for (auto& v : g[w]) views.push_back(host_tensor(v));
    EncodedGradient e;
    codec.encode(views, shared, 9, w, e);
    std::copy(e.packed.begin(), e.packed.end(), gathered.begin() + w * pol.packed_bytes());
    codec.unpack_codes(e.packed.data(), codes.data());
    for (size_t i = 0; i < sums.size(); ++i) sums[i] += codes[i];
  }
  std::vector<std::vector<float>> out_a, out_b;
  for (auto& p : params) {
    out_a.emplace_back(p.numel, -1.f);
    out_b.emplace_back(p.numel, -2.f);
  }
  std::vector<Tensor> va, vb;
  for (auto& v : out_a) va.push_back(host_tensor(v));
  for (auto& v : out_b) vb.push_back(host_tensor(v));
  codec.decode_ternary_sums(sums.data(), shared, N, va);
  codec.decode_ternary_gathered(gathered.data(), shared, N, vb);
  for (size_t t = 0; t < params.size(); ++t) {
    for (int64_t i = 0; i < params[t].numel; ++i) {
      int ref_sum = 0;
      for (int w = 0; w < N; ++w)
        ref_sum += ternarize_one(g[w][t][i], shared[t], philox_key(31337, w), i, 9, static_cast<uint32_t>(t));
      const double ref = static_cast<double>(shared[t]) * ref_sum / N;
      ASSERT_NEAR(out_a[t][i], ref, 1e-6 * std::fabs(ref) + 1e-30) << "tensor " << t << " element " << i;
      ASSERT_EQ(out_a[t][i], out_b[t][i]);
    }
  }
}

TEST(GradientCodec, NonFiniteScalerNamesTensorAndStep) {
  const std::vector<ParamInfo> params = {{"conv1/weights", 8}, {"conv1/biases", 2}};
  GradientCodec codec(ternary_policy(params), 1);
  std::vector<float> a(8, 0.1f), b(2, 0.2f);
  std::vector<Tensor> views = {host_tensor(a), host_tensor(b)};
  EncodedGradient e;
  try {
    codec.encode(views, {1.f, std::numeric_limits<float>::infinity()}, 7, 0, e);
    FAIL() << "expected an error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("conv1/biases"), std::string::npos) << err.what();
    EXPECT_NE(std::string(err.what()).find("step 7"), std::string::npos) << err.what();
  }
}

TEST(GradientCodec, Fp16AndFp32Decode) {
  const std::vector<ParamInfo> params = {{"w", 5}, {"small", 2}, {"logits/weights", 3}, {"logits/biases", 1}};
  CompressionFlags f;
  f.grad_bits = 16;
  f.size_to_binarize = 3;
  GradientCodec codec(CompressionPolicy(f, params), 1);
  const auto& t = codec.policy().tensors();
  EXPECT_EQ(t[0].coding, GradCoding::F16);
  EXPECT_EQ(t[1].coding, GradCoding::F32);  // below size_to_binarize
  EXPECT_EQ(t[2].coding, GradCoding::F32);  // logits, quantize_logits false
  EXPECT_EQ(t[3].coding, GradCoding::F32);
  std::vector<std::vector<float>> g = {{0.1f, -2.f, 3.3f, 1e-3f, 7.f}, {1.f, 2.f}, {3.f, 4.f, 5.f}, {6.f}};
  std::vector<Tensor> views;
  for (auto& v : g) views.push_back(host_tensor(v));
  EncodedGradient e;
  codec.encode(views, {}, 0, 0, e);
  // As if two workers sent the same gradient: the sums are twice the payload.
  std::vector<half_bits> h16(e.f16.size());
  for (size_t i = 0; i < h16.size(); ++i) h16[i] = float_to_half(2.f * half_to_float(e.f16[i]));
  std::vector<float> s32(e.f32.size());
  for (size_t i = 0; i < s32.size(); ++i) s32[i] = 2.f * e.f32[i];
  auto orig = g;
  codec.decode_f16_sum(h16.data(), 2, views);
  codec.decode_f32_sum(s32.data(), 2, views);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(g[0][i], half_to_float(float_to_half(orig[0][i])));
  for (size_t t2 = 1; t2 < 4; ++t2) EXPECT_EQ(g[t2], orig[t2]);
}

TEST(CompressionPolicy, TernaryLayoutAndFilters) {
  const std::vector<ParamInfo> params = {
      {"conv1/weights", 150}, {"conv1/biases", 6}, {"fc/weights", 1001}, {"logits/weights", 50}, {"logits/biases", 10}};
  CompressionPolicy p = ternary_policy(params, /*quantize_logits=*/false, /*size_to_binarize=*/7);
  const auto& t = p.tensors();
  EXPECT_EQ(t[0].coding, GradCoding::Ternary);
  EXPECT_EQ(t[1].coding, GradCoding::F32);  // 6 < 7
  EXPECT_EQ(t[2].coding, GradCoding::Ternary);
  EXPECT_EQ(t[3].coding, GradCoding::F32);  // logits
  EXPECT_EQ(t[4].coding, GradCoding::F32);
  EXPECT_EQ(t[0].offset, 0);
  EXPECT_EQ(t[2].offset, (150 + 3) / 4);  // byte boundary
  EXPECT_EQ(p.packed_bytes(), 38 + 251);
  EXPECT_EQ(t[1].offset, 0);
  EXPECT_EQ(t[3].offset, 6);
  EXPECT_EQ(t[4].offset, 56);
  EXPECT_EQ(p.f32_elements(), 66);
  EXPECT_EQ(t[2].scaler_index, 1);
  CompressionPolicy q = ternary_policy(params, /*quantize_logits=*/true, 1);
  EXPECT_EQ(q.num_ternary(), 5);
  CompressionFlags f32;
  EXPECT_EQ(CompressionPolicy(f32, params).f32_elements(), 150 + 6 + 1001 + 50 + 10);
}

TEST(CompressionPolicy, InvalidFlagsNameTheFlag) {
  auto expect_error = [](CompressionFlags f, const std::string& flag) {
    try {
      f.validate();
      FAIL() << "expected an error for " << flag;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("accepted"), std::string::npos) << e.what();
    }
  };
  CompressionFlags f;
  f.grad_bits = 8;
  expect_error(f, "--grad_bits");
  f = {};
  f.clip_factor = -1.f;
  expect_error(f, "--clip_factor");
  f = {};
  f.size_to_binarize = 0;
  expect_error(f, "--size_to_binarize");
  EXPECT_THROW(CompressionPolicy(f, {{"a", 1}}), Error);
}

#if defined(TG_HAVE_CUDA)
// The CUDA kernels against the CPU loops: codes and decodes bit-identical given the same scaler; the scaler
// itself within float rounding (double partial sums in a different order).
TEST(TernaryCuda, MatchesCpu) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) GTEST_SKIP() << "no CUDA device";
  const int64_t n = 300001;  // not a multiple of 4
  std::vector<float> g = normal_gradient(n, 77);
  g[3] = 0.05f;  // an outlier so that clipping matters
  auto ok = [](cudaError_t e) { ASSERT_EQ(e, cudaSuccess) << cudaGetErrorString(e); };
  float *dg = nullptr, *ds = nullptr, *dout = nullptr;
  uint8_t* dpacked = nullptr;
  int8_t* dcodes = nullptr;
  void* dws = nullptr;
  const int64_t nbytes = (n + 3) / 4;
  ok(cudaMalloc(&dg, n * sizeof(float)));
  ok(cudaMalloc(&ds, sizeof(float)));
  ok(cudaMalloc(&dout, n * sizeof(float)));
  ok(cudaMalloc(&dpacked, 2 * nbytes));
  ok(cudaMalloc(&dcodes, n));
  ok(cudaMalloc(&dws, ternary_scaler_workspace_bytes_cuda()));
  ok(cudaMemcpy(dg, g.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  for (float c : {0.f, 2.5f}) {
    ternary_scaler_cuda(dg, n, c, ds, dws, nullptr);
    float s_gpu = 0.f;
    ok(cudaMemcpy(&s_gpu, ds, sizeof(float), cudaMemcpyDeviceToHost));
    const float s_cpu = ternary_scaler_cpu(g.data(), n, c);
    EXPECT_NEAR(s_gpu, s_cpu, 2e-7 * s_cpu) << "clip_factor " << c;
  }
  const float s = ternary_scaler_cpu(g.data(), n, 2.5f);
  ok(cudaMemcpy(ds, &s, sizeof(float), cudaMemcpyHostToDevice));
  const PhiloxKey k0 = philox_key(5, 0), k1 = philox_key(5, 1);
  ternary_encode_cuda(dg, n, ds, k0, 12, 3, dpacked, nullptr);
  ternary_encode_cuda(dg, n, ds, k1, 12, 3, dpacked + nbytes, nullptr);
  std::vector<uint8_t> gpu_packed(2 * nbytes), cpu_packed(2 * nbytes);
  ok(cudaMemcpy(gpu_packed.data(), dpacked, 2 * nbytes, cudaMemcpyDeviceToHost));
  ternary_encode_cpu(g.data(), n, s, k0, 12, 3, cpu_packed.data());
  ternary_encode_cpu(g.data(), n, s, k1, 12, 3, cpu_packed.data() + nbytes);
  ASSERT_EQ(gpu_packed, cpu_packed);
  // decode from the two gathered buffers, and from int8 sums
  std::vector<float> cpu_out(n), gpu_out(n);
  ternary_decode_gathered_cpu(cpu_packed.data(), nbytes, 2, n, s, cpu_out.data());
  ternary_decode_gathered_cuda(dpacked, nbytes, 2, n, ds, dout, nullptr);
  ok(cudaMemcpy(gpu_out.data(), dout, n * sizeof(float), cudaMemcpyDeviceToHost));
  ASSERT_EQ(gpu_out, cpu_out);
  ternary_unpack_cuda(dpacked, n, dcodes, nullptr);
  std::vector<int8_t> codes(n), cpu_codes(n);
  ok(cudaMemcpy(codes.data(), dcodes, n, cudaMemcpyDeviceToHost));
  ternary_unpack_cpu(cpu_packed.data(), n, cpu_codes.data());
  ASSERT_EQ(codes, cpu_codes);
  ternary_decode_sums_cuda(dcodes, n, ds, 3, dout, nullptr);
  ternary_decode_sums_cpu(cpu_codes.data(), n, s, 3, cpu_out.data());
  ok(cudaMemcpy(gpu_out.data(), dout, n * sizeof(float), cudaMemcpyDeviceToHost));
  ASSERT_EQ(gpu_out, cpu_out);
  for (void* p : {static_cast<void*>(dg), static_cast<void*>(ds), static_cast<void*>(dout), static_cast<void*>(dpacked),
                  static_cast<void*>(dcodes), dws})
    cudaFree(p);
}
#endif  // TG_HAVE_CUDA

}  // namespace
}  // namespace tg

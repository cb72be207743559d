// Tests of the ternary gradient math and codecs: the 2-bit packing format, the one-pass statistics and the
// scaler formula, the definition of the Philox draw (16-bit uniforms, 8 elements per block) and its rounding
// bias bound, the vectorized and threaded CPU loops against the plain per-element definitions (bit for bit,
// tails included, same bits at 1 and 2 threads), statistical unbiasedness and zero fraction (tolerances
// derived from the per-element variance s|g| - g^2 and the documented bias bound), code sums and decoding,
// the compression policy and its flag errors, and the CUDA backend's codec ops against the CPU (SKIPPED without
// a GPU).
#include "terngrad/backend/ternary_codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/random_inputs.h"
#include "src/exchange/schemes/terngrad/ternary_coding.h"
#include "terngrad/backend/backend.h"
#include "terngrad/compress/compression_policy.h"
#include "terngrad/core/buffer.h"
#include "terngrad/core/error.h"
#include "terngrad/core/parallel.h"
#include "terngrad/math/ternary_math.h"

namespace tg {
namespace {

using testing::random_bytes;
std::vector<float> normal_gradient(int64_t n, uint32_t seed, float stddev = 1e-3f) {
  return testing::normal_floats(n, seed, stddev);
}

std::vector<int> encode_codes(const std::vector<float>& g, float s, PhiloxKey key, uint32_t step, uint32_t tensor) {
  const int64_t n = static_cast<int64_t>(g.size());
  std::vector<uint8_t> packed((n + 3) / 4);
  ternary_encode_cpu(g.data(), n, s, key, step, tensor, packed.data());
  std::vector<int> codes(n);
  for (int64_t i = 0; i < n; ++i) codes[i] = unpack_ternary(packed.data(), i);
  return codes;
}

// Population statistics in double, two passes: the oracle of the scaler.
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

// Runs the test body's calls on `n` compute threads and restores the previous count.
class ComputeThreads {
 public:
  explicit ComputeThreads(int n) : saved_(compute_threads()) { set_compute_threads(n); }
  ~ComputeThreads() { set_compute_threads(saved_); }

 private:
  int saved_;
};

template <typename T>
bool same_bits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// Forces one instruction-set path of the CPU loops for a scope, then returns to the best one.
class ForcedIsa {
 public:
  explicit ForcedIsa(CodecIsa isa) : used_(set_ternary_codec_isa(isa)) {}
  ~ForcedIsa() { set_ternary_codec_isa(CodecIsa::kAuto); }
  CodecIsa used() const { return used_; }

 private:
  CodecIsa used_;
};

// ONEDNN_MAX_CPU_ISA (else DNNL_MAX_CPU_ISA) lowers the loops' path as it lowers oneDNN's kernels.
TEST(CodecIsaLimit, FollowsOneDnnsVariable) {
  EXPECT_EQ(onednn_isa_limit(nullptr, nullptr), CodecIsa::kAvx512);
  EXPECT_EQ(onednn_isa_limit("", nullptr), CodecIsa::kAvx512);
  EXPECT_EQ(onednn_isa_limit("ALL", nullptr), CodecIsa::kAvx512);
  EXPECT_EQ(onednn_isa_limit("avx512_core_amx", nullptr), CodecIsa::kAvx512);
  EXPECT_EQ(onednn_isa_limit("AVX2", nullptr), CodecIsa::kAvx2);
  EXPECT_EQ(onednn_isa_limit("AVX2_VNNI", nullptr), CodecIsa::kAvx2);
  EXPECT_EQ(onednn_isa_limit("avx", nullptr), CodecIsa::kGeneric);
  EXPECT_EQ(onednn_isa_limit("SSE41", nullptr), CodecIsa::kGeneric);
  EXPECT_EQ(onednn_isa_limit(nullptr, "AVX2"), CodecIsa::kAvx2);
  EXPECT_EQ(onednn_isa_limit("AVX512_CORE", "AVX2"), CodecIsa::kAvx512);  // the ONEDNN_ name wins
}

// The paths this CPU can run (generic always; AVX2 and AVX-512 where supported).
std::vector<CodecIsa> available_isas() {
  std::vector<CodecIsa> out;
  for (CodecIsa isa : {CodecIsa::kGeneric, CodecIsa::kAvx2, CodecIsa::kAvx512}) {
    ForcedIsa f(isa);
    if (f.used() == isa) out.push_back(isa);
  }
  return out;
}

// The bias bound of the 16-bit uniform (ternary_math.h): |P(code != 0) - |g|/s| <= 2^-17 + 2^-24.
constexpr double kUniformBias = 1.0 / 131072 + 1.0 / 16777216;

// Sizes around every boundary of the fast paths: bytes (4), Philox blocks (8), decode steps (64), encode
// units (128), and some larger ones.
const std::vector<int64_t> kTailSizes = {1,  2,  3,  4,   5,   7,   8,   9,   15,  16,  17,   31,   32,    33,
                                         63, 64, 65, 127, 128, 129, 255, 256, 257, 383, 1001, 4097, 100003};

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
  std::vector<int64_t> sizes = kTailSizes;
  sizes.insert(sizes.begin(), 0);
  for (int64_t n : sizes) {
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
    std::vector<int8_t> unpacked(n + 8, 99);  // guard bytes after the output
    ternary_unpack_cpu(packed.data(), n, unpacked.data());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(unpacked[i], codes[i]) << "n=" << n << " i=" << i;
    for (int64_t i = n; i < n + 8; ++i) ASSERT_EQ(unpacked[i], 99) << "unpack wrote past n=" << n;
    if (n % 4) {
      EXPECT_EQ(packed.back() >> (2 * (n % 4)), 0) << "padding fields must be 00, n=" << n;
    }
  }
}

TEST(TernaryPack, UnpackReadsField11AsZeroAndMatchesDefinition) {
  for (CodecIsa isa : available_isas()) {
    for (int64_t n : kTailSizes) {
      ForcedIsa forced(isa);
      SCOPED_TRACE(enum_name(isa));
      const std::vector<uint8_t> packed = random_bytes((n + 3) / 4, 3 + n);  // every byte value, 11 fields too
      std::vector<int8_t> codes(n);
      ternary_unpack_cpu(packed.data(), n, codes.data());
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(codes[i], unpack_ternary(packed.data(), i)) << "n=" << n << " i=" << i;
    }
  }
}

// ---- the draw ------------------------------------------------------------------------------------------------

TEST(TernaryDraw, BlockAndHalvesAreTheDocumentedOnes) {
  const PhiloxKey key = philox_key(2024, 7);
  for (uint64_t b : {uint64_t{0}, uint64_t{1}, uint64_t{12345}, (uint64_t{1} << 32) + 5, (uint64_t{3} << 32) + 1}) {
    // counter (low 32 bits of the block, step, tensor ^ high 32 bits of the block, kTernaryPurpose)
    const Philox4x32 want = philox4x32_10(
        Philox4x32{{static_cast<uint32_t>(b), 42u, 9u ^ static_cast<uint32_t>(b >> 32), kTernaryPurpose}}, key);
    const Philox4x32 got = ternary_block(key, b, 42, 9);
    for (int j = 0; j < 4; ++j) ASSERT_EQ(got.v[j], want.v[j]) << "block " << b;
    for (int j = 0; j < 4; ++j) {
      EXPECT_EQ(ternary_half(got, 2 * j), want.v[j] & 0xFFFFu);  // element 8b + 2j: low half of word j
      EXPECT_EQ(ternary_half(got, 2 * j + 1), want.v[j] >> 16);  // element 8b + 2j + 1: high half
    }
  }
  // ternarize_one: u = (h + 0.5) * 2^-16 and code = sign(g) if u * s < |g| (element 8 * 12345 + 5: word 2, high)
  const uint64_t i = 8 * 12345 + 5;
  const uint32_t h = ternary_block(key, 12345, 42, 9).v[2] >> 16;
  const float u = (static_cast<float>(h) + 0.5f) / 65536.f;
  EXPECT_EQ(ternary_uniform16(h), u);
  EXPECT_GT(u, 0.f);
  EXPECT_LT(u, 1.f);
  const float s = 1.f;
  for (float g : {u * 0.999f, u * 1.001f, -u * 1.001f, -u * 0.999f, 0.f, 2.f, -2.f}) {
    const int want = (u * s < std::fabs(g)) ? (g > 0 ? 1 : -1) : 0;
    EXPECT_EQ(ternarize_one(g, s, key, i, 42, 9), want) << "g=" << g;
  }
}

// The uniform's rounding bias, exhaustively over the 65536 values of h, through the product's
// ternarize_with_uniform: for |g| < s the probability of a non-zero code differs from |g|/s by at most 2^-17 + 2^-24
// (ternary_math.h), for scalers of very different magnitudes and for |g|/s at and next to the rounding midpoints (k +
// 1/2) / 65536.
TEST(TernaryDraw, RoundingBiasWithinDocumentedBound) {
  std::vector<float> ratios;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> r01(0.f, 1.f);
  for (int k = 0; k < 200; ++k) ratios.push_back(r01(rng));
  for (int k : {0, 1, 2, 100, 32767, 65534, 65535}) {
    const float mid = (k + 0.5f) / 65536.f;
    ratios.push_back(mid);
    ratios.push_back(std::nextafter(mid, 0.f));
    ratios.push_back(std::nextafter(mid, 1.f));
  }
  for (float s : {1.f, 3.7e-3f, 2.5e-7f, 6.1e4f}) {
    for (float p : ratios) {
      const float g = p * s;
      if (!(g < s)) continue;
      int64_t kept = 0;
      for (uint32_t h = 0; h < 65536; ++h) kept += ternarize_with_uniform(g, s, ternary_uniform16(h)) == 1;
      const double prob = kept / 65536.0, exact = static_cast<double>(g) / s;
      ASSERT_LE(std::fabs(prob - exact), kUniformBias) << "s=" << s << " g=" << g;
    }
    // and |g| >= s always keeps its sign: u < 1 and u * s rounds below s
    for (uint32_t h : {0u, 32768u, 65535u}) {
      EXPECT_EQ(ternarize_with_uniform(s, s, ternary_uniform16(h)), 1);
      EXPECT_EQ(ternarize_with_uniform(-s, s, ternary_uniform16(h)), -1);
    }
  }
}

// ---- encode ------------------------------------------------------------------------------------------------

// The vectorized, threaded encode (every path, 1 and 2 threads) against ternarize_one, element by element, at
// every tail size; the shared block function (the CUDA kernel's) too; zero counts; padding fields 00; nothing
// written past ceil(n/4).
TEST(TernaryEncode, FastPathMatchesPerElementDefinition) {
  const PhiloxKey key = philox_key(1234, 3);
  for (CodecIsa isa : available_isas()) {
    for (int threads : {1, 2}) {
      ForcedIsa forced(isa);
      ComputeThreads ct(threads);
      SCOPED_TRACE(enum_name(isa));
      for (int64_t n : kTailSizes) {
        std::vector<float> g = normal_gradient(n, 11 + n);
        g[0] = 0.f;     // exact zero stays zero
        if (n > 200) {  // special values inside a vector unit and in the tail
          g[5] = -0.f;
          g[6] = std::numeric_limits<float>::infinity();
          g[7] = -std::numeric_limits<float>::infinity();
          g[8] = std::numeric_limits<float>::quiet_NaN();
          g[9] = std::numeric_limits<float>::denorm_min();
          g[n - 1] = std::numeric_limits<float>::quiet_NaN();
          g[n - 2] = -std::numeric_limits<float>::infinity();
        }
        const float s = 1.5e-3f;
        const int64_t nbytes = (n + 3) / 4;
        std::vector<uint8_t> packed(nbytes + 4, 0x5A);  // guard bytes after the output
        const int64_t zeros = ternary_encode_cpu(g.data(), n, s, key, 42, 5, packed.data());
        int64_t counted = 0;
        for (int64_t i = 0; i < n; ++i) {
          const int want = ternarize_one(g[i], s, key, i, 42, 5);
          ASSERT_EQ(unpack_ternary(packed.data(), i), want) << "n=" << n << " i=" << i << " threads=" << threads;
          counted += want == 0;
        }
        EXPECT_EQ(zeros, counted) << "n=" << n;
        EXPECT_EQ(unpack_ternary(packed.data(), 0), 0);
        if (n % 4) {
          EXPECT_EQ(packed[nbytes - 1] >> (2 * (n % 4)), 0) << "padding fields must be 00, n=" << n;
        }
        for (int64_t b = nbytes; b < nbytes + 4; ++b) ASSERT_EQ(packed[b], 0x5A) << "encode wrote past n=" << n;
        for (int64_t b = 0; b < (n + 7) / 8; ++b) {
          const uint32_t bits = ternarize_pack_block(g.data(), n, b, s, key, 42, 5);
          for (int e = 0; e < 8; ++e) {
            const int64_t i = 8 * b + e;
            ASSERT_EQ(ternary_code_of_field(bits >> (2 * e)), i < n ? ternarize_one(g[i], s, key, i, 42, 5) : 0);
          }
        }
      }
    }
  }
}

// Scalers below 2^-100 (where s * 2^-16 would lose bits) take the exact generic rule on every path.
TEST(TernaryEncode, TinyScalersFollowTheDefinition) {
  const int64_t n = 5003;
  std::vector<float> g = normal_gradient(n, 91, 1e-36f);  // subnormal and tiny normal values
  for (CodecIsa isa : available_isas()) {
    ForcedIsa forced(isa);
    for (float s : {ternary_scaler_cpu(g.data(), n, 2.5f), 0x1p-100f, 1e-44f}) {
      const std::vector<int> codes = encode_codes(g, s, philox_key(8, 2), 1, 1);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(codes[i], ternarize_one(g[i], s, philox_key(8, 2), i, 1, 1))
            << enum_name(isa) << " s=" << s << " i=" << i;
    }
  }
}

TEST(TernaryEncode, ZeroOrNaNScalerGivesAllZeros) {
  for (int64_t n : {1001, 100003}) {
    std::vector<float> g = normal_gradient(n, 8);
    for (float s : {0.f, -1.f, std::numeric_limits<float>::quiet_NaN()}) {
      std::vector<uint8_t> packed((n + 3) / 4, 0xFF);
      EXPECT_EQ(ternary_encode_cpu(g.data(), n, s, philox_key(1, 0), 0, 0, packed.data()), n);
      for (uint8_t byte : packed) ASSERT_EQ(byte, 0) << "s=" << s;
      for (int64_t i = 0; i < n; i += 97) ASSERT_EQ(ternarize_one(g[i], s, philox_key(1, 0), i, 0, 0), 0);
    }
  }
  // Empty tensors: nothing to do.
  EXPECT_EQ(ternary_encode_cpu(nullptr, 0, 1.f, philox_key(1, 0), 0, 0, nullptr), 0);
  ternary_decode_gathered_cpu(nullptr, 0, 2, 0, 1.f, nullptr);
  ternary_sum_codes_cpu(nullptr, 0, 2, 0, nullptr);
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

// ---- every path, every thread count -------------------------------------------------------------------------

// Every path (AVX-512, AVX2, generic) at 1 and 2 threads gives the same bits: statistics and scaler, codes and
// zero counts, code sums, unpacked codes, both decodes. The sizes split into several chunks per thread (the
// largest into 1099 statistics chunks: the pairwise combination over a padded power of two). The output says which
// paths ran.
TEST(TernaryCpu, SameBitsOnEveryPathAndThreadCount) {
  const std::vector<CodecIsa> isas = available_isas();
  std::string names;
  for (CodecIsa isa : isas) names += std::string(" ") + enum_name(isa);
  RecordProperty("instruction_sets", names);
  std::printf("instruction sets tested:%s\n", names.c_str());
  for (int64_t n : {int64_t{1}, int64_t{31}, int64_t{33}, int64_t{16384 + 77}, int64_t{300007}, int64_t{4500001}}) {
    std::vector<float> g = normal_gradient(n, 61 + n);
    const int64_t nbytes = (n + 3) / 4;
    const std::vector<uint8_t> gathered = random_bytes(5 * nbytes, 67);
    struct Out {
      TensorStats st;
      float s = 0.f;
      std::vector<uint8_t> packed;
      int64_t zeros = 0;
      std::vector<int8_t> sums, codes;
      std::vector<float> dec, dec_sums;
    };
    std::vector<Out> outs;
    std::vector<std::string> labels;
    for (CodecIsa isa : isas) {
      for (int threads : {1, 2}) {
        ForcedIsa forced(isa);
        ComputeThreads ct(threads);
        Out o;
        o.st = tensor_stats_cpu(g.data(), n);
        o.s = ternary_scaler_cpu(g.data(), n, 2.5f);
        o.packed.resize(nbytes);
        o.zeros = ternary_encode_cpu(g.data(), n, 1.5e-3f, philox_key(3, 1), 9, 4, o.packed.data());
        o.sums.resize(n);
        o.codes.resize(n);
        o.dec.resize(n);
        o.dec_sums.resize(n);
        ternary_sum_codes_cpu(gathered.data(), nbytes, 5, n, o.sums.data());
        ternary_unpack_cpu(gathered.data(), n, o.codes.data());
        ternary_decode_gathered_cpu(gathered.data(), nbytes, 5, n, 0.7f, o.dec.data());
        ternary_decode_sums_cpu(o.sums.data(), n, 0.7f, 5, o.dec_sums.data());
        outs.push_back(std::move(o));
        labels.push_back(std::string(enum_name(isa)) + "/" + std::to_string(threads) + " threads");
      }
    }
    for (size_t k = 1; k < outs.size(); ++k) {
      const Out &a = outs[0], &b = outs[k];
      SCOPED_TRACE(labels[k] + " vs " + labels[0] + ", n=" + std::to_string(n));
      EXPECT_TRUE(same_bits(a.st.sum, b.st.sum) && same_bits(a.st.sumsq, b.st.sumsq) &&
                  same_bits(a.st.max_abs, b.st.max_abs) && same_bits(a.st.sigma, b.st.sigma) && same_bits(a.s, b.s));
      EXPECT_EQ(a.packed, b.packed);
      EXPECT_EQ(a.zeros, b.zeros);
      EXPECT_EQ(a.sums, b.sums);
      EXPECT_EQ(a.codes, b.codes);
      EXPECT_EQ(0, std::memcmp(a.dec.data(), b.dec.data(), n * sizeof(float)));
      EXPECT_EQ(0, std::memcmp(a.dec_sums.data(), b.dec_sums.data(), n * sizeof(float)));
    }
  }
}

// ---- statistics and scaler ---------------------------------------------------------------------------------

TEST(TernaryStats, OnePassMatchesDoubleReferenceAtEverySize) {
  for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{15}, int64_t{16}, int64_t{17}, int64_t{16383}, int64_t{16385},
                    int64_t{1000003}, int64_t{4194305}}) {
    std::vector<float> g = normal_gradient(n, 13 + n);
    for (auto& x : g) x += 2e-4f;  // a mean of 0.2 sigma
    long double sum = 0, sumsq = 0;
    float mx = 0.f;
    for (float x : g) {
      sum += x;
      sumsq += static_cast<long double>(x) * x;
      mx = std::max(mx, std::fabs(x));
    }
    double sigma_ref, max_ref;
    reference_stats(g, &sigma_ref, &max_ref);
    const TensorStats st = tensor_stats_cpu(g.data(), n);
    // Double sums of n terms: error below n * 2^-53 * sum|x| (a loose bound; blocked sums do far better).
    long double abs_sum = 0;
    for (float x : g) abs_sum += std::fabs(x);
    EXPECT_NEAR(st.sum, static_cast<double>(sum), 1.2e-16 * n * static_cast<double>(abs_sum)) << "n=" << n;
    EXPECT_NEAR(st.sumsq, static_cast<double>(sumsq), 1.2e-16 * n * static_cast<double>(sumsq)) << "n=" << n;
    EXPECT_EQ(st.max_abs, mx) << "n=" << n;
    EXPECT_EQ(st.mean, st.sum / n);
    EXPECT_NEAR(st.sigma, sigma_ref, 1e-9 * sigma_ref + 1e-300) << "n=" << n;
  }
}

// The documented cancellation limit: sigma stays float-accurate with |mean| = 300 sigma.
TEST(TernaryStats, OnePassSigmaAccurateFarFromZeroMean) {
  const int64_t n = 1 << 20;
  std::vector<float> g = normal_gradient(n, 17, 1.f);
  for (auto& x : g) x += 300.f;
  double sigma_ref, max_ref;
  reference_stats(g, &sigma_ref, &max_ref);
  const TensorStats st = tensor_stats_cpu(g.data(), n);
  EXPECT_NEAR(st.sigma, sigma_ref, 6e-8 * sigma_ref);
}

TEST(TernaryStats, NaNAndInfPropagate) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (int64_t n : {3, 40, 100003}) {
    for (int64_t at : {int64_t{0}, n / 2, n - 1}) {  // in the vector lanes and in the tails
      std::vector<float> g = normal_gradient(n, 19);
      g[at] = inf;
      TensorStats st = tensor_stats_cpu(g.data(), n);
      EXPECT_EQ(st.max_abs, inf) << "n=" << n << " at=" << at;
      EXPECT_TRUE(std::isnan(st.sigma));
      g[at] = -inf;
      EXPECT_EQ(tensor_stats_cpu(g.data(), n).max_abs, inf);
      g[at] = nan;
      st = tensor_stats_cpu(g.data(), n);
      EXPECT_TRUE(std::isnan(st.max_abs)) << "n=" << n << " at=" << at;
      EXPECT_TRUE(std::isnan(st.sigma));
      g[at] = -nan;
      EXPECT_TRUE(std::isnan(tensor_stats_cpu(g.data(), n).max_abs));
      g[n - 1 - at] = inf;  // NaN and Inf: NaN wins wherever they are
      g[at] = nan;
      EXPECT_TRUE(std::isnan(tensor_stats_cpu(g.data(), n).max_abs)) << "n=" << n << " at=" << at;
      for (float c : {0.f, 2.5f}) EXPECT_TRUE(std::isnan(ternary_scaler_cpu(g.data(), n, c)));
    }
  }
}

TEST(TernaryScaler, NoClipIsMaxAbs) {
  std::vector<float> g = {0.5f, -3.f, 1.f, 2.f};
  EXPECT_EQ(ternary_scaler_cpu(g.data(), 4, 0.f), 3.f);
  EXPECT_EQ(ternary_scaler_cpu(g.data(), 0, 0.f), 0.f);  // empty tensor
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

TEST(TernaryScaler, NonFiniteGradientGivesNaNScaler) {
  std::vector<float> g = {1.f, std::numeric_limits<float>::quiet_NaN(), 2.f};
  EXPECT_TRUE(std::isnan(ternary_scaler_cpu(g.data(), 3, 0.f)));
  EXPECT_TRUE(std::isnan(ternary_scaler_cpu(g.data(), 3, 2.5f)));
  g[1] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(std::isnan(ternary_scaler_cpu(g.data(), 3, 0.f)));
  EXPECT_TRUE(std::isnan(ternary_scaler_cpu(g.data(), 3, 2.5f)));
  // the shared formula itself
  EXPECT_TRUE(std::isnan(ternary_scaler_from_stats(1.0, std::numeric_limits<float>::infinity(), 2.5f)));
  EXPECT_TRUE(std::isnan(ternary_scaler_from_stats(std::numeric_limits<double>::quiet_NaN(), 1.f, 0.f)));
  EXPECT_EQ(ternary_scaler_from_stats(0.1, 1.f, 2.5f), ternary_scaler(0.1f, 1.f, 2.5f));
  EXPECT_EQ(ternary_sigma_from_sums(2.0, 0.9, 4), 0.0);  // sumsq/n - mean^2 < 0 (by rounding): 0, not NaN
}

// ---- statistics of the codes ---------------------------------------------------------------------------------

// E[s * code] = clip(g, -s, s) =: gc up to the uniform's rounding bias b = s * (2^-17 + 2^-24) per element
// (ternary_math.h), Var = s|gc| - gc^2 (+ O(b)). Over K encodings (steps 0..K-1):
//  - clipped elements (|g| >= s) are always exactly +-s;
//  - every element whose count of non-zero codes is near normal (K p (1-p) >= 10, p = |gc|/s) lies within
//    6 standard errors + b, and the mean of their squared z-scores is 1 within 5 of its standard errors
//    (Var z^2 = 2 + (1 - 6pq)/(Kpq) <= 2.1; b shifts each z by at most b/se < 0.002, negligible): this checks
//    the variance too, not only the mean;
//  - the sum of the deviations (signed by g) over all random elements is within 5 of its standard errors
//    + (their number) * b (catches a small bias in magnitude shared by all elements, including those with rare
//    non-zero codes).
TEST(TernaryStatistics, UnbiasedWithinStandardErrors) {
  const int64_t n = 2048;
  const int K = 1600;
  std::vector<float> g = normal_gradient(n, 21);
  const float s = ternary_scaler_cpu(g.data(), n, 2.5f);  // some elements are clipped
  const double bias = s * kUniformBias;
  const PhiloxKey key = philox_key(2017, 4);
  std::vector<double> sum(n, 0.0);
  std::vector<uint8_t> packed((n + 3) / 4);
  for (int k = 0; k < K; ++k) {
    ternary_encode_cpu(g.data(), n, s, key, static_cast<uint32_t>(k), 0, packed.data());
    for (int64_t i = 0; i < n; ++i) sum[i] += s * unpack_ternary(packed.data(), i);
  }
  int64_t clipped = 0, normal_elems = 0, random_elems = 0;
  double z2 = 0.0, total_dev = 0.0, total_var = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double gc = std::max<double>(-s, std::min<double>(s, g[i]));
    const double mean = sum[i] / K;
    if (std::fabs(g[i]) >= s) {
      ++clipped;
      ASSERT_EQ(mean, s * (g[i] > 0 ? 1.0 : -1.0)) << "clipped element " << i << " must always be +-s";
      continue;
    }
    ++random_elems;
    const double var = s * std::fabs(gc) - gc * gc;  // of one draw of s * code
    total_dev += (gc > 0 ? 1 : -1) * (mean - gc);    // signed by g: a bias in magnitude adds up
    total_var += var / K;
    const double p = std::fabs(gc) / s;
    if (K * p * (1 - p) < 10) continue;
    const double se = std::sqrt(var / K);
    ASSERT_LE(std::fabs(mean - gc), 6 * se + bias) << "element " << i << " g=" << g[i] << " s=" << s;
    z2 += (mean - gc) * (mean - gc) / (se * se);
    ++normal_elems;
  }
  EXPECT_GT(clipped, 0) << "the test gradient should exercise clipping at 2.5 sigma";
  ASSERT_GT(normal_elems, n / 2);
  EXPECT_NEAR(z2 / normal_elems, 1.0, 5 * std::sqrt(2.1 / normal_elems));
  EXPECT_LE(std::fabs(total_dev), 5 * std::sqrt(total_var) + random_elems * bias);
}

// Zero fraction: E[#zeros] = sum(1 - min(|g|/s, 1)) up to the bias bound per element, Var = sum p(1-p);
// within 5 standard deviations + n * (2^-17 + 2^-24).
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
    EXPECT_NEAR(static_cast<double>(zeros), expected, 5 * std::sqrt(var) + n * kUniformBias) << "clip_factor " << c;
  }
}

// ---- code sums and decoding -----------------------------------------------------------------------------------

// The plain definitions, element by element.
int reference_code_sum(const std::vector<uint8_t>& gathered, int64_t stride, int num_workers, int64_t i) {
  int sum = 0;
  for (int w = 0; w < num_workers; ++w) sum += unpack_ternary(gathered.data() + w * stride, i);
  return sum;
}

TEST(TernaryDecode, GatheredAndSumsMatchPlainDefinition) {
  const float s = 3.25e-3f;
  for (CodecIsa isa : available_isas()) {
    for (int num_workers : {1, 2, 3, 7, 127, 128, 130}) {
      ForcedIsa forced(isa);
      SCOPED_TRACE(enum_name(isa));
      for (int64_t n : {int64_t{1}, int64_t{5}, int64_t{63}, int64_t{64}, int64_t{65}, int64_t{129}, int64_t{1001},
                        int64_t{70001}}) {
        if (num_workers > 7 && n > 1001) continue;                // keeps the test short
        const int64_t nbytes = (n + 3) / 4, stride = nbytes + 3;  // a gap between the workers' blocks
        const std::vector<uint8_t> gathered = random_bytes(stride * num_workers, 7 * n + num_workers);
        std::vector<float> out(n + 4, -7.f);
        ternary_decode_gathered_cpu(gathered.data(), stride, num_workers, n, s, out.data());
        for (int64_t i = 0; i < n; ++i) {
          const float want = ternary_decode_value(s, reference_code_sum(gathered, stride, num_workers, i), num_workers);
          ASSERT_TRUE(same_bits(out[i], want)) << "workers=" << num_workers << " n=" << n << " i=" << i;
        }
        for (int64_t i = n; i < n + 4; ++i) ASSERT_EQ(out[i], -7.f) << "decode wrote past n";
        if (num_workers > 127) {
          std::vector<int8_t> sums(n);
          EXPECT_THROW(ternary_sum_codes_cpu(gathered.data(), stride, num_workers, n, sums.data()), Error);
          continue;
        }
        std::vector<int8_t> sums(n + 4, 99);
        ternary_sum_codes_cpu(gathered.data(), stride, num_workers, n, sums.data());
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(sums[i], reference_code_sum(gathered, stride, num_workers, i)) << "workers=" << num_workers;
        for (int64_t i = n; i < n + 4; ++i) ASSERT_EQ(sums[i], 99) << "code sums wrote past n";
        std::vector<float> from_sums(n);
        ternary_decode_sums_cpu(sums.data(), n, s, num_workers, from_sums.data());
        for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(same_bits(from_sums[i], out[i])) << "i=" << i;
      }
    }
  }
}

// Decodes of more than 32 MiB into 64-byte aligned outputs (as slab tensors are) take the streaming-store
// path: the same values, nothing written past n.
TEST(TernaryDecode, LargeAlignedOutputMatchesPlainDefinition) {
  const int64_t n = 8 * (int64_t{1} << 20) + 77, nbytes = (n + 3) / 4;
  const std::vector<uint8_t> gathered = random_bytes(2 * nbytes, 71);
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  const int64_t padded = (n + 16 + 15) / 16 * 16;
  std::unique_ptr<float[], Free> out(static_cast<float*>(std::aligned_alloc(64, padded * sizeof(float))));
  ASSERT_TRUE(out);
  for (CodecIsa isa : available_isas()) {
    for (int threads : {1, 2}) {
      ForcedIsa forced(isa);
      ComputeThreads ct(threads);
      std::fill(out.get(), out.get() + padded, -3.f);
      ternary_decode_gathered_cpu(gathered.data(), nbytes, 2, n, 0.125f, out.get());
      for (int64_t i = 0; i < n; ++i) {
        const float want = ternary_decode_value(0.125f, reference_code_sum(gathered, nbytes, 2, i), 2);
        ASSERT_TRUE(same_bits(out[i], want)) << enum_name(isa) << " threads=" << threads << " i=" << i;
      }
      for (int64_t i = n; i < padded; ++i) ASSERT_EQ(out[i], -3.f) << "decode wrote past n";
    }
  }
}

// Error feedback's fused passes (g += r inside the statistics, residuals written by the encode) on every path and
// thread count, against the unfused definition: g + r added plainly, ternary_scaler_cpu of it, the codes of
// ternary_encode_cpu without a residual, r = (g + r) - s * code written out. The largest size is a 64-byte aligned
// residual of more than 32 MiB (the encode writes it with streaming stores); tiny scalers take the generic path.
TEST(TernaryCpu, ErrorFeedbackPassesMatchTheUnfusedDefinition) {
  constexpr float kNaNf = std::numeric_limits<float>::quiet_NaN(), kInff = std::numeric_limits<float>::infinity();
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  for (int64_t n : {int64_t{1}, int64_t{33}, int64_t{16384 + 77}, int64_t{300007}, 8 * (int64_t{1} << 20) + 77}) {
    const bool large = n > 1000000;
    std::vector<float> g = normal_gradient(n, 81 + static_cast<uint32_t>(n)), r = normal_gradient(n, 7, 4e-4f);
    for (int64_t i = 0; i < n; i += 11) g[i] = -0.f, r[i] = -0.f;  // -0 + -0 = -0, and a zero code keeps it
    std::vector<float> gp(n);
    for (int64_t i = 0; i < n; ++i) gp[i] = g[i] + r[i];
    const float s_ref = ternary_scaler_cpu(gp.data(), n, 2.5f);
    const int64_t padded = (n + 15) / 16 * 16;
    std::unique_ptr<float[], Free> res(static_cast<float*>(std::aligned_alloc(64, padded * sizeof(float))));
    ASSERT_TRUE(res);
    for (CodecIsa isa : available_isas()) {
      for (int threads : {1, 2}) {
        ForcedIsa forced(isa);
        ComputeThreads ct(threads);
        SCOPED_TRACE(std::string(enum_name(isa)) + " threads=" + std::to_string(threads) + " n=" + std::to_string(n));
        std::vector<float> g2 = g;
        const float s = ternary_scaler_with_adds_cpu(g2.data(), nullptr, 0.f, r.data(), n, 2.5f);
        ASSERT_TRUE(same_bits(s, s_ref));
        ASSERT_EQ(0, std::memcmp(g2.data(), gp.data(), n * sizeof(float))) << "g + r";
        for (float sv : large ? std::vector<float>{s} : std::vector<float>{s, 1e-44f, 0.f, kNaNf, kInff}) {
          std::vector<uint8_t> want((n + 3) / 4), got((n + 3) / 4);
          const int64_t want_zeros = ternary_encode_cpu(gp.data(), n, sv, philox_key(4, 2), 8, 3, want.data());
          std::fill(res.get(), res.get() + padded, -7.f);
          EXPECT_EQ(ternary_encode_cpu(gp.data(), n, sv, philox_key(4, 2), 8, 3, got.data(), res.get()), want_zeros);
          ASSERT_EQ(got, want) << "s=" << sv;
          for (int64_t i = 0; i < n; ++i) {
            const float w = gp[i] - sv * static_cast<float>(unpack_ternary(want.data(), i));
            ASSERT_TRUE(same_bits(res[i], w) || (std::isnan(res[i]) && std::isnan(w)))
                << "s=" << sv << " i=" << i << ": " << res[i] << " vs " << w;
          }
          for (int64_t i = n; i < padded; ++i) ASSERT_EQ(res[i], -7.f) << "the encode wrote a residual past n";
        }
      }
    }
  }
}

// Weight decay in the scalers' pass: g = (g + decay * w) + r (residual optional) and the scaler of the new g, the
// same bits as the axpy loop (the product rounded first), the add and ternary_scaler_cpu one after another; every
// ISA, 1 and 2 threads, sizes with tails, signed zeros and a non-finite weight.
TEST(TernaryCpu, WeightDecayPassMatchesTheUnfusedDefinition) {
  constexpr float kInff = std::numeric_limits<float>::infinity();
  for (int64_t n : {int64_t{1}, int64_t{33}, int64_t{16384 + 77}, int64_t{300007}, 8 * (int64_t{1} << 20) + 77}) {
    std::vector<float> g = normal_gradient(n, 91 + static_cast<uint32_t>(n)), r = normal_gradient(n, 17, 4e-4f),
                       w = normal_gradient(n, 23, 0.05f);
    for (int64_t i = 0; i < n; i += 13) g[i] = -0.f, w[i] = -0.f, r[i] = -0.f;
    for (bool residual : {false, true}) {
      for (bool infinite : {false, true}) {
        if (infinite && n < 33) continue;
        std::vector<float> wv = w;
        if (infinite) wv[n / 2] = kInff;
        const float decay = 5e-4f;
        std::vector<float> want = g;
        for (int64_t i = 0; i < n; ++i) want[i] += decay * wv[i];  // Backend::axpy's loop
        if (residual)
          for (int64_t i = 0; i < n; ++i) want[i] = want[i] + r[i];
        const float s_ref = ternary_scaler_cpu(want.data(), n, 2.5f);
        for (CodecIsa isa : available_isas()) {
          for (int threads : {1, 2}) {
            ForcedIsa forced(isa);
            ComputeThreads ct(threads);
            SCOPED_TRACE(std::string(enum_name(isa)) + " threads=" + std::to_string(threads) +
                         " n=" + std::to_string(n) + " residual=" + std::to_string(residual) +
                         " infinite=" + std::to_string(infinite));
            std::vector<float> got = g;
            const float s =
                ternary_scaler_with_adds_cpu(got.data(), wv.data(), decay, residual ? r.data() : nullptr, n, 2.5f);
            ASSERT_TRUE(same_bits(s, s_ref)) << s << " vs " << s_ref;
            ASSERT_EQ(0, std::memcmp(got.data(), want.data(), n * sizeof(float))) << "g + decay * w (+ r)";
            if (infinite) {
              EXPECT_TRUE(std::isnan(s)) << "an infinite gradient gives a NaN scaler";
            }
          }
        }
      }
    }
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

// The host check of the shared scalers (SharedScalers runs it on the CPU after the all-reduce MAX): an error
// naming the tensor and the step; finite scalers pass.
TEST(TernaryCoding, NonFiniteScalerNamesTensorAndStep) {
  const std::vector<ParamInfo> params = {{"conv1/weights", 8}, {"conv1/biases", 2}};
  const CompressionPolicy policy = ternary_policy(params);
  const TernaryCoding coding(policy, 1);
  const std::vector<float> good = {1.f, 0.5f}, bad = {1.f, std::numeric_limits<float>::infinity()};
  EXPECT_NO_THROW(coding.check_scalers(good.data(), policy.all(), 7));
  EXPECT_NO_THROW(coding.check_scalers(bad.data(), {0, 1}, 7)) << "conv1/biases is outside the range";
  try {
    coding.check_scalers(bad.data(), policy.all(), 7);
    FAIL() << "expected an error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("conv1/biases"), std::string::npos) << err.what();
    EXPECT_NE(std::string(err.what()).find("step 7"), std::string::npos) << err.what();
  }
}

TEST(CompressionPolicy, Fp16KeepsSmallAndLogitsTensorsFp32) {
  const std::vector<ParamInfo> params = {{"w", 5}, {"small", 2}, {"logits/weights", 3}, {"logits/biases", 1}};
  CompressionFlags f;
  f.grad_bits = 16;
  f.size_to_binarize = 3;
  const CompressionPolicy policy(f, params);
  const auto& t = policy.tensors();
  EXPECT_EQ(t[0].coding, GradCoding::kF16);
  EXPECT_EQ(t[1].coding, GradCoding::kF32);  // below size_to_binarize
  EXPECT_EQ(t[2].coding, GradCoding::kF32);  // logits, quantize_logits false
  EXPECT_EQ(t[3].coding, GradCoding::kF32);
  EXPECT_EQ(policy.f16_elements(), 5);
  EXPECT_EQ(policy.f32_elements(), 6);
  EXPECT_EQ(t[3].offset, 5) << "fp32 tensors back to back in policy order";
}

TEST(CompressionPolicy, TernaryLayoutAndFilters) {
  const std::vector<ParamInfo> params = {
      {"conv1/weights", 150}, {"conv1/biases", 6}, {"fc/weights", 1001}, {"logits/weights", 50}, {"logits/biases", 10}};
  CompressionPolicy p = ternary_policy(params, /*quantize_logits=*/false, /*size_to_binarize=*/7);
  const auto& t = p.tensors();
  EXPECT_EQ(t[0].coding, GradCoding::kTernary);
  EXPECT_EQ(t[1].coding, GradCoding::kF32);  // 6 < 7
  EXPECT_EQ(t[2].coding, GradCoding::kTernary);
  EXPECT_EQ(t[3].coding, GradCoding::kF32);  // logits
  EXPECT_EQ(t[4].coding, GradCoding::kF32);
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
  // The checks of the compression flag table (compression_flags()), the same as the command line's.
  auto expect_error = [](CompressionFlags f, const std::string& message) {
    try {
      f.validate();
      FAIL() << "expected: " << message;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), message);
    }
  };
  CompressionFlags f;
  f.grad_bits = 8;
  expect_error(f, "--grad_bits 8 is not one of 1 (TernGrad), 16 (fp16), 32 (fp32)");
  f = {};
  f.clip_factor = -1.f;
  expect_error(f, "--clip_factor -1 must be >= 0 (0: no clipping)");
  f = {};
  f.size_to_binarize = 0;
  expect_error(f, "--size_to_binarize 0 must be at least 1");
  EXPECT_THROW(CompressionPolicy(f, {{"a", 1}}), Error);
}

// The CUDA backend's codec ops against the CPU loops: scalers, codes, code sums and decodes bit-identical (the
// scaler's double sums are added in one fixed order on both devices). SKIPPED without a CUDA build or device;
// tests/codec_ops_test.cc runs every codec op on both backends.
TEST(TernaryCuda, MatchesCpu) {
  if (!cuda_backend_compiled()) GTEST_SKIP() << "this build has no CUDA backend (configure with -DTG_CUDA=ON)";
  std::unique_ptr<Backend> gpu;
  try {
    gpu = make_backend("cuda:0");
  } catch (const Error& e) {
    GTEST_SKIP() << "no usable CUDA device: " << e.what();
  }
  const int64_t n = 300001;  // not a multiple of 4 or 8
  std::vector<float> g = normal_gradient(n, 77);
  g[3] = 0.05f;  // an outlier so that clipping matters
  const int64_t nbytes = (n + 3) / 4;
  std::vector<Buffer> keep;
  auto device = [&](int64_t count, DType dtype) {
    keep.emplace_back(gpu->allocator(), static_cast<size_t>(count) * dtype_size(dtype));
    return Tensor(keep.back().data(), Shape{count}, dtype, gpu->device());
  };
  auto host = [](void* p, int64_t count, DType dtype) { return Tensor(p, Shape{count}, dtype, Device::cpu()); };
  const Tensor dg = device(n, DType::kF32), ds = device(1, DType::kF32), dout = device(n, DType::kF32);
  const Tensor dpacked = device(2 * nbytes, DType::kU8), dsums = device(n, DType::kI8), dzeros = device(1, DType::kI32);
  gpu->copy(dg, host(g.data(), n, DType::kF32));
  for (float c : {0.f, 2.5f}) {
    gpu->ternary_scaler(dg, c, ds);
    float s_gpu = 0.f;
    gpu->copy(host(&s_gpu, 1, DType::kF32), ds);
    const float s_cpu = ternary_scaler_cpu(g.data(), n, c);
    EXPECT_TRUE(same_bits(s_gpu, s_cpu)) << "clip_factor " << c << ": " << s_gpu << " vs " << s_cpu;
  }
  {  // a NaN anywhere gives a NaN scaler, as on the CPU
    std::vector<float> bad = g;
    bad[n / 3] = std::numeric_limits<float>::quiet_NaN();
    const Tensor dbad = device(n, DType::kF32);
    gpu->copy(dbad, host(bad.data(), n, DType::kF32));
    gpu->ternary_scaler(dbad, 2.5f, ds);
    float s_gpu = 0.f;
    gpu->copy(host(&s_gpu, 1, DType::kF32), ds);
    EXPECT_TRUE(std::isnan(s_gpu));
  }
  float s = ternary_scaler_cpu(g.data(), n, 2.5f);
  gpu->copy(ds, host(&s, 1, DType::kF32));
  const PhiloxKey k0 = philox_key(5, 0), k1 = philox_key(5, 1);
  std::vector<uint8_t> gpu_packed(2 * nbytes), cpu_packed(2 * nbytes);
  const int64_t cpu_zeros = ternary_encode_cpu(g.data(), n, s, k0, 12, 3, cpu_packed.data());
  ternary_encode_cpu(g.data(), n, s, k1, 12, 3, cpu_packed.data() + nbytes);
  gpu->ternary_encode(dg, ds, k0, 12, 3, dpacked.slice0(0, nbytes), dzeros);
  gpu->ternary_encode(dg, ds, k1, 12, 3, dpacked.slice0(nbytes, 2 * nbytes), Tensor());
  gpu->copy(host(gpu_packed.data(), 2 * nbytes, DType::kU8), dpacked);
  ASSERT_EQ(gpu_packed, cpu_packed);
  int32_t gpu_zeros = -1;
  gpu->copy(host(&gpu_zeros, 1, DType::kI32), dzeros);
  EXPECT_EQ(gpu_zeros, cpu_zeros);
  // decode from the two gathered buffers, and from int8 sums
  std::vector<float> cpu_out(n), gpu_out(n);
  ternary_decode_gathered_cpu(cpu_packed.data(), nbytes, 2, n, s, cpu_out.data());
  gpu->ternary_decode_gathered(dpacked, nbytes, 2, ds, dout);
  gpu->copy(host(gpu_out.data(), n, DType::kF32), dout);
  ASSERT_EQ(gpu_out, cpu_out);
  std::vector<int8_t> sums(n), cpu_sums(n);
  ternary_sum_codes_cpu(cpu_packed.data(), nbytes, 2, n, cpu_sums.data());
  gpu->ternary_sum_codes(dpacked, nbytes, 2, dsums);
  gpu->copy(host(sums.data(), n, DType::kI8), dsums);
  ASSERT_EQ(sums, cpu_sums);
  ternary_decode_sums_cpu(cpu_sums.data(), n, s, 3, cpu_out.data());
  gpu->ternary_decode_sums(dsums, ds, 3, dout);
  gpu->copy(host(gpu_out.data(), n, DType::kF32), dout);
  ASSERT_EQ(gpu_out, cpu_out);
}

}  // namespace
}  // namespace tg

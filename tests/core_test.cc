// Core: Philox known-answer vectors (Random123 kat_vectors), fp16/bf16 conversions, Shape, Slab, Tensor views,
// parallel_for / parallel_chunks, error messages.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>

#include "terngrad/core/dtype.h"
#include "terngrad/core/error.h"
#include "terngrad/core/half_convert.h"
#include "terngrad/core/parallel.h"
#include "terngrad/core/philox.h"
#include "terngrad/core/slab.h"

namespace tg {
namespace {

void expect_philox(Philox4x32 ctr, PhiloxKey key, Philox4x32 want) {
  Philox4x32 got = philox4x32_10(ctr, key);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got.v[i], want.v[i]) << "word " << i;
}

TEST(Philox, Random123KnownAnswers) {
  // philox4x32 10 rounds, from Random123's kat_vectors.
  expect_philox({{0, 0, 0, 0}}, {{0, 0}}, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}});
  expect_philox({{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, {{0xffffffffu, 0xffffffffu}},
                {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}});
  expect_philox({{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, {{0xa4093822u, 0x299f31d0u}},
                {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}});
}

TEST(Philox, UniformIsInUnitIntervalAndRoughlyUniform) {
  PhiloxKey key = philox_key(1234, 7);
  const int n = 200000;
  double sum = 0;
  int below_quarter = 0;
  for (int i = 0; i < n; ++i) {
    float u = philox_uniform(key, i, 3, 4, 5);
    ASSERT_GE(u, 0.f);
    ASSERT_LT(u, 1.f);
    sum += u;
    below_quarter += u < 0.25f;
  }
  // mean 1/2 with std sqrt(1/12/n); 6 standard errors
  EXPECT_NEAR(sum / n, 0.5, 6 * std::sqrt(1.0 / 12 / n));
  EXPECT_NEAR(below_quarter / double(n), 0.25, 6 * std::sqrt(0.25 * 0.75 / n));
  EXPECT_EQ(uniform_from_bits(0xffffffffu), 1.f - 5.9604644775390625e-08f);
}

TEST(Philox, StreamsDiffer) {
  EXPECT_NE(philox_uniform(philox_key(1, 0), 0, 0, 0, 0), philox_uniform(philox_key(1, 1), 0, 0, 0, 0));
  EXPECT_NE(philox_uniform(philox_key(1, 0), 0, 1, 0, 0), philox_uniform(philox_key(1, 0), 0, 0, 0, 0));
  EXPECT_EQ(philox_uniform(philox_key(9, 2), 12345, 6, 7, 8), philox_uniform(philox_key(9, 2), 12345, 6, 7, 8));
}

TEST(DType, HalfConversionsRoundTripAndRound) {
  // Every finite half converts to float and back exactly.
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    half_bits hb{static_cast<uint16_t>(h)};
    float f = half_to_float(hb);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(half_to_float(float_to_half(f))));
      continue;
    }
    ASSERT_EQ(float_to_half(f).bits, hb.bits) << "half 0x" << std::hex << h;
  }
  EXPECT_EQ(float_to_half(1.f).bits, 0x3c00);
  EXPECT_EQ(float_to_half(65504.f).bits, 0x7bff);
  EXPECT_EQ(float_to_half(1e6f).bits, 0x7c00);                 // overflow -> inf
  EXPECT_EQ(float_to_half(5.9604644775390625e-08f).bits, 1);   // smallest subnormal
  EXPECT_EQ(float_to_half(2.98023223876953125e-08f).bits, 0);  // halfway to 0 -> even (0)
  EXPECT_EQ(float_to_half(1.f + 1.f / 2048).bits, 0x3c00);     // tie -> even
  EXPECT_EQ(float_to_half(1.f + 3.f / 2048).bits, 0x3c02);     // tie -> even (up)
  EXPECT_EQ(half_to_float(half_bits{0xc000}), -2.f);
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.f).bits, 0x3f80);
  EXPECT_EQ(bf16_to_float(float_to_bf16(3.140625f)), 3.140625f);
  EXPECT_EQ(float_to_bf16(bits_float(0x3f808000u)).bits, 0x3f80);  // tie, even stays
  EXPECT_EQ(float_to_bf16(bits_float(0x3f818000u)).bits, 0x3f82);  // tie, odd rounds up
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(Shape, BasicsAndErrors) {
  Shape s{64, 28, 28, 1};
  EXPECT_EQ(s.rank(), 4);
  EXPECT_EQ(s.numel(), 64 * 28 * 28);
  EXPECT_EQ(s.dim(-1), 1);
  EXPECT_EQ(s.str(), "(64, 28, 28, 1)");
  EXPECT_THROW(s.dim(4), Error);
  EXPECT_THROW((Shape{1, -2}), Error);
}

TEST(Slab, NamedAlignedViews) {
  Slab slab;
  slab.add("conv1/weights", Shape{5, 5, 1, 20});
  slab.add("conv1/biases", Shape{20});
  slab.add("mask", Shape{7}, DType::kU8);
  EXPECT_THROW(slab.add("conv1/biases", Shape{1}), Error);
  slab.allocate(host_allocator());
  EXPECT_THROW(slab.add("late", Shape{1}), Error);
  for (const auto& e : slab.entries()) EXPECT_EQ(e.offset % 64, 0u) << e.name;
  Tensor b = slab.view("conv1/biases");
  EXPECT_EQ(b.shape(), Shape{20});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.raw()) % 64, 0u);
  EXPECT_THROW(b.data<int32_t>(), Error);
  try {
    slab.view("conv9/weights");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("conv9/weights"), std::string::npos);
  }
}

TEST(Tensor, SliceAndReshape) {
  Buffer buf(host_allocator(), 6 * 4 * sizeof(float));
  Tensor t(buf.data(), Shape{6, 4}, DType::kF32, Device::cpu());
  for (int i = 0; i < 24; ++i) t.data<float>()[i] = float(i);
  Tensor s = t.slice0(2, 5);
  EXPECT_EQ(s.shape(), (Shape{3, 4}));
  EXPECT_EQ(s.data<float>()[0], 8.f);
  EXPECT_EQ(t.reshaped(Shape{24}).numel(), 24);
  EXPECT_THROW(t.reshaped(Shape{5}), Error);
  EXPECT_THROW(t.slice0(4, 7), Error);
}

// The bulk conversions (F16C when the CPU has it) against the scalar definitions, NaN payloads aside.
TEST(HalfConvert, BulkMatchesScalarOnEveryHalfAndManyFloats) {
  std::vector<half_bits> all(65536);
  for (int i = 0; i < 65536; ++i) all[i] = half_bits{static_cast<uint16_t>(i)};
  std::vector<float> f(all.size());
  halves_to_floats(all.data(), f.data(), static_cast<int64_t>(all.size()));
  for (int i = 0; i < 65536; ++i) {
    const float ref = half_to_float(all[i]);
    if (std::isnan(ref))
      ASSERT_TRUE(std::isnan(f[i])) << i;
    else
      ASSERT_EQ(float_bits(f[i]), float_bits(ref)) << i;
  }
  // Floats around every fp16 value, ties, subnormals, overflow, infinities (odd count: the scalar tail too).
  std::vector<float> in;
  for (float v : f) {
    if (std::isnan(v)) continue;
    in.push_back(v);
    in.push_back(std::nextafter(v, 1e30f));
    in.push_back(v * 1.00048828125f);  // halfway to the next fp16 (1 + 2^-11)
  }
  for (float v : {65520.f, 65519.f, 1e-8f, -3e-8f, std::numeric_limits<float>::infinity(), 1e38f}) in.push_back(v);
  const int64_t n = static_cast<int64_t>(in.size());
  std::vector<half_bits> h(in.size()), dst(in.size());
  floats_to_halves(in.data(), h.data(), n);
  std::vector<float> acc(in.size(), 0.25f);
  add_rounded_to_half(in.data(), acc.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(h[i].bits, float_to_half(in[i]).bits) << in[i];
    ASSERT_EQ(float_bits(acc[i]), float_bits(0.25f + half_to_float(float_to_half(in[i])))) << in[i];
  }
  std::vector<half_bits> other(h.rbegin(), h.rend());
  dst = h;
  add_halves(dst.data(), other.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const half_bits ref = float_to_half(half_to_float(h[i]) + half_to_float(other[i]));
    if (std::isnan(half_to_float(ref)))
      ASSERT_TRUE(std::isnan(half_to_float(dst[i]))) << i;
    else
      ASSERT_EQ(dst[i].bits, ref.bits) << i;
  }
}

TEST(Parallel, ForCoversTheRangeOnceAndChunksAreFixed) {
  for (int threads : {1, 2, 3}) {
    set_compute_threads(threads);
    std::vector<std::atomic<int>> hits(10007);
    for (int rep = 0; rep < 20; ++rep)
      parallel_for(static_cast<int64_t>(hits.size()), 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[i]++;
      });
    for (auto& h : hits) ASSERT_EQ(h.load(), 20) << threads << " threads";
    // Short ranges stay on the caller; parallel_chunks' chunks do not depend on the thread count.
    int calls = 0;
    parallel_for(100, 1000, [&](int64_t b, int64_t e) { calls += (b == 0 && e == 100); });
    EXPECT_EQ(calls, 1);
    std::vector<std::pair<int64_t, int64_t>> chunks(4);
    parallel_chunks(1000, 300, [&](int64_t k, int64_t b, int64_t e) { chunks[k] = {b, e}; });
    EXPECT_EQ(chunks, (std::vector<std::pair<int64_t, int64_t>>{{0, 300}, {300, 600}, {600, 900}, {900, 1000}}));
  }
  set_compute_threads(1);
}

// The message is the user's line; the expression, file and line are kept apart (the programs log them at debug
// level), so no internal check text reaches a person.
TEST(Error, CheckKeepsTheExpressionFileAndLineApartFromTheMessage) {
  try {
    int x = 3;
    TG_CHECK(x == 4, "x was {}", x);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "x was 3");
    EXPECT_NE(e.location().find("x == 4"), std::string::npos) << e.location();
    EXPECT_NE(e.location().find("core_test.cc:"), std::string::npos) << e.location();
  }
  try {
    TG_USAGE_ERROR("--n {} is bad", 5);
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()), "--n 5 is bad");
    EXPECT_EQ(e.location(), "");
  }
}

}  // namespace
}  // namespace tg

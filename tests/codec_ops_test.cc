// The Backend's gradient codec ops (terngrad/backend/backend.h, "gradient codec"), in the style of ggml's
// test-backend-ops:
//   - every op on the CPU backend against the plain definitions of terngrad/math/ternary_math.h and
//     terngrad/core/dtype.h (the scaler's sums in the documented order, codes from ternarize_one, decode values
//     from ternary_decode_value, scalar fp16 conversions), bit for bit, on odd sizes (0, 1, 3, 4, 5, 1000003)
//     and with NaN/Inf inputs; outputs are followed by guard bytes that must survive; the table forms (many
//     tensors in one call) against their one-tensor calls;
//   - the CUDA backend against the CPU backend, op by op (bit-identical scalers (one tensor and tables), codes,
//     zero counts, sums and decodes for the same Philox keys, up to AlexNet's fc6 size 9216 x 4096). Without a
//     CUDA build or device these report SKIPPED with the reason.
// The schemes' range codings are codec_range_test.cc's; the shared helpers and definitions common/codec_test_support.h.
// fp16 outputs compare NaNs by NaN-ness only: the CPU's F16C conversions keep NaN payloads, the scalar ones do
// not (terngrad/core/half_convert.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/codec_test_support.h"
#include "common/random_inputs.h"
#include "terngrad/backend/backend.h"
#include "terngrad/backend/ternary_codec.h"
#include "terngrad/core/buffer.h"
#include "terngrad/core/error.h"
#include "terngrad/math/ternary_math.h"

namespace tg {
namespace {

using namespace codec_test;  // NOLINT(build/namespaces): the codec tests' shared helpers

// ---- CPU backend against the definitions -----------------------------------------------------------------------
TEST(CodecOpsCpu, ScalerFollowsTheDocumentedOrder) {
  // Beyond kSizes: 3 chunks (a power of two padded with a 0.0 chunk), and the most chunks (2048) of more than
  // the minimum size each.
  std::vector<int64_t> sizes(std::begin(kSizes), std::end(kSizes));
  sizes.push_back(2 * kTernaryStatsMinChunk + 1);
  sizes.push_back(int64_t{kTernaryStatsMaxChunks} * kTernaryStatsMinChunk + 12345);
  for (int64_t n : sizes) {
    std::vector<float> g = normal(n, static_cast<uint32_t>(n) + 1);
    if (n > 3) g[n / 2] = 0.02f;  // an outlier: clipping matters
    for (float c : {0.f, 2.5f}) {
      Mem dg(cpu(), n, DType::kF32), ds(cpu(), 1, DType::kF32);
      dg.upload(g);
      cpu().ternary_scaler(dg.t(), c, ds.t());
      const float got = ds.download<float>()[0], want = ref_scaler(g, c);
      EXPECT_TRUE(same_float(got, want)) << "n=" << n << " c=" << c << ": " << got << " vs " << want;
      EXPECT_TRUE(ds.guards_intact());
      if (n == 0) {
        EXPECT_EQ(got, 0.f);
      }
    }
  }
  for (float bad : {kNaN, kInf, -kInf}) {
    for (int64_t n : {int64_t{1}, int64_t{5}, int64_t{1000003}}) {
      std::vector<float> g = normal(n, 9);
      g[n - 1] = bad;
      Mem dg(cpu(), n, DType::kF32), ds(cpu(), 1, DType::kF32);
      dg.upload(g);
      cpu().ternary_scaler(dg.t(), 2.5f, ds.t());
      EXPECT_TRUE(std::isnan(ds.download<float>()[0])) << "n=" << n << " bad=" << bad;
    }
  }
}

TEST(CodecOpsCpu, EncodeMatchesTheDefinitionWithZeroCounts) {
  const PhiloxKey key = philox_key(77, 3);
  for (int64_t n : kSizes) {
    std::vector<float> g = normal(n, static_cast<uint32_t>(n) + 5);
    if (n >= 3) g[1] = kNaN, g[2] = kInf;  // NaN: code 0; Inf: its sign
    for (float s : {ref_scaler(normal(n + 1, 1), 2.5f), 0.f, kNaN, 1e-3f}) {
      const int64_t nbytes = (n + 3) / 4;
      Mem dg(cpu(), n, DType::kF32), ds(cpu(), 1, DType::kF32), dp(cpu(), nbytes, DType::kU8),
          dz(cpu(), 1, DType::kI32);
      dg.upload(g);
      ds.upload(std::vector<float>{s});
      cpu().ternary_encode(dg.t(), ds.t(), key, 41, 6, dp.t(), dz.t());
      int64_t zeros = 0;
      const std::vector<uint8_t> want = ref_encode(g, s, key, 41, 6, &zeros);
      EXPECT_EQ(dp.download<uint8_t>(), want) << "n=" << n << " s=" << s;
      EXPECT_EQ(dz.download<int32_t>()[0], zeros) << "n=" << n << " s=" << s;
      EXPECT_TRUE(dp.guards_intact() && dz.guards_intact()) << "n=" << n;
      cpu().ternary_encode(dg.t(), ds.t(), key, 41, 6, dp.t(), Tensor());  // no count wanted
      EXPECT_EQ(dp.download<uint8_t>(), want);
    }
  }
}

// A table of tensors for ternary_encode_many: 70 tensors (more than one table of Backend::kEncodeTable) of sizes
// with tails (0, 1, 7, 8, 9, 4097, ...) at every alignment, laid out back to back in one flat gradient, their
// packed codes back to back in one byte buffer, one scaler and one zero count each.
struct EncodeTable {
  std::vector<int64_t> size, at, packed_at;
  int64_t total = 0, packed = 0;
  EncodeTable() {
    const int64_t sizes[] = {0, 1, 7, 8, 9, 33, 4097, 1001};
    for (int k = 0; k < 70; ++k) {
      size.push_back(sizes[k % 8] + (k / 8) * 3);
      at.push_back(total), packed_at.push_back(packed);
      total += size.back(), packed += (size.back() + 3) / 4;
    }
  }
  int count() const { return static_cast<int>(size.size()); }
  // Tensor k's operands as views of g (f32 (total)), scalers (f32 (count)), packed (u8), zeros (i32 (count)).
  std::vector<TernaryEncodeItem> items(const Tensor& g, const Tensor& scalers, const Tensor& packed_codes,
                                       const Tensor& zeros) const {
    std::vector<TernaryEncodeItem> out;
    for (int k = 0; k < count(); ++k)
      out.push_back({g.slice0(at[k], at[k] + size[k]), scalers.slice0(k, k + 1), static_cast<uint32_t>(k * 7 + 1),
                     packed_codes.slice0(packed_at[k], packed_at[k] + (size[k] + 3) / 4),
                     k % 5 == 4 ? Tensor() : zeros.slice0(k, k + 1), Tensor()});
    return out;
  }
};

TEST(CodecOpsCpu, EncodeManyGivesEachEncodesBits) {
  const EncodeTable table;
  const std::vector<float> g = normal(table.total, 31);
  std::vector<float> s(table.count());
  for (int k = 0; k < table.count(); ++k) s[k] = k % 9 == 3 ? 0.f : 1.2e-3f + 1e-5f * k;
  Mem dg(cpu(), table.total, DType::kF32), ds(cpu(), table.count(), DType::kF32);
  dg.upload(g), ds.upload(s);
  const PhiloxKey key = philox_key(41, 2);
  std::vector<std::vector<uint8_t>> packed(2);
  std::vector<std::vector<int32_t>> zeros(2);
  for (int many = 0; many < 2; ++many) {
    Mem dp(cpu(), table.packed, DType::kU8), dz(cpu(), table.count(), DType::kI32, 0);
    const std::vector<TernaryEncodeItem> items = table.items(dg.t(), ds.t(), dp.t(), dz.t());
    if (many) {
      cpu().ternary_encode_many(items.data(), table.count(), key, 17);
    } else {
      for (const TernaryEncodeItem& it : items)
        cpu().ternary_encode(it.g, it.scaler, key, 17, it.tensor, it.packed, it.zero_count);
    }
    packed[many] = dp.download<uint8_t>(), zeros[many] = dz.download<int32_t>();
    EXPECT_TRUE(dp.guards_intact() && dz.guards_intact());
  }
  EXPECT_EQ(packed[1], packed[0]);
  EXPECT_EQ(zeros[1], zeros[0]);
  for (int k = 0; k < table.count(); ++k) {  // and each tensor's codes are the definition's
    std::vector<float> gk(g.begin() + table.at[k], g.begin() + table.at[k] + table.size[k]);
    int64_t z = 0;
    const std::vector<uint8_t> want = ref_encode(gk, s[k], key, 17, static_cast<uint32_t>(k * 7 + 1), &z);
    ASSERT_TRUE(std::equal(want.begin(), want.end(), packed[1].begin() + table.packed_at[k])) << "tensor " << k;
    if (k % 5 != 4) {
      EXPECT_EQ(zeros[1][k], z) << "tensor " << k;
    }
  }
}

// A table of tensors for ternary_scaler_many: 70 tensors (more than one table of Backend::kScalerTable) of sizes
// with tails and several chunks (0, 1, 7, 4097, 3 chunks, 245 chunks, ...), every third with a residual, every
// fourth weight-decayed, every fifth with a scaler per 256 elements; their gradients (and residuals, parameters)
// back to back in flat buffers, their scalers back to back in one vector.
struct ScalerTable {
  std::vector<int64_t> size, at, bucket, scaler_at;
  int64_t total = 0, scalers = 0;
  ScalerTable() {
    const int64_t sizes[] = {0, 1, 7, 4097, 2 * kTernaryStatsMinChunk + 1, 513, 33, 1000003};
    for (int k = 0; k < 70; ++k) {
      size.push_back(sizes[k % 8] + (k % 8 == 7 ? 0 : (k / 8) * 3));
      bucket.push_back(k % 5 == 4 ? 256 : 0);
      at.push_back(total), scaler_at.push_back(scalers);
      total += size.back(), scalers += ternary_num_scalers(size.back(), bucket.back());
    }
  }
  int count() const { return static_cast<int>(size.size()); }
  // Tensor k's operands as views of g, r, w (f32 (total)) and scalers (f32 (scalers)).
  std::vector<TernaryScalerItem> items(const Tensor& g, const Tensor& r, const Tensor& w, const Tensor& s) const {
    std::vector<TernaryScalerItem> out;
    for (int k = 0; k < count(); ++k) {
      const int64_t b = at[k], e = at[k] + size[k];
      out.push_back({g.slice0(b, e), s.slice0(scaler_at[k], scaler_at[k] + ternary_num_scalers(size[k], bucket[k])),
                     k % 3 == 0 ? r.slice0(b, e) : Tensor(), k % 4 == 1 ? w.slice0(b, e) : Tensor(),
                     k % 4 == 1 ? 5e-4f : 0.f, bucket[k]});
    }
    return out;
  }
};

TEST(CodecOpsCpu, ScalerManyGivesEachScalersBits) {
  const ScalerTable table;
  std::vector<float> g = normal(table.total, 35);
  for (int64_t i = 0; i < table.total; i += 997) g[i] = 0.02f;  // outliers: clipping matters
  const std::vector<float> r = normal(table.total, 36, 3e-4f), w = normal(table.total, 37, 0.1f);
  std::vector<std::vector<float>> gs(2), ss(2);
  for (int many = 0; many < 2; ++many) {
    Mem dg(cpu(), table.total, DType::kF32), dr(cpu(), table.total, DType::kF32), dw(cpu(), table.total, DType::kF32),
        ds(cpu(), table.scalers, DType::kF32);
    dg.upload(g), dr.upload(r), dw.upload(w);
    const std::vector<TernaryScalerItem> items = table.items(dg.t(), dr.t(), dw.t(), ds.t());
    if (many) {
      cpu().ternary_scaler_many(items.data(), table.count(), 2.5f);
    } else {
      for (const TernaryScalerItem& it : items)
        cpu().ternary_scaler(it.g, 2.5f, it.scaler, it.residual, it.decayed, it.decay, it.bucket);
    }
    gs[many] = dg.download<float>(), ss[many] = ds.download<float>();
    EXPECT_TRUE(dg.guards_intact() && ds.guards_intact());
    EXPECT_EQ(dr.download<float>(), r) << "residuals are only read";
  }
  ASSERT_EQ(std::memcmp(gs[1].data(), gs[0].data(), gs[0].size() * sizeof(float)), 0) << "g + decay * w + r";
  ASSERT_EQ(std::memcmp(ss[1].data(), ss[0].data(), ss[0].size() * sizeof(float)), 0) << "scalers";
  for (int k = 0; k < table.count(); ++k) {  // and each one-scaler tensor's is the definition's
    if (table.bucket[k] != 0) continue;
    const std::vector<float> gk(gs[1].begin() + table.at[k], gs[1].begin() + table.at[k] + table.size[k]);
    EXPECT_TRUE(same_float(ss[1][table.scaler_at[k]], ref_scaler(gk, 2.5f))) << "tensor " << k;
  }
  // Bad items are one-line errors naming the op, before anything is written.
  Mem dg(cpu(), 64, DType::kF32), ds(cpu(), 1, DType::kF32);
  cpu().zero(dg.t());
  const TernaryScalerItem overlapping{dg.t().slice0(0, 32), ds.t(), dg.t().slice0(16, 48), Tensor(), 0.f, 0};
  try {
    cpu().ternary_scaler_many(&overlapping, 1, 2.5f);
    ADD_FAILURE() << "an overlapping residual was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ternary_scaler_many"), std::string::npos) << e.what();
  }
  const TernaryScalerItem no_scaler{dg.t(), Tensor(), Tensor(), Tensor(), 0.f, 0};
  EXPECT_THROW(cpu().ternary_scaler_many(&no_scaler, 1, 2.5f), Error);
  EXPECT_THROW(cpu().ternary_scaler_many(nullptr, 1, 2.5f), Error);
  EXPECT_NO_THROW(cpu().ternary_scaler_many(nullptr, 0, 2.5f));
}

TEST(CodecOpsCpu, CodeSumsAndDecodesMatchTheDefinition) {
  for (int64_t n : kSizes) {
    const int64_t nbytes = (n + 3) / 4;
    for (int workers : {1, 3, 127, 130}) {
      if (workers > 3 && n > 5) continue;  // the wide sums on small tensors only (the loops are the same)
      const int64_t stride = nbytes + 3;   // blocks apart, with bytes between that must not be read as codes
      const std::vector<uint8_t> packed = random_bytes((workers - 1) * stride + nbytes, 7 + workers);
      Mem dp(cpu(), static_cast<int64_t>(packed.size()), DType::kU8), ds(cpu(), 1, DType::kF32);
      dp.upload(packed);
      const float s = 3.25e-3f;
      ds.upload(std::vector<float>{s});
      Mem out(cpu(), n, DType::kF32);
      cpu().ternary_decode_gathered(dp.t(), stride, workers, ds.t(), out.t());
      const std::vector<float> got = out.download<float>();
      for (int64_t i = 0; i < n; ++i)
        ASSERT_TRUE(same_float(got[i], ternary_decode_value(s, ref_code_sum(packed, stride, workers, i), workers)))
            << "n=" << n << " workers=" << workers << " i=" << i;
      EXPECT_TRUE(out.guards_intact());
      if (workers > 127) {
        Mem sums(cpu(), n, DType::kI8);
        EXPECT_THROW(cpu().ternary_sum_codes(dp.t(), stride, workers, sums.t()), Error);
        continue;
      }
      Mem sums(cpu(), n, DType::kI8);
      cpu().ternary_sum_codes(dp.t(), stride, workers, sums.t());
      const std::vector<int8_t> code_sums = sums.download<int8_t>();
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(code_sums[i], ref_code_sum(packed, stride, workers, i)) << "n=" << n << " i=" << i;
      EXPECT_TRUE(sums.guards_intact());
      for (float scaler : {s, 0.f, kNaN, kInf}) {
        ds.upload(std::vector<float>{scaler});
        cpu().ternary_decode_sums(sums.t(), ds.t(), workers, out.t());
        const std::vector<float> dec = out.download<float>();
        for (int64_t i = 0; i < n; ++i)
          ASSERT_TRUE(same_float(dec[i], ternary_decode_value(scaler, code_sums[i], workers)))
              << "n=" << n << " s=" << scaler << " i=" << i;
      }
    }
  }
}

// Workers' inputs with NaN, Inf, fp16 overflow and subnormal values sprinkled in.
std::vector<std::vector<float>> float_inputs(int workers, int64_t n) {
  std::vector<std::vector<float>> xs;
  for (int w = 0; w < workers; ++w) {
    xs.push_back(normal(n, 50 + w, 0.5f));
    if (n >= 5) {
      xs[w][0] = kNaN;
      xs[w][1] = w % 2 ? kInf : -kInf;
      xs[w][2] = 70000.f;  // beyond fp16's range
      xs[w][3] = 3e-6f;    // an fp16 subnormal
    }
  }
  return xs;
}

// The workers' inputs as f32 (n) tensors on the CPU backend, their memory kept in `mem`.
std::vector<Tensor> upload_inputs(const std::vector<std::vector<float>>& xs, int64_t n, std::vector<Mem>& mem) {
  for (const auto& x : xs) {
    mem.emplace_back(cpu(), n, DType::kF32);
    mem.back().upload(x);
  }
  std::vector<Tensor> ts;
  for (auto& m : mem) ts.push_back(m.t());
  return ts;
}

TEST(CodecOpsCpu, Fp16AndFp32CodingsMatchTheDefinition) {
  for (int64_t n : kSizes) {
    for (int workers : {1, 3}) {
      const std::vector<std::vector<float>> xs = float_inputs(workers, n);
      std::vector<Mem> in;
      const std::vector<Tensor> ts = upload_inputs(xs, n, in);
      std::vector<half_bits> h16(n);
      std::vector<float> f16_avg(n), f32_sum(n), f32_avg(n);
      for (int64_t i = 0; i < n; ++i) {
        float acc = 0.f, sum = xs[0][i];
        for (int w = 0; w < workers; ++w) acc += half_to_float(float_to_half(xs[w][i]));
        for (int w = 1; w < workers; ++w) sum += xs[w][i];
        h16[i] = float_to_half(acc);
        f16_avg[i] = half_to_float(h16[i]) / static_cast<float>(workers);
        f32_sum[i] = sum;
        f32_avg[i] = sum / static_cast<float>(workers);
      }
      Mem o16(cpu(), n, DType::kF16), o32(cpu(), n, DType::kF32);
      cpu().encode_f16_sum(ts.data(), workers, o16.t());
      std::vector<half_bits> got16 = o16.download<half_bits>();
      for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(same_half(got16[i], h16[i])) << "n=" << n << " i=" << i;
      cpu().decode_f16_sum(o16.t(), workers, o32.t());
      std::vector<float> got = o32.download<float>();
      for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(same_float(got[i], f16_avg[i])) << "n=" << n << " i=" << i;
      cpu().average_f16(ts.data(), workers, o32.t());
      got = o32.download<float>();
      for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(same_float(got[i], f16_avg[i])) << "n=" << n << " i=" << i;
      cpu().encode_f32_sum(ts.data(), workers, o32.t());
      got = o32.download<float>();
      for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(same_float(got[i], f32_sum[i])) << "n=" << n << " i=" << i;
      cpu().decode_f32_sum(o32.t(), workers, o32.t());  // in place
      got = o32.download<float>();
      for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(same_float(got[i], f32_avg[i])) << "n=" << n << " i=" << i;
      cpu().average_f32(ts.data(), workers, o32.t());
      got = o32.download<float>();
      for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(same_float(got[i], f32_avg[i])) << "n=" << n << " i=" << i;
      EXPECT_TRUE(o16.guards_intact() && o32.guards_intact());
      // The averages may write over one of their inputs (each element is read before it is written).
      cpu().average_f32(ts.data(), workers, ts[workers - 1]);
      got = in[workers - 1].download<float>();
      for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(same_float(got[i], f32_avg[i])) << "n=" << n << " i=" << i;
    }
  }
}

TEST(CodecOpsCpu, MaxScalersMatchTheDefinition) {
  for (int workers : {1, 2, 5}) {
    const int64_t n = 9;
    std::vector<std::vector<float>> xs;
    for (int w = 0; w < workers; ++w) {
      xs.push_back(normal(n, 70 + w, 1.f));
      for (auto& x : xs.back()) x = std::fabs(x);
    }
    xs[0][1] = kNaN;
    xs[workers - 1][2] = kInf;
    xs[workers / 2][3] = -kInf;
    xs[0][4] = 0.f;
    std::vector<Mem> in;
    const std::vector<Tensor> ts = upload_inputs(xs, n, in);
    Mem out(cpu(), n, DType::kF32);
    cpu().max_scalers(ts.data(), workers, out.t());
    const std::vector<float> got = out.download<float>();
    for (int64_t k = 0; k < n; ++k) EXPECT_TRUE(same_float(got[k], ref_max_scaler(xs, k))) << "k=" << k;
    EXPECT_EQ(got[1], kInf);
    EXPECT_TRUE(out.guards_intact());
    cpu().max_scalers(ts.data(), workers, ts[0]);  // in place
    EXPECT_EQ(in[0].download<float>(), got);
  }
}

// Error feedback's two fused passes (Backend::ternary_scaler with a residual, TernaryEncodeItem::residual) against
// their definitions written out: g + r, the scaler of that, its codes, and r = (g + r) - s * code. Signed zeros
// (-0 + -0 stays -0, and a zero code keeps it), tails, tables with and without residuals, every kind of scaler.
std::vector<float> plain_residuals(const std::vector<float>& g, const std::vector<uint8_t>& packed, float s) {
  std::vector<float> r(g.size());
  for (size_t i = 0; i < g.size(); ++i) r[i] = g[i] - s * static_cast<float>(unpack_ternary(packed.data(), i));
  return r;
}

TEST(CodecOpsCpu, ErrorFeedbackPassesMatchTheDefinition) {
  const PhiloxKey key = philox_key(17, 2);
  for (int64_t n : kSizes) {
    SCOPED_TRACE("n=" + std::to_string(n));
    std::vector<float> g = normal(n, static_cast<uint32_t>(n) + 9), r = normal(n, static_cast<uint32_t>(n) + 10, 3e-4f);
    for (int64_t i = 0; i < n; i += 7) g[i] = -0.f, r[i] = -0.f;
    std::vector<float> gp(n);
    for (int64_t i = 0; i < n; ++i) gp[i] = g[i] + r[i];
    Mem dg(cpu(), n, DType::kF32), dr(cpu(), n, DType::kF32), ds(cpu(), 1, DType::kF32);
    dg.upload(g);
    dr.upload(r);
    cpu().ternary_scaler(dg.t(), 2.5f, ds.t(), dr.t());
    EXPECT_TRUE(same_float(ds.download<float>()[0], ref_scaler(gp, 2.5f)));
    const std::vector<float> got_gp = dg.download<float>();
    ASSERT_TRUE(n == 0 || std::memcmp(got_gp.data(), gp.data(), n * sizeof(float)) == 0) << "g + r";
    EXPECT_EQ(dr.download<float>(), r) << "the scalers' pass does not change r";
    for (float sv : {ref_scaler(gp, 2.5f), 0.f, kNaN, kInf, 1e-44f}) {
      SCOPED_TRACE("s=" + std::to_string(sv));
      const int64_t nbytes = (n + 3) / 4;
      Mem dp(cpu(), nbytes, DType::kU8), dres(cpu(), n, DType::kF32), dz(cpu(), 1, DType::kI32);
      ds.upload(std::vector<float>{sv});
      const TernaryEncodeItem item{dg.t(), ds.t(), 6, dp.t(), dz.t(), dres.t()};
      cpu().ternary_encode_many(&item, 1, key, 41);
      int64_t zeros = 0;
      const std::vector<uint8_t> want = ref_encode(gp, sv, key, 41, 6, &zeros);
      EXPECT_EQ(dp.download<uint8_t>(), want);
      EXPECT_EQ(dz.download<int32_t>()[0], zeros);
      const std::vector<float> got = dres.download<float>(), res = plain_residuals(gp, want, sv);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_TRUE(same_float(got[i], res[i])) << "i=" << i << " " << got[i] << " " << res[i];
      EXPECT_TRUE(dp.guards_intact() && dres.guards_intact());
    }
  }
  // A table: residuals on two of every three tensors, the others encoded as without error feedback.
  const EncodeTable table;
  const std::vector<float> g = normal(table.total, 21);
  std::vector<float> s(table.count());
  for (int k = 0; k < table.count(); ++k) s[k] = k % 9 == 3 ? 0.f : 1.2e-3f + 1e-5f * k;
  Mem dg(cpu(), table.total, DType::kF32), ds(cpu(), table.count(), DType::kF32), dp(cpu(), table.packed, DType::kU8),
      dz(cpu(), table.count(), DType::kI32), dres(cpu(), table.total, DType::kF32, 0x7F);
  dg.upload(g);
  ds.upload(s);
  std::vector<TernaryEncodeItem> items = table.items(dg.t(), ds.t(), dp.t(), dz.t());
  for (int k = 0; k < table.count(); ++k)
    if (k % 3 != 2) items[k].residual = dres.t().slice0(table.at[k], table.at[k] + table.size[k]);
  cpu().ternary_encode_many(items.data(), table.count(), key, 7);
  const std::vector<uint8_t> packed = dp.download<uint8_t>();
  const std::vector<float> res = dres.download<float>();
  std::vector<uint8_t> untouched(4, 0x7F);
  float marker;
  std::memcpy(&marker, untouched.data(), 4);
  for (int k = 0; k < table.count(); ++k) {
    const std::vector<float> gk(g.begin() + table.at[k], g.begin() + table.at[k] + table.size[k]);
    int64_t zeros = 0;
    const std::vector<uint8_t> want = ref_encode(gk, s[k], key, 7, static_cast<uint32_t>(k * 7 + 1), &zeros);
    ASSERT_EQ(
        std::vector<uint8_t>(packed.begin() + table.packed_at[k], packed.begin() + table.packed_at[k] + want.size()),
        want)
        << "tensor " << k;
    const std::vector<float> rk = plain_residuals(gk, want, s[k]);
    for (int64_t i = 0; i < table.size[k]; ++i)
      ASSERT_TRUE(same_float(res[table.at[k] + i], k % 3 != 2 ? rk[i] : marker)) << "tensor " << k << " i=" << i;
  }
}

TEST(CodecOpsCpu, BadResidualsAreErrors) {
  Mem g(cpu(), 64, DType::kF32), s(cpu(), 1, DType::kF32), p(cpu(), 16, DType::kU8), r(cpu(), 64, DType::kF32),
      short_r(cpu(), 63, DType::kF32), half_r(cpu(), 64, DType::kF16);
  cpu().zero(g.t());
  cpu().zero(r.t());
  EXPECT_NO_THROW(cpu().ternary_scaler(g.t(), 2.5f, s.t(), r.t()));
  for (const Tensor& bad : {short_r.t(), half_r.t(), g.t(), g.t().slice0(0, 64)}) {
    EXPECT_THROW(cpu().ternary_scaler(g.t(), 2.5f, s.t(), bad), Error) << bad.str();
    const TernaryEncodeItem item{g.t(), s.t(), 0, p.t(), Tensor(), bad};
    EXPECT_THROW(cpu().ternary_encode_many(&item, 1, philox_key(1, 0), 0), Error) << bad.str();
  }
  // Overlapping g by part of it.
  Mem big(cpu(), 96, DType::kF32);
  try {
    cpu().ternary_scaler(big.t().slice0(0, 64), 2.5f, s.t(), big.t().slice0(32, 96));
    ADD_FAILURE() << "an overlapping residual was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("residual"), std::string::npos) << e.what();
  }
}

// The backend op with a decayed parameter (weight decay) against its definition: g + decay * w (the product
// rounded first, as axpy), + r when given, and the scaler of that; guard bytes intact; bad parameters and decays
// are one-line errors.
TEST(CodecOpsCpu, WeightDecayInTheScalersPass) {
  const float decay = 4e-4f;
  for (int64_t n : kSizes) {
    for (bool residual : {false, true}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " residual=" + std::to_string(residual));
      std::vector<float> g = normal(n, static_cast<uint32_t>(n) + 19),
                         w = normal(n, static_cast<uint32_t>(n) + 20, 0.1f),
                         r = normal(n, static_cast<uint32_t>(n) + 21, 3e-4f);
      for (int64_t i = 0; i < n; i += 7) g[i] = -0.f, w[i] = -0.f;
      std::vector<float> want(g);
      for (int64_t i = 0; i < n; ++i) want[i] = want[i] + decay * w[i];
      if (residual)
        for (int64_t i = 0; i < n; ++i) want[i] = want[i] + r[i];
      Mem dg(cpu(), n, DType::kF32), dw(cpu(), n, DType::kF32), dr(cpu(), n, DType::kF32), ds(cpu(), 1, DType::kF32);
      dg.upload(g);
      dw.upload(w);
      dr.upload(r);
      cpu().ternary_scaler(dg.t(), 2.5f, ds.t(), residual ? dr.t() : Tensor(), dw.t(), decay);
      EXPECT_TRUE(same_float(ds.download<float>()[0], ref_scaler(want, 2.5f)));
      const std::vector<float> got = dg.download<float>();
      ASSERT_TRUE(n == 0 || std::memcmp(got.data(), want.data(), n * sizeof(float)) == 0) << "g + decay * w (+ r)";
      EXPECT_EQ(dw.download<float>(), w) << "the parameter is only read";
      EXPECT_TRUE(dg.guards_intact() && dw.guards_intact() && ds.guards_intact());
    }
  }
  Mem g(cpu(), 64, DType::kF32), s(cpu(), 1, DType::kF32), w(cpu(), 64, DType::kF32), short_w(cpu(), 63, DType::kF32);
  cpu().zero(g.t());
  cpu().zero(w.t());
  EXPECT_NO_THROW(cpu().ternary_scaler(g.t(), 2.5f, s.t(), Tensor(), w.t(), 1e-4f));
  EXPECT_THROW(cpu().ternary_scaler(g.t(), 2.5f, s.t(), Tensor(), short_w.t(), 1e-4f), Error);
  EXPECT_THROW(cpu().ternary_scaler(g.t(), 2.5f, s.t(), Tensor(), g.t(), 1e-4f), Error);  // the parameter is g
  EXPECT_THROW(cpu().ternary_scaler(g.t(), 2.5f, s.t(), Tensor(), w.t(), std::numeric_limits<float>::infinity()),
               Error);
}

TEST(CodecOpsCpu, WrongDtypesAndSizesAreErrors) {
  Mem g(cpu(), 9, DType::kF32), s(cpu(), 1, DType::kF32), p(cpu(), 3, DType::kU8), wrong(cpu(), 2, DType::kU8);
  EXPECT_NO_THROW(cpu().ternary_encode(g.t(), s.t(), philox_key(1, 0), 0, 0, p.t(), Tensor()));
  EXPECT_THROW(cpu().ternary_encode(g.t(), s.t(), philox_key(1, 0), 0, 0, wrong.t(), Tensor()), Error);
  EXPECT_THROW(cpu().ternary_scaler(g.t(), 0.f, p.t()), Error);                   // scaler not f32 (1)
  EXPECT_THROW(cpu().ternary_decode_gathered(p.t(), 3, 2, s.t(), g.t()), Error);  // 2 workers need 6 bytes
  Mem sums(cpu(), 9, DType::kI8);
  EXPECT_THROW(cpu().ternary_sum_codes(p.t(), 0, 0, sums.t()), Error);
  const Tensor xs[2] = {g.t(), g.t()};
  EXPECT_THROW(cpu().encode_f16_sum(xs, 2, g.t()), Error);  // out must be f16
  EXPECT_THROW(cpu().encode_f32_sum(xs, 2, g.t()), Error);  // out is input 1
  EXPECT_THROW(cpu().average_f32(xs, 0, g.t()), Error);
}

// ---- CUDA against the CPU ----------------------------------------------------------------------------------------
// Runs one op on both backends with the same host inputs; `run` gets the backend and its tensors.
template <typename Run>
void on_both(const std::vector<std::pair<const void*, std::pair<int64_t, DType>>>& inputs,
             const std::vector<std::pair<int64_t, DType>>& outputs, Run run, std::vector<std::vector<uint8_t>>* cpu_out,
             std::vector<std::vector<uint8_t>>* gpu_out) {
  for (int side = 0; side < 2; ++side) {
    Backend& be = side == 0 ? cpu() : *cuda().be;
    std::vector<Mem> mem;
    std::vector<Tensor> ts;
    for (const auto& in : inputs) {
      mem.emplace_back(be, in.second.first, in.second.second);
      const size_t bytes = static_cast<size_t>(in.second.first) * dtype_size(in.second.second);
      std::vector<uint8_t> raw(static_cast<const uint8_t*>(in.first), static_cast<const uint8_t*>(in.first) + bytes);
      const Mem& m = mem.back();
      be.copy(Tensor(m.t().raw(), Shape{static_cast<int64_t>(bytes)}, DType::kU8, be.device()),
              Tensor(raw.data(), Shape{static_cast<int64_t>(bytes)}, DType::kU8, Device::cpu()));
    }
    for (const auto& out : outputs) mem.emplace_back(be, out.first, out.second);
    for (auto& m : mem) ts.push_back(m.t());
    run(be, ts);
    std::vector<std::vector<uint8_t>>& dst = side == 0 ? *cpu_out : *gpu_out;
    dst.clear();
    for (size_t k = inputs.size(); k < mem.size(); ++k) {
      const Tensor t = mem[k].t();
      std::vector<uint8_t> raw(t.bytes());
      be.copy(Tensor(raw.data(), Shape{static_cast<int64_t>(raw.size())}, DType::kU8, Device::cpu()),
              Tensor(t.raw(), Shape{static_cast<int64_t>(raw.size())}, DType::kU8, be.device()));
      dst.push_back(std::move(raw));
      EXPECT_TRUE(mem[k].guards_intact()) << "output " << k - inputs.size() << " on " << be.name();
    }
  }
}

template <typename T>
std::vector<T> as(const std::vector<uint8_t>& raw) {
  std::vector<T> v(raw.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), raw.data(), raw.size());
  return v;
}

void expect_same_floats(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, const std::string& what) {
  const std::vector<float> x = as<float>(a), y = as<float>(b);
  ASSERT_EQ(x.size(), y.size()) << what;
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_TRUE(same_float(x[i], y[i])) << what << " i=" << i << ": " << x[i] << " (cpu) vs " << y[i] << " (cuda)";
}

TEST(CodecOpsCuda, TernaryOpsMatchCpuBitForBit) {
  TG_REQUIRE_CUDA();
  const int64_t sizes[] = {0, 1, 3, 4, 5, 1000003, int64_t{9216} * 4096};
  std::vector<std::vector<uint8_t>> a, b;
  for (int64_t n : sizes) {
    SCOPED_TRACE("n=" + std::to_string(n));
    std::vector<float> g = normal(n, static_cast<uint32_t>(n % 1000) + 3);
    if (n > 10) g[n / 3] = 0.03f;
    const std::pair<int64_t, DType> G{n, DType::kF32}, S{1, DType::kF32};
    for (float c : {0.f, 2.5f}) {
      on_both(
          {{g.data(), G}}, {S}, [&](Backend& be, std::vector<Tensor>& t) { be.ternary_scaler(t[0], c, t[1]); }, &a, &b);
      expect_same_floats(a[0], b[0], "scaler c=" + std::to_string(c));
    }
    if (n >= 3) {  // non-finite gradients: NaN scalers on both
      std::vector<float> bad = g;
      bad[n - 2] = kInf;
      on_both(
          {{bad.data(), G}}, {S}, [&](Backend& be, std::vector<Tensor>& t) { be.ternary_scaler(t[0], 2.5f, t[1]); }, &a,
          &b);
      EXPECT_TRUE(std::isnan(as<float>(b[0])[0]));
      expect_same_floats(a[0], b[0], "scaler of Inf");
    }
    const float s = ref_scaler(g, 2.5f);
    const int64_t nbytes = (n + 3) / 4;
    const int W = 3;
    std::vector<float> enc_in = g;
    if (n >= 3) enc_in[0] = kNaN, enc_in[1] = -kInf;
    for (float scaler : {s, 0.f, kNaN}) {
      on_both(
          {{enc_in.data(), G}, {&scaler, S}}, {{W * nbytes, DType::kU8}, {W, DType::kI32}},
          [&](Backend& be, std::vector<Tensor>& t) {
            for (int w = 0; w < W; ++w)
              be.ternary_encode(t[0], t[1], philox_key(99, w), 123, 7, t[2].slice0(w * nbytes, (w + 1) * nbytes),
                                t[3].slice0(w, w + 1));
          },
          &a, &b);
      ASSERT_EQ(a[0], b[0]) << "codes, s=" << scaler;
      ASSERT_EQ(a[1], b[1]) << "zero counts, s=" << scaler;
    }
    // Code sums and decodes over the three workers' codes (drawn with s), gathered at stride nbytes.
    std::vector<uint8_t> packed(W * nbytes);
    for (int w = 0; w < W; ++w)
      ternary_encode_cpu(g.data(), n, s, philox_key(99, w), 123, 7, packed.data() + w * nbytes);
    const std::pair<int64_t, DType> P{W * nbytes, DType::kU8};
    on_both(
        {{packed.data(), P}, {&s, S}}, {{n, DType::kI8}, {n, DType::kF32}, {n, DType::kF32}},
        [&](Backend& be, std::vector<Tensor>& t) {
          be.ternary_sum_codes(t[0], nbytes, W, t[2]);
          be.ternary_decode_sums(t[2], t[1], W, t[3]);
          be.ternary_decode_gathered(t[0], nbytes, W, t[1], t[4]);
        },
        &a, &b);
    ASSERT_EQ(a[0], b[0]) << "code sums";
    expect_same_floats(a[1], b[1], "decode of sums");
    expect_same_floats(a[2], b[2], "decode of gathered codes");
  }
  {  // more than 127 workers: gathered decode only (an int8 sum cannot hold them)
    const int W = 130;
    const int64_t n = 1001, nbytes = (n + 3) / 4;
    const std::vector<uint8_t> packed = random_bytes(W * nbytes, 5);
    const float s = 0.5f;
    on_both(
        {{packed.data(), {W * nbytes, DType::kU8}}, {&s, {1, DType::kF32}}}, {{n, DType::kF32}},
        [&](Backend& be, std::vector<Tensor>& t) { be.ternary_decode_gathered(t[0], nbytes, W, t[1], t[2]); }, &a, &b);
    expect_same_floats(a[0], b[0], "decode of 130 workers");
  }
}

// The table encode (one launch per 64 tensors, 16-byte loads where a tensor is aligned) against the CPU's.
TEST(CodecOpsCuda, EncodeManyMatchesCpuBitForBit) {
  TG_REQUIRE_CUDA();
  const EncodeTable table;
  const std::vector<float> g = normal(table.total, 33);
  std::vector<float> s(table.count());
  for (int k = 0; k < table.count(); ++k) s[k] = k % 9 == 3 ? 0.f : 1.2e-3f + 1e-5f * k;
  std::vector<std::vector<uint8_t>> a, b;
  on_both(
      {{g.data(), {table.total, DType::kF32}}, {s.data(), {table.count(), DType::kF32}}},
      {{table.packed, DType::kU8}, {table.count(), DType::kI32}},
      [&](Backend& be, std::vector<Tensor>& t) {
        be.zero(t[3]);
        const std::vector<TernaryEncodeItem> items = table.items(t[0], t[1], t[2], t[3]);
        be.ternary_encode_many(items.data(), table.count(), philox_key(8, 1), 99);
      },
      &a, &b);
  EXPECT_EQ(a[0], b[0]) << "codes";
  EXPECT_EQ(a[1], b[1]) << "zero counts";
}

// The table scalers (2 or 3 launches per 64 tensors: chunks, finish, bucket maxima) against the CPU's: the same g
// after the adds and the same scalers, bit for bit.
TEST(CodecOpsCuda, ScalerManyMatchesCpuBitForBit) {
  TG_REQUIRE_CUDA();
  const ScalerTable table;
  std::vector<float> g = normal(table.total, 38);
  for (int64_t i = 0; i < table.total; i += 997) g[i] = 0.02f;
  g[table.at[11] + 3] = kNaN;  // one tensor's scaler NaN, its neighbours' unaffected
  const std::vector<float> r = normal(table.total, 39, 3e-4f), w = normal(table.total, 40, 0.1f);
  const std::pair<int64_t, DType> G{table.total, DType::kF32};
  std::vector<std::vector<uint8_t>> a, b;
  on_both(
      {{g.data(), G}, {r.data(), G}, {w.data(), G}}, {G, {table.scalers, DType::kF32}},
      [&](Backend& be, std::vector<Tensor>& t) {
        be.copy(t[3], t[0]);
        const std::vector<TernaryScalerItem> items = table.items(t[3], t[1], t[2], t[4]);
        be.ternary_scaler_many(items.data(), table.count(), 2.5f);
      },
      &a, &b);
  expect_same_floats(a[0], b[0], "g + decay * w + r");
  expect_same_floats(a[1], b[1], "scalers");
}

// Error feedback's fused passes on the GPU against the CPU's: g + r and the scaler in one pass, then codes and
// residuals in one (single tensors of several sizes, and a table).
TEST(CodecOpsCuda, ErrorFeedbackPassesMatchCpuBitForBit) {
  TG_REQUIRE_CUDA();
  std::vector<std::vector<uint8_t>> a, b;
  for (int64_t n : {int64_t{1}, int64_t{5}, int64_t{1000003}, int64_t{9216} * 4096}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    std::vector<float> g = normal(n, static_cast<uint32_t>(n % 1000) + 5), r = normal(n, 7, 3e-4f);
    for (int64_t i = 0; i < n; i += 7) g[i] = -0.f, r[i] = -0.f;
    const int64_t nbytes = (n + 3) / 4;
    const std::pair<int64_t, DType> G{n, DType::kF32};
    on_both(
        {{g.data(), G}, {r.data(), G}}, {G, {1, DType::kF32}, {nbytes, DType::kU8}, G},
        [&](Backend& be, std::vector<Tensor>& t) {
          be.copy(t[2], t[0]);
          be.ternary_scaler(t[2], 2.5f, t[3], t[1]);
          const TernaryEncodeItem item{t[2], t[3], 5, t[4], Tensor(), t[5]};
          be.ternary_encode_many(&item, 1, philox_key(3, 1), 77);
        },
        &a, &b);
    expect_same_floats(a[0], b[0], "g + r");
    expect_same_floats(a[1], b[1], "scaler");
    ASSERT_EQ(a[2], b[2]) << "codes";
    expect_same_floats(a[3], b[3], "residuals");
    // Weight decay in the same pass (with and without the residual): g + decay * w (+ r) and its scaler.
    const std::vector<float> w = normal(n, 8, 0.1f);
    for (bool residual : {false, true}) {
      on_both(
          {{g.data(), G}, {r.data(), G}, {w.data(), G}}, {G, {1, DType::kF32}},
          [&](Backend& be, std::vector<Tensor>& t) {
            be.copy(t[3], t[0]);
            be.ternary_scaler(t[3], 2.5f, t[4], residual ? t[1] : Tensor(), t[2], 5e-4f);
          },
          &a, &b);
      expect_same_floats(a[0], b[0], residual ? "g + decay * w + r" : "g + decay * w");
      expect_same_floats(a[1], b[1], "scaler with weight decay");
    }
  }
  const EncodeTable table;
  const std::vector<float> g = normal(table.total, 34);
  std::vector<float> s(table.count());
  for (int k = 0; k < table.count(); ++k) s[k] = k % 9 == 3 ? 0.f : 1.2e-3f + 1e-5f * k;
  on_both(
      {{g.data(), {table.total, DType::kF32}}, {s.data(), {table.count(), DType::kF32}}},
      {{table.packed, DType::kU8}, {table.count(), DType::kI32}, {table.total, DType::kF32}},
      [&](Backend& be, std::vector<Tensor>& t) {
        be.zero(t[3]);
        be.zero(t[4]);
        std::vector<TernaryEncodeItem> items = table.items(t[0], t[1], t[2], t[3]);
        for (int k = 0; k < table.count(); ++k)
          if (k % 3 != 2) items[k].residual = t[4].slice0(table.at[k], table.at[k] + table.size[k]);
        be.ternary_encode_many(items.data(), table.count(), philox_key(8, 1), 99);
      },
      &a, &b);
  EXPECT_EQ(a[0], b[0]) << "codes";
  EXPECT_EQ(a[1], b[1]) << "zero counts";
  expect_same_floats(a[2], b[2], "residuals");
}

TEST(CodecOpsCuda, Fp16Fp32AndScalerMaxOpsMatchCpu) {
  TG_REQUIRE_CUDA();
  std::vector<std::vector<uint8_t>> a, b;
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{1000003}}) {
    for (int W : {1, 3}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " workers=" + std::to_string(W));
      const std::vector<std::vector<float>> xs = float_inputs(W, n);
      std::vector<std::pair<const void*, std::pair<int64_t, DType>>> in;
      for (const auto& x : xs) in.push_back({x.data(), {n, DType::kF32}});
      on_both(
          in,
          {{n, DType::kF16}, {n, DType::kF32}, {n, DType::kF32}, {n, DType::kF32}, {n, DType::kF32}, {n, DType::kF32}},
          [&](Backend& be, std::vector<Tensor>& t) {
            const Tensor* x = t.data();
            be.encode_f16_sum(x, W, t[W]);
            be.decode_f16_sum(t[W], W, t[W + 1]);
            be.average_f16(x, W, t[W + 2]);
            be.encode_f32_sum(x, W, t[W + 3]);
            be.average_f32(x, W, t[W + 4]);
            be.decode_f32_sum(t[W + 3], W, t[W + 3]);
            be.max_scalers(x, W, t[W + 5]);
          },
          &a, &b);
      const std::vector<half_bits> h1 = as<half_bits>(a[0]), h2 = as<half_bits>(b[0]);
      ASSERT_EQ(h1.size(), h2.size());
      for (size_t i = 0; i < h1.size(); ++i) ASSERT_TRUE(same_half(h1[i], h2[i])) << "fp16 sum i=" << i;
      expect_same_floats(a[1], b[1], "fp16 decode");
      expect_same_floats(a[2], b[2], "fp16 average");
      expect_same_floats(a[3], b[3], "fp32 sum, decoded in place");
      expect_same_floats(a[4], b[4], "fp32 average");
      expect_same_floats(a[5], b[5], "max of scalers");
    }
  }
}
}  // namespace
}  // namespace tg

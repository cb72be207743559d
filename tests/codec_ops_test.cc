// The Backend's gradient codec ops (terngrad/backend/backend.h, "gradient codec") and the schemes' range codings
// (TernaryCoding, DenseCoding), in the style of ggml's test-backend-ops:
//   - every op on the CPU backend against the plain definitions of terngrad/math/ternary_math.h and
//     terngrad/core/dtype.h (the scaler's sums in the documented order, codes from ternarize_one, decode values
//     from ternary_decode_value, scalar fp16 conversions), bit for bit, on odd sizes (0, 1, 3, 4, 5, 1000003)
//     and with NaN/Inf inputs; outputs are followed by guard bytes that must survive;
//   - the range codings on the CPU backend against the same definitions written out per tensor in the policy's
//     fused layout, bit for bit, for LeNet's policies (ternary + fp32, fp16 + fp32) and one of odd sizes, three
//     workers and several ranges;
//   - the CUDA backend against the CPU backend, op by op (bit-identical scalers (one tensor and tables), codes, zero
//   counts, sums and
//     decodes for the same Philox keys, up to AlexNet's fc6 size 9216 x 4096), and the range codings on CUDA
//     against the definitions.
//     Without a CUDA build or device these report SKIPPED with the reason.
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

#include "common/random_inputs.h"
#include "src/exchange/dense_coding.h"
#include "src/exchange/schemes/terngrad/ternary_coding.h"
#include "terngrad/backend/backend.h"
#include "terngrad/backend/ternary_codec.h"
#include "terngrad/compress/compression_policy.h"
#include "terngrad/core/buffer.h"
#include "terngrad/core/error.h"
#include "terngrad/math/ternary_math.h"
#include "terngrad/models/registry.h"
#include "terngrad/nn/net.h"

namespace tg {
namespace {

constexpr size_t kGuardBytes = 64;
constexpr uint8_t kGuardByte = 0xA5;
const int64_t kSizes[] = {0, 1, 3, 4, 5, 1000003};
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

Backend& cpu() {
  static std::unique_ptr<Backend> b = make_backend("cpu", BackendOptions{2});
  return *b;
}

// The CUDA backend, created once, or why there is none.
struct Cuda {
  std::unique_ptr<Backend> be;
  std::string skip;
};
Cuda& cuda() {
  static Cuda c = [] {
    Cuda r;
    if (!cuda_backend_compiled()) {
      r.skip = "this build has no CUDA backend (configure with -DTG_CUDA=ON)";
      return r;
    }
    try {
      r.be = make_backend("cuda:0");
    } catch (const Error& e) {
      r.skip = std::string("no usable CUDA device: ") + e.what();
    }
    return r;
  }();
  return c;
}
#define TG_REQUIRE_CUDA() \
  if (!cuda().be) GTEST_SKIP() << cuda().skip

using testing::random_bytes;
std::vector<float> normal(int64_t n, uint32_t seed, float stddev = 1e-3f) {
  return testing::normal_floats(n, seed, stddev);
}

bool same_float(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0 || (std::isnan(a) && std::isnan(b)); }
bool half_is_nan(half_bits h) { return (h.bits & 0x7c00u) == 0x7c00u && (h.bits & 0x3ffu) != 0; }
bool same_half(half_bits a, half_bits b) { return a.bits == b.bits || (half_is_nan(a) && half_is_nan(b)); }

// Memory of `count` elements on a backend's device followed by guard bytes, all access through Backend::copy.
class Mem {
 public:
  Mem(Backend& be, int64_t count, DType dtype, uint8_t fill = 0xFF)
      : be_(&be),
        count_(count),
        dtype_(dtype),
        buf_(be.allocator(), static_cast<size_t>(count) * dtype_size(dtype) + kGuardBytes) {
    std::vector<uint8_t> init(buf_.bytes(), fill);
    std::fill(init.end() - kGuardBytes, init.end(), kGuardByte);
    be.copy(Tensor(buf_.data(), Shape{static_cast<int64_t>(init.size())}, DType::kU8, be.device()),
            Tensor(init.data(), Shape{static_cast<int64_t>(init.size())}, DType::kU8, Device::cpu()));
  }
  Tensor t() const { return Tensor(buf_.data(), Shape{count_}, dtype_, be_->device()); }
  template <typename T>
  void upload(const std::vector<T>& v) {
    be_->copy(t(), Tensor(const_cast<T*>(v.data()), Shape{count_}, dtype_, Device::cpu()));
  }
  template <typename T>
  std::vector<T> download() const {
    std::vector<T> v(count_);
    be_->copy(Tensor(v.data(), Shape{count_}, dtype_, Device::cpu()), t());
    return v;
  }
  bool guards_intact() const {
    std::vector<uint8_t> g(kGuardBytes);
    const size_t data_bytes = static_cast<size_t>(count_) * dtype_size(dtype_);
    be_->copy(Tensor(g.data(), Shape{static_cast<int64_t>(kGuardBytes)}, DType::kU8, Device::cpu()),
              Tensor(static_cast<char*>(buf_.data()) + data_bytes, Shape{static_cast<int64_t>(kGuardBytes)}, DType::kU8,
                     be_->device()));
    return std::all_of(g.begin(), g.end(), [](uint8_t b) { return b == kGuardByte; });
  }

 private:
  Backend* be_;
  int64_t count_;
  DType dtype_;
  Buffer buf_;
};

// ---- the plain definitions ----------------------------------------------------------------------------------
// The scaler with its sums in ternary_math.h's documented order, one element at a time.
float ref_scaler(const std::vector<float>& g, float clip_factor) {
  const int64_t n = static_cast<int64_t>(g.size());
  if (n == 0) return 0.f;
  const int64_t chunk = ternary_stats_chunk(n);
  std::vector<double> sums, sumsqs;  // per chunk
  uint32_t max_bits = 0;
  for (int64_t b = 0; b < n; b += chunk) {
    double ls[32] = {}, lq[32] = {};
    for (int64_t i = b; i < std::min(n, b + chunk); ++i) {
      const double d = g[i];
      ls[(i - b) % 32] += d;
      lq[(i - b) % 32] += d * d;
      uint32_t bits;
      std::memcpy(&bits, &g[i], 4);
      max_bits = std::max(max_bits, bits & 0x7FFFFFFFu);
    }
    for (int w = 16; w >= 1; w /= 2)
      for (int l = 0; l < w; ++l) ls[l] += ls[l + w], lq[l] += lq[l + w];
    sums.push_back(ls[0]);
    sumsqs.push_back(lq[0]);
  }
  size_t span = 1;  // the chunks combine pairwise, as the lanes, over a power of two padded with 0.0
  while (span < sums.size()) span *= 2;
  sums.resize(span, 0.0), sumsqs.resize(span, 0.0);
  for (size_t w = span / 2; w >= 1; w /= 2)
    for (size_t k = 0; k < w; ++k) sums[k] += sums[k + w], sumsqs[k] += sumsqs[k + w];
  const double sum = sums[0], sumsq = sumsqs[0];
  float max_abs;
  std::memcpy(&max_abs, &max_bits, 4);
  return ternary_scaler_from_stats(ternary_sigma_from_sums(sum, sumsq, n), max_abs, clip_factor);
}

std::vector<uint8_t> ref_encode(const std::vector<float>& g, float s, PhiloxKey key, uint32_t step, uint32_t tensor,
                                int64_t* zeros) {
  const int64_t n = static_cast<int64_t>(g.size());
  std::vector<uint8_t> packed((n + 3) / 4, 0);
  *zeros = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int c = ternarize_one(g[i], s, key, static_cast<uint64_t>(i), step, tensor);
    packed[i / 4] |= static_cast<uint8_t>(ternary_field(c) << (2 * (i % 4)));
    *zeros += c == 0;
  }
  return packed;
}

int ref_code_sum(const std::vector<uint8_t>& packed, int64_t stride, int workers, int64_t i) {
  int sum = 0;
  for (int w = 0; w < workers; ++w) sum += unpack_ternary(packed.data() + w * stride, i);
  return sum;
}

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

// The local max of the workers' scalers as GradientExchange forms it: from 0, a non-finite scaler as +Inf.
float ref_max_scaler(const std::vector<std::vector<float>>& xs, int64_t k) {
  float m = 0.f;
  for (const auto& x : xs) m = std::max(m, std::isfinite(x[k]) ? x[k] : kInf);
  return m;
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

// ---- TernaryCoding and DenseCoding (the schemes' range codings) against the definitions ------------------------
std::vector<ParamInfo> lenet_params() {
  Net net;
  build_model("lenet", ModelConfig{}, net);
  net.setup(cpu(), 1);
  std::vector<ParamInfo> infos;
  for (const auto& p : net.param_specs()) infos.push_back({p.name, p.shape.numel()});
  return infos;
}

// Everything one range of one step produces, read back to the host.
struct RangeResults {
  std::vector<float> scalers;     // [worker][num_ternary]
  std::vector<uint8_t> codes;     // workers' packed blocks
  std::vector<int64_t> zeros;     // worker 0's zero codes (num_ternary)
  std::vector<float> max_shared;  // (num_ternary) the max over the workers' scalers of the range
  std::vector<int8_t> code_sums;  //
  std::vector<half_bits> f16;     //
  std::vector<float> f32;         //
  std::vector<std::vector<float>> gathered_out, sums_out, average_out;  // tensors of the range
};

struct Step {
  const CompressionPolicy& policy;
  uint64_t seed = 4242;
  std::vector<std::vector<std::vector<float>>> grads;  // [worker][tensor][element]
  std::vector<float> shared;                           // shared scalers (num_scalers), from the definition
  uint32_t step = 17;
};

std::vector<std::vector<float>> range_tensors(const Step& st, TensorRange r, float fill) {
  std::vector<std::vector<float>> out;
  for (int i = r.begin; i < r.end; ++i) out.emplace_back(st.policy.tensors()[i].numel, fill);
  return out;
}

// The range's results written from the plain definitions above, tensor by tensor, in the fused layout the policy
// documents (ternary codes back to back from the range's first packed byte, fp16/fp32 likewise; scaler vectors and
// zero counts full-size, untouched outside the range).
RangeResults reference_form(const Step& st, TensorRange r) {
  const CompressionPolicy& p = st.policy;
  const RangeLayout l = p.layout(r);
  const int W = static_cast<int>(st.grads.size()), S = p.num_scalers();
  const float clip = p.flags().clip_factor;
  RangeResults res;
  res.scalers.assign(static_cast<size_t>(W) * S, 0.f);
  res.max_shared.assign(S, 0.f);
  res.codes.assign(static_cast<size_t>(W) * l.packed_bytes(), 0);
  res.zeros.assign(p.num_ternary(), -1);
  res.f16.assign(l.f16_elements(), half_bits{0});
  res.f32.assign(l.f32_elements(), 0.f);
  res.gathered_out = range_tensors(st, r, -7.f);
  for (int i = r.begin; i < r.end; ++i) {
    const TensorCodingPlan& t = p.tensors()[i];
    const size_t n = static_cast<size_t>(t.numel);
    std::vector<float>& out = res.gathered_out[i - r.begin];
    std::vector<float> average = st.grads[0][i];  // average_local: the ternary tensors keep worker 0's values
    if (t.coding == GradCoding::kTernary) {
      EXPECT_EQ(t.num_scalers, 1) << "the reference takes one scaler per tensor";
      std::vector<std::vector<float>> column;
      for (int w = 0; w < W; ++w) {
        res.scalers[static_cast<size_t>(w) * S + t.scaler_index] = ref_scaler(st.grads[w][i], clip);
        column.push_back({res.scalers[static_cast<size_t>(w) * S + t.scaler_index]});
      }
      res.max_shared[t.scaler_index] = ref_max_scaler(column, 0);
      const float s = st.shared[t.scaler_index];
      const int64_t at = t.offset - l.packed_begin;
      for (int w = 0; w < W; ++w) {
        int64_t zeros = 0;
        const std::vector<uint8_t> codes = ref_encode(st.grads[w][i], s, philox_key(st.seed, static_cast<uint32_t>(w)),
                                                      st.step, static_cast<uint32_t>(i), &zeros);
        std::copy(codes.begin(), codes.end(), res.codes.begin() + w * l.packed_bytes() + at);
        if (w == 0) res.zeros[t.ternary_index] = zeros;
      }
      for (int64_t e = 0; e < t.numel; ++e) {
        const int sum = ref_code_sum(res.codes, l.packed_bytes(), W, 4 * at + e);
        out[e] = ternary_decode_value(s, sum, W);
      }
    } else if (t.coding == GradCoding::kF16) {
      for (size_t e = 0; e < n; ++e) {
        float acc = 0.f;
        for (int w = 0; w < W; ++w) acc += half_to_float(float_to_half(st.grads[w][i][e]));
        const half_bits h = float_to_half(acc);
        res.f16[t.offset - l.f16_begin + e] = h;
        out[e] = average[e] = half_to_float(h) / static_cast<float>(W);
      }
    } else {
      for (size_t e = 0; e < n; ++e) {
        float sum = st.grads[0][i][e];
        for (int w = 1; w < W; ++w) sum += st.grads[w][i][e];
        res.f32[t.offset - l.f32_begin + e] = sum;
        out[e] = average[e] = sum / static_cast<float>(W);
      }
    }
    res.average_out.push_back(average);
  }
  res.sums_out = res.gathered_out;  // both decoders give the same average
  res.code_sums.assign(4 * l.packed_bytes(), 0);
  for (int64_t k = 0; k < 4 * l.packed_bytes(); ++k)
    res.code_sums[k] = static_cast<int8_t>(ref_code_sum(res.codes, l.packed_bytes(), W, k));
  return res;
}

// The same through `be`'s codec ops, on its device.
RangeResults device_form(Backend& be, Step& st, TensorRange r) {
  const CompressionPolicy& p = st.policy;
  const TernaryCoding c(p, st.seed);
  const DenseCoding dense(p);
  const RangeLayout l = p.layout(r);
  const int W = static_cast<int>(st.grads.size()), T = p.num_ternary(), N = p.num_tensors();
  std::vector<std::vector<Mem>> mem(W + 1);  // workers' gradients, and worker 0's copy for average_local
  std::vector<std::vector<Tensor>> views(W + 1);
  for (int w = 0; w <= W; ++w)
    for (int i = 0; i < N; ++i) {
      const std::vector<float>& g = st.grads[w == W ? 0 : w][i];
      mem[w].emplace_back(be, static_cast<int64_t>(g.size()), DType::kF32);
      mem[w].back().upload(g);
    }
  for (int w = 0; w <= W; ++w)
    for (auto& m : mem[w]) views[w].push_back(m.t());
  std::vector<const std::vector<Tensor>*> workers;
  for (int w = 0; w < W; ++w) workers.push_back(&views[w]);
  for (int w = 0; w <= W; ++w) p.check_grads(views[w], be.device());

  RangeResults res;
  Mem shared(be, T, DType::kF32);
  shared.upload(st.shared);
  std::vector<Mem> worker_scalers;
  std::vector<Tensor> ws;
  for (int w = 0; w < W; ++w) worker_scalers.emplace_back(be, T, DType::kF32, 0);
  for (int w = 0; w < W; ++w) {
    ws.push_back(worker_scalers[w].t());
    c.local_scalers(be, views[w], r, ws[w]);
    const std::vector<float> v = worker_scalers[w].download<float>();
    res.scalers.insert(res.scalers.end(), v.begin(), v.end());
    EXPECT_TRUE(worker_scalers[w].guards_intact());
  }
  {
    Mem m(be, T, DType::kF32, 0);
    c.max_local_scalers(be, ws, r, m.t());
    res.max_shared = m.download<float>();
    EXPECT_TRUE(m.guards_intact());
  }
  Mem codes(be, W * l.packed_bytes(), DType::kU8), zeros(be, T, DType::kI32);
  {  // zero codes outside the range stay as they were (-1)
    std::vector<int32_t> init(T, -1);
    zeros.upload(init);
  }
  for (int w = 0; w < W; ++w)
    c.encode_ternary(be, views[w], r, shared.t(), st.step, static_cast<uint32_t>(w),
                     codes.t().slice0(w * l.packed_bytes(), (w + 1) * l.packed_bytes()), w == 0 ? zeros.t() : Tensor());
  res.codes = codes.download<uint8_t>();
  for (int32_t z : zeros.download<int32_t>()) res.zeros.push_back(z);
  Mem sums(be, 4 * l.packed_bytes(), DType::kI8), f16(be, l.f16_elements(), DType::kF16),
      f32(be, l.f32_elements(), DType::kF32);
  c.sum_codes(be, codes.t(), l.packed_bytes(), W, r, sums.t());
  dense.encode_f16(be, workers, r, f16.t());
  dense.encode_f32(be, workers, r, f32.t());
  res.code_sums = sums.download<int8_t>();
  res.f16 = f16.download<half_bits>();
  res.f32 = f32.download<float>();
  auto decode_into = [&](std::vector<std::vector<float>>& out, bool gathered) {
    std::vector<Mem> m;
    std::vector<Tensor> t(N);
    for (int i = r.begin; i < r.end; ++i) {
      m.emplace_back(be, p.tensors()[i].numel, DType::kF32);
      m.back().upload(std::vector<float>(p.tensors()[i].numel, -7.f));
    }
    for (int i = r.begin; i < r.end; ++i) t[i] = m[i - r.begin].t();
    if (gathered)
      c.decode_ternary_gathered(be, codes.t(), l.packed_bytes(), W, r, shared.t(), t);
    else
      c.decode_ternary_sums(be, sums.t(), W, r, shared.t(), t);
    dense.decode_f16_sum(be, f16.t(), W, r, t);
    dense.decode_f32_sum(be, f32.t(), W, r, t);
    for (auto& x : m) {
      out.push_back(x.download<float>());
      EXPECT_TRUE(x.guards_intact());
    }
  };
  decode_into(res.gathered_out, true);
  decode_into(res.sums_out, false);
  std::vector<const std::vector<Tensor>*> aliased = workers;
  aliased[0] = &views[W];
  dense.average_local(be, aliased, r, views[W]);
  for (int i = r.begin; i < r.end; ++i) res.average_out.push_back(mem[W][i].download<float>());
  for (Mem* m : {&codes, &zeros, &sums, &f16, &f32}) EXPECT_TRUE(m->guards_intact());
  return res;
}

void expect_same(const RangeResults& a, const RangeResults& b, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(a.scalers.size(), b.scalers.size());
  for (size_t i = 0; i < a.scalers.size(); ++i) ASSERT_TRUE(same_float(a.scalers[i], b.scalers[i])) << "scaler " << i;
  ASSERT_EQ(a.max_shared.size(), b.max_shared.size());
  for (size_t i = 0; i < a.max_shared.size(); ++i)
    ASSERT_TRUE(same_float(a.max_shared[i], b.max_shared[i])) << "max scaler " << i;
  EXPECT_EQ(a.codes, b.codes);
  EXPECT_EQ(a.zeros, b.zeros);
  EXPECT_EQ(a.code_sums, b.code_sums);
  ASSERT_EQ(a.f16.size(), b.f16.size());
  for (size_t i = 0; i < a.f16.size(); ++i) ASSERT_TRUE(same_half(a.f16[i], b.f16[i])) << "f16 " << i;
  ASSERT_EQ(a.f32.size(), b.f32.size());
  for (size_t i = 0; i < a.f32.size(); ++i) ASSERT_TRUE(same_float(a.f32[i], b.f32[i])) << "f32 " << i;
  for (auto field : {&RangeResults::gathered_out, &RangeResults::sums_out, &RangeResults::average_out}) {
    const auto &x = a.*field, &y = b.*field;
    ASSERT_EQ(x.size(), y.size());
    for (size_t t = 0; t < x.size(); ++t) {
      ASSERT_EQ(x[t].size(), y[t].size());
      for (size_t i = 0; i < x[t].size(); ++i)
        ASSERT_TRUE(same_float(x[t][i], y[t][i]))
            << "tensor " << t << " element " << i << ": " << x[t][i] << " vs " << y[t][i];
    }
  }
}

// Three workers' gradients for `policy` and the shared scalers of the definition (the max of their scalers).
Step make_step(const CompressionPolicy& policy) {
  Step st{policy, 4242, {}, {}};
  for (int w = 0; w < 3; ++w) {
    std::vector<std::vector<float>> g;
    for (const auto& t : policy.tensors()) g.push_back(normal(t.numel, 300 + 10 * w + g.size(), 0.01f));
    st.grads.push_back(std::move(g));
  }
  st.shared.assign(policy.num_scalers(), 0.f);
  for (const TensorCodingPlan& t : policy.tensors())
    if (t.coding == GradCoding::kTernary)
      for (int w = 0; w < 3; ++w)
        st.shared[t.scaler_index] =
            std::max(st.shared[t.scaler_index], ref_scaler(st.grads[w][&t - policy.tensors().data()], 2.5f));
  return st;
}

std::vector<TensorRange> ranges_of(const CompressionPolicy& p) {
  const int n = p.num_tensors();
  std::vector<TensorRange> r = {p.all(), {n - 2, n}, {n - 1, n - 1}};
  if (n > 4) r.insert(r.end(), {{0, 3}, {3, n - 2}, {4, 4}});
  return r;
}

// The device form on `be` against the definitions (the CPU: bit for bit), for LeNet's policies (ternary + fp32,
// fp16 + fp32) and one of odd sizes (13, 8 and 1 elements: codes ending inside a byte, a one-element tensor).
void compare_with_reference(Backend& be) {
  const std::vector<std::pair<std::string, std::vector<ParamInfo>>> nets = {
      {"lenet", lenet_params()},
      {"odd sizes", {{"a", 13}, {"b", 8}, {"c", 1}, {"logits/weights", 6}, {"logits/biases", 3}}}};
  for (const auto& [net, params] : nets)
    for (int bits : {1, 16}) {
      CompressionFlags f;
      f.grad_bits = bits;
      f.clip_factor = 2.5f;
      f.size_to_binarize = net == "lenet" ? 100 : 1;  // LeNet's biases stay fp32
      const CompressionPolicy policy(f, params);
      Step st = make_step(policy);
      for (TensorRange r : ranges_of(policy)) {
        const RangeResults want = reference_form(st, r);
        const RangeResults got = device_form(be, st, r);
        expect_same(want, got,
                    net + " grad_bits " + std::to_string(bits) + " range [" + std::to_string(r.begin) + ", " +
                        std::to_string(r.end) + ") on " + be.name());
      }
    }
}

TEST(CodecDeviceForm, CpuBackendGivesTheDefinitionsBits) { compare_with_reference(cpu()); }

TEST(CodecDeviceForm, GradientsOnAnotherDeviceAreRejected) {
  const CompressionPolicy policy(CompressionFlags{}, {{"w", 4}});
  std::vector<float> g(4);
  const std::vector<Tensor> grads = {Tensor(g.data(), Shape{4}, DType::kF32, Device::cpu())};
  EXPECT_NO_THROW(policy.check_grads(grads, Device::cpu()));
  EXPECT_THROW(policy.check_grads(grads, Device::cuda(0)), Error);
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

TEST(CodecDeviceForm, CudaBackendGivesTheDefinitionsBits) {
  TG_REQUIRE_CUDA();
  compare_with_reference(*cuda().be);
}

}  // namespace
}  // namespace tg

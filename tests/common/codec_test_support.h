// What the codec tests share (codec_ops_test.cc: the ops; codec_range_test.cc: the schemes' range codings): the CPU
// backend and the CUDA one (or why there is none), device memory followed by guard bytes, random gradients, float and
// fp16 comparisons that treat NaNs alike, and the plain definitions the ops are checked against (the scaler's sums
// in ternary_math.h's documented order, the codes from ternarize_one, a code sum).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "common/random_inputs.h"
#include "terngrad/backend/backend.h"
#include "terngrad/core/buffer.h"
#include "terngrad/core/error.h"
#include "terngrad/math/ternary_math.h"

namespace tg::codec_test {

inline constexpr size_t kGuardBytes = 64;
inline constexpr uint8_t kGuardByte = 0xA5;
inline constexpr int64_t kSizes[] = {0, 1, 3, 4, 5, 1000003};
inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
inline constexpr float kInf = std::numeric_limits<float>::infinity();

inline Backend& cpu() {
  static std::unique_ptr<Backend> b = make_backend("cpu", BackendOptions{2});
  return *b;
}

// The CUDA backend, created once, or why there is none.
struct Cuda {
  std::unique_ptr<Backend> be;
  std::string skip;
};
inline Cuda& cuda() {
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
inline std::vector<float> normal(int64_t n, uint32_t seed, float stddev = 1e-3f) {
  return testing::normal_floats(n, seed, stddev);
}

inline bool same_float(float a, float b) {
  return std::memcmp(&a, &b, sizeof a) == 0 || (std::isnan(a) && std::isnan(b));
}
inline bool half_is_nan(half_bits h) { return (h.bits & 0x7c00u) == 0x7c00u && (h.bits & 0x3ffu) != 0; }
inline bool same_half(half_bits a, half_bits b) { return a.bits == b.bits || (half_is_nan(a) && half_is_nan(b)); }

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
inline float ref_scaler(const std::vector<float>& g, float clip_factor) {
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

inline std::vector<uint8_t> ref_encode(const std::vector<float>& g, float s, PhiloxKey key, uint32_t step,
                                       uint32_t tensor, int64_t* zeros) {
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

inline int ref_code_sum(const std::vector<uint8_t>& packed, int64_t stride, int workers, int64_t i) {
  int sum = 0;
  for (int w = 0; w < workers; ++w) sum += unpack_ternary(packed.data() + w * stride, i);
  return sum;
}

// The local max of the workers' scalers as GradientExchange forms it: from 0, a non-finite scaler as +Inf.
inline float ref_max_scaler(const std::vector<std::vector<float>>& xs, int64_t k) {
  float m = 0.f;
  for (const auto& x : xs) m = std::max(m, std::isfinite(x[k]) ? x[k] : kInf);
  return m;
}

}  // namespace tg::codec_test

// What the cuda_ops_check sources share (tools/cuda_ops_check.cc: conv, fc, bn, optim, reduce groups and main;
// tools/cuda_ops_check_amp.cc: the mixed-precision element-wise group): options, random host data, device
// tensors of any dtype and their transfers (f16/bf16 converted on the host with dtype.h's round-to-nearest-even
// conversions), timing, error statistics and the one report line per op and shape.
#pragma once

#include <cuda_runtime.h>
#include <omp.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "src/backend/cuda/cuda_backend.h"
#include "terngrad/backend/cuda_check.h"
#include "terngrad/core/dtype.h"
#include "terngrad/core/error.h"

namespace tg::ops_check {

constexpr double kH200Bandwidth = 4.8e12;  // bytes/s, the H200's HBM3e (datasheet)
constexpr int kTimedRuns = 5;

struct Options {
  std::string group = "all";
  bool small = false;
  BackendOptions backend;
};

inline int g_failures = 0;

// ---- host data -------------------------------------------------------------------------------------------
// Uniform floats in [lo, hi) from a 64-bit xorshift (fast enough for 100M-element tensors).
inline std::vector<float> randoms(int64_t n, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  std::vector<float> v(static_cast<size_t>(n));
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& e : v) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    e = lo + (hi - lo) * static_cast<float>(s >> 40) * (1.f / 16777216.f);
  }
  return v;
}

inline std::vector<double> to_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

// `count` distinct-enough indices in [0, n) (fixed seed), or all of them when n <= count.
inline std::vector<int64_t> sample(int64_t n, int64_t count, uint64_t seed) {
  std::vector<int64_t> idx;
  if (n <= count) {
    for (int64_t i = 0; i < n; ++i) idx.push_back(i);
    return idx;
  }
  uint64_t s = seed * 0x2545F4914F6CDD1Dull + 7;
  for (int64_t i = 0; i < count; ++i) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    idx.push_back(static_cast<int64_t>(s % static_cast<uint64_t>(n)));
  }
  idx.push_back(0), idx.push_back(n - 1);  // the ends too
  return idx;
}

// ---- device tensors --------------------------------------------------------------------------------------
struct Dev {
  Buffer buf;
  Tensor t;
  Dev(CudaBackend& be, const Shape& s, DType dt = DType::kF32)
      : buf(be.allocator(), static_cast<size_t>(std::max<int64_t>(s.numel(), 1)) * dtype_size(dt)),
        t(buf.data(), s, dt, be.device()) {}
};

inline void upload(Backend& be, const Tensor& dst, std::vector<float>& v) {
  be.copy(dst, Tensor(v.data(), dst.shape(), DType::kF32, Device::cpu()));
}
inline std::vector<float> download(Backend& be, const Tensor& src) {
  std::vector<float> v(static_cast<size_t>(src.numel()));
  be.copy(Tensor(v.data(), src.shape(), DType::kF32, Device::cpu()), src);
  return v;
}
inline void poison(Backend& be, const Tensor& t) { be.fill(t, std::nanf("")); }

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Median milliseconds of kTimedRuns calls of f, timed with events on the backend's stream.
inline double time_ms(CudaBackend& be, const std::function<void()>& f) {
  cudaEvent_t start, stop;
  TG_CUDA_CHECK(cudaEventCreate(&start));
  TG_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<float> ms;
  for (int i = 0; i < kTimedRuns; ++i) {
    TG_CUDA_CHECK(cudaEventRecord(start, be.stream()));
    f();
    TG_CUDA_CHECK(cudaEventRecord(stop, be.stream()));
    TG_CUDA_CHECK(cudaEventSynchronize(stop));
    float t = 0;
    TG_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  cudaEventDestroy(start), cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// ---- error statistics and the report line ----------------------------------------------------------------------
inline int64_t ulps(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4), std::memcpy(&ib, &b, 4);
  if (ia < 0) ia = INT32_MIN - ia;
  if (ib < 0) ib = INT32_MIN - ib;
  return std::llabs(static_cast<int64_t>(ia) - ib);
}

struct Stats {
  double max_abs = 0, max_rel = 0;
  int64_t max_ulps = 0, bad = 0, checked = 0;
  // got vs ref; scale: the reference's size for this element (sum |term|, or the tensor's max |ref|).
  void add(float got, double ref, double scale, double tol) {
    ++checked;
    if (!std::isfinite(got)) {
      ++bad;
      max_abs = max_rel = INFINITY;
      return;
    }
    const double err = std::fabs(static_cast<double>(got) - ref);
    const double rel = err / std::max(scale, 1e-30);
    max_abs = std::max(max_abs, err), max_rel = std::max(max_rel, rel);
    max_ulps = std::max(max_ulps, ulps(got, static_cast<float>(ref)));
    if (rel > tol) ++bad;
  }
  void merge(const Stats& o) {
    max_abs = std::max(max_abs, o.max_abs), max_rel = std::max(max_rel, o.max_rel);
    max_ulps = std::max(max_ulps, o.max_ulps), bad += o.bad, checked += o.checked;
  }
};

inline void report(const std::string& op, const std::string& shape, const Stats& st, double ms, const std::string& algo,
                   bool deterministic, bool det_required, const std::string& extra = "") {
  const bool pass = st.bad == 0 && st.checked > 0 && (deterministic || !det_required);
  if (!pass) ++g_failures;
  std::printf("%-22s %-30s abs %-9.3g rel %-9.3g ulps %-8" PRId64 " bad %" PRId64 "/%-8" PRId64
              " %9.3f ms  %-34s det %-3s %s%s\n",
              op.c_str(), shape.c_str(), st.max_abs, st.max_rel, st.max_ulps, st.bad, st.checked, ms, algo.c_str(),
              deterministic ? "yes" : "no", pass ? "PASS" : "FAIL", extra.c_str());
  std::fflush(stdout);
}

inline void report_error(const std::string& op, const std::string& shape, const std::string& what) {
  ++g_failures;
  std::printf("%-22s %-30s FAIL: %s\n", op.c_str(), shape.c_str(), what.c_str());
  std::fflush(stdout);
}

// Runs one case; an exception becomes a FAIL line (the next case still runs unless the device faulted).
inline void guarded(const std::string& op, const std::string& shape, const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& e) {
    report_error(op, shape, e.what());
  }
}

// ---- compute dtypes --------------------------------------------------------------------------------------------
// The value of v in dtype t (round to nearest even), as a float.
inline float round_to(DType t, float v) {
  if (t == DType::kF16) return half_to_float(float_to_half(v));
  if (t == DType::kBf16) return bf16_to_float(float_to_bf16(v));
  return v;
}
inline void round_all(DType t, std::vector<float>& v) {
  if (t == DType::kF32) return;
#pragma omp parallel for
  for (int64_t i = 0; i < static_cast<int64_t>(v.size()); ++i) v[i] = round_to(t, v[i]);
}
inline uint16_t bits16(DType t, float v) { return t == DType::kF16 ? float_to_half(v).bits : float_to_bf16(v).bits; }
inline float value16(DType t, uint16_t b) {
  return t == DType::kF16 ? half_to_float(half_bits{b}) : bf16_to_float(bf16_bits{b});
}
// " f16" / " bf16" after an op's name; nothing for f32 (the original lines).
inline std::string suffix(DType t) { return t == DType::kF32 ? "" : std::string(" ") + dtype_name(t); }

// dst (dtype t: F32, F16, BF16) = v, converted on the host.
inline void upload_as(Backend& be, const Tensor& dst, const std::vector<float>& v) {
  if (dst.dtype() == DType::kF32) {
    be.copy(dst, Tensor(const_cast<float*>(v.data()), dst.shape(), DType::kF32, Device::cpu()));
    return;
  }
  std::vector<uint16_t> b(v.size());
#pragma omp parallel for
  for (int64_t i = 0; i < static_cast<int64_t>(v.size()); ++i) b[i] = bits16(dst.dtype(), v[i]);
  be.copy(dst, Tensor(b.data(), dst.shape(), dst.dtype(), Device::cpu()));
}
// The values of src (F32, F16, BF16) as floats.
inline std::vector<float> download_as(Backend& be, const Tensor& src) {
  if (src.dtype() == DType::kF32) return download(be, src);
  std::vector<uint16_t> b(static_cast<size_t>(src.numel()));
  be.copy(Tensor(b.data(), src.shape(), src.dtype(), Device::cpu()), src);
  std::vector<float> v(b.size());
#pragma omp parallel for
  for (int64_t i = 0; i < static_cast<int64_t>(b.size()); ++i) v[i] = value16(src.dtype(), b[i]);
  return v;
}
// All bytes 0xFF: NaN in f32, f16 and bf16 ("not written yet").
inline void poison_any(Backend& be, const Tensor& t) {
  std::vector<uint8_t> ff(t.bytes(), 0xFF);
  be.copy(t, Tensor(ff.data(), Shape{static_cast<int64_t>(t.bytes())}, DType::kU8, Device::cpu()));
}
// Prints a SKIP line (not a failure) and returns true when the device does not run dtype t.
inline bool skip_dtype(CudaBackend& be, DType t, const std::string& op) {
  if (be.supports_compute(t)) return false;
  std::printf("%-26s SKIP: %s\n", (op + suffix(t)).c_str(), be.why_not(t).c_str());
  return true;
}

// Checks `got` at `idx` against ref(i, &value, &scale) in parallel; every element of got must be finite.
template <typename Ref>
Stats check_sampled(const std::vector<float>& got, const std::vector<int64_t>& idx, double tol, Ref ref) {
  std::vector<Stats> per(static_cast<size_t>(omp_get_max_threads()));
#pragma omp parallel for schedule(dynamic, 4)
  for (int64_t k = 0; k < static_cast<int64_t>(idx.size()); ++k) {
    double r, s;
    ref(idx[k], &r, &s);
    per[omp_get_thread_num()].add(got[idx[k]], r, s, tol);
  }
  Stats st;
  for (const Stats& p : per) st.merge(p);
  for (float v : got)
    if (!std::isfinite(v)) {
      ++st.bad;  // an unwritten (NaN-poisoned) or overflowed element outside the sample
      break;
    }
  return st;
}

// Every element of got against want, relative to the tensor's max |want| (at least 1), as
// tests/cuda_backend_test.cc's expect_close.
inline Stats check_full(const std::vector<float>& got, const std::vector<double>& want, double tol) {
  double scale = 1.0;
  for (double v : want) scale = std::max(scale, std::fabs(v));
  Stats st;
  for (size_t i = 0; i < got.size(); ++i) st.add(got[i], want[i], scale, tol);
  return st;
}

// The groups of tools/cuda_ops_check_amp.cc (amp), tools/cuda_ops_check_layers.cc (pool, lrn, concat) and
// tools/cuda_ops_check_codec.cc (codec).
void group_amp(CudaBackend& be, const Options& o);
void group_pool(CudaBackend& be, const Options& o);
void group_lrn(CudaBackend& be, const Options& o);
void group_concat(CudaBackend& be, const Options& o);
void group_codec(CudaBackend& be, const Options& o);

// --versions (tools/cuda_ops_check_versions.cc): the CUDA runtime, driver, cuDNN, cuBLAS and NCCL this process
// loaded, with their files; needs no GPU. Returns the exit status (0).
int print_versions();

}  // namespace tg::ops_check

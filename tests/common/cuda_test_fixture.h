// The CUDA backend tests' shared fixture (tests/cuda_backend_test.cc, tests/cuda_mixed_precision_test.cc): the
// CPU backend (the oracle) and the CUDA one created once, tensors on both with guard bytes after them and NaN
// before they are written, comparisons (same bits, or close relative to the CPU's largest magnitude), and a
// fixture that reports SKIPPED without a CUDA build or device and isolates a sticky device fault to the test
// that caused it.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "terngrad/backend/backend.h"
#include "terngrad/core/error.h"
#ifdef TG_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "src/backend/cuda/cuda_backend.h"
#endif

namespace tg::cuda_test {

constexpr size_t kGuardBytes = 64;
constexpr uint8_t kGuardByte = 0xA5;

// The backends, created once; `skip` says why there is no CUDA one.
struct Backends {
  std::unique_ptr<Backend> cpu, cuda;
  std::string skip;
};
inline Backends& backends() {
  static Backends b = [] {
    Backends r;
    r.cpu = make_backend("cpu", BackendOptions{2});
    if (!cuda_backend_compiled()) {
      r.skip = "this build has no CUDA backend (configure with -DTG_CUDA=ON)";
      return r;
    }
    try {
      r.cuda = make_backend("cuda:0");
    } catch (const Error& e) {
      r.skip = std::string("no usable CUDA device: ") + e.what();
    }
    return r;
  }();
  return b;
}

inline Tensor host_bytes(std::vector<uint8_t>& v) {
  return Tensor(v.data(), Shape{static_cast<int64_t>(v.size())}, DType::kU8, Device::cpu());
}

// One tensor's memory on one backend, followed by kGuardBytes guard bytes; all access through Backend::copy.
class Mem {
 public:
  Mem(Backend& be, const Shape& s, DType dt)
      : be_(&be), buf_(be.allocator(), static_cast<size_t>(s.numel()) * dtype_size(dt) + kGuardBytes) {
    t = Tensor(buf_.data(), s, dt, be.device());
    std::vector<uint8_t> guard(kGuardBytes, kGuardByte);
    be.copy(guard_tensor(), host_bytes(guard));
    std::vector<uint8_t> nan(t.bytes(), 0xFF);  // f32 NaN; any dtype: "not written yet"
    if (!nan.empty()) be.copy(t, Tensor(nan.data(), s, dt, Device::cpu()));
  }
  bool guard_intact() const {
    std::vector<uint8_t> guard(kGuardBytes);
    be_->copy(host_bytes(guard), guard_tensor());
    return std::all_of(guard.begin(), guard.end(), [](uint8_t b) { return b == kGuardByte; });
  }
  template <typename T>
  std::vector<T> read() const {
    std::vector<T> v(t.numel());
    if (!v.empty()) be_->copy(Tensor(v.data(), t.shape(), t.dtype(), Device::cpu()), t);
    return v;
  }
  template <typename T>
  void write(std::vector<T> v) {
    if (!v.empty()) be_->copy(t, Tensor(v.data(), t.shape(), t.dtype(), Device::cpu()));
  }
  Tensor t;

 private:
  Tensor guard_tensor() const {
    return Tensor(static_cast<uint8_t*>(buf_.data()) + t.bytes(), Shape{static_cast<int64_t>(kGuardBytes)}, DType::kU8,
                  be_->device());
  }
  Backend* be_;
  Buffer buf_;
};

// The same tensor on the CPU (c) and the GPU (g).
struct Pair {
  Mem c, g;
  Pair(const Shape& s, DType dt = DType::kF32) : c(*backends().cpu, s, dt), g(*backends().cuda, s, dt) {}
  template <typename T>
  void set(const std::vector<T>& v) {
    c.write(v), g.write(v);
  }
};

inline std::vector<float> random_floats(int64_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& e : v) e = u(gen);
  return v;
}

inline void expect_guards(const Pair& p, const std::string& what) {
  EXPECT_TRUE(p.c.guard_intact()) << what << ": CPU wrote past the end";
  EXPECT_TRUE(p.g.guard_intact()) << what << ": CUDA wrote past the end";
}

// Bit-identical outputs (any dtype).
inline void expect_same_bits(const Pair& p, const std::string& what) {
  expect_guards(p, what);
  auto a = p.c.read<uint8_t>(), b = p.g.read<uint8_t>();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) {
      size_t e = i / dtype_size(p.c.t.dtype());
      FAIL() << what << ": CPU and CUDA differ first at element " << e << " (byte " << i << ")";
    }
}

// |gpu - cpu| <= tol * max(1, max |cpu|) everywhere; NaN/Inf fail explicitly.
inline void expect_close(const Pair& p, const std::string& what, double tol = 1e-5) {
  expect_guards(p, what);
  auto a = p.c.read<float>(), b = p.g.read<float>();
  ASSERT_EQ(a.size(), b.size());
  double scale = 1.0;
  for (float v : a) {
    ASSERT_TRUE(std::isfinite(v)) << what << ": CPU produced a non-finite value";
    scale = std::max(scale, static_cast<double>(std::fabs(v)));
  }
  double worst = 0;
  size_t worst_i = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(std::isfinite(b[i])) << what << ": CUDA non-finite value at " << i;
    double e = std::fabs(static_cast<double>(b[i]) - a[i]);
    if (e > worst) worst = e, worst_i = i;
  }
  EXPECT_LE(worst / scale, tol) << what << ": worst element " << worst_i << " cpu " << a[worst_i] << " cuda "
                                << b[worst_i] << " (normalized error " << worst / scale << ")";
}

// "Test.Name: cudaErrorIllegalAddress (...)" once a test left the device faulted; empty before.
inline std::string& device_fault() {
  static std::string fault;
  return fault;
}

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!backends().cuda) GTEST_SKIP() << backends().skip;
    if (!device_fault().empty()) GTEST_SKIP() << "the device faulted in an earlier test: " << device_fault();
  }
  void TearDown() override {
#ifdef TG_HAVE_CUDA
    if (!backends().cuda || !device_fault().empty()) return;
    const cudaError_t status = cudaDeviceSynchronize();
    if (status == cudaSuccess) return;
    cudaGetLastError();  // clears an error that is not sticky
    const std::string what = std::string(cudaGetErrorName(status)) + " (" + cudaGetErrorString(status) + ")";
    if (cudaDeviceSynchronize() == cudaSuccess) {
      ADD_FAILURE() << "this test left a CUDA error behind: " << what;
      return;
    }
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    device_fault() = std::string(info->test_suite_name()) + "." + info->name() + ": " + what;
    ADD_FAILURE() << "device fault (sticky; the following tests are skipped): " << what;
#endif
  }
  Backend& cpu() { return *backends().cpu; }
  Backend& gpu() { return *backends().cuda; }
#ifdef TG_HAVE_CUDA
  CudaBackend& cuda() { return dynamic_cast<CudaBackend&>(gpu()); }
#endif
};

}  // namespace tg::cuda_test

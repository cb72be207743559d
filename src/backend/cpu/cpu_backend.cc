// CpuBackend: construction, memory, element-wise ops, reductions and softmax cross-entropy as plain loops over
// the backend's OpenMP threads (the ones oneDNN uses); the optimizer updates are in cpu_optimizer.cc. The oneDNN ops
// live in cpu_conv.cc, cpu_pool.cc, cpu_lrn.cc and cpu_inner_product.cc; batch norm (loops) in cpu_batch_norm.cc.
// Activation loops (add, relu, dropout, concat/split, reductions, softmax_xent) take any compute dtype:
// elements are read into f32, computed as in f32, and rounded once when written (cpu_dtype.h).
#include "src/backend/cpu/cpu_backend.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <type_traits>

#include "src/backend/cpu/cpu_dtype.h"
#include "terngrad/core/cpu_cores.h"
#include "terngrad/math/activation_math.h"

namespace tg {

namespace {
int resolve_threads(int threads) { return threads > 0 ? threads : available_cores(); }

void check_same_numel(const Tensor& a, const Tensor& b, const char* op) {
  TG_CHECK(a.numel() == b.numel(), "{}: element counts differ: {} vs {}", op, a.str(), b.str());
}

constexpr int64_t kGrain = 16384;  // elements per chunk below which loops run on one thread

template <typename T>
using Elem = std::remove_pointer_t<T>;  // the storage type dispatch_compute passes
}  // namespace

CpuBackend::CpuBackend(int threads)
    : threads_(resolve_threads(threads)), engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {
  set_compute_threads(threads_);  // oneDNN's runtime on Debian is OpenMP: one team for everything
}

CpuBackend::~CpuBackend() = default;

void CpuBackend::bind_thread() { set_compute_threads(threads_); }

std::string CpuBackend::name() const {
  const dnnl_version_t* v = dnnl_version();
  return fmt::format("cpu (oneDNN {}.{}.{}, {} threads)", v->major, v->minor, v->patch, threads_);
}

// ---- memory ----------------------------------------------------------------------------------------------
namespace {
// Host memory that remembers its live ranges (start -> bytes): the CPU backend's "device" memory.
class TrackedHostAllocator final : public Allocator {
 public:
  Device device() const override { return Device::cpu(); }
  void* allocate(size_t bytes) override {
    void* p = host_allocator().allocate(bytes);
    std::lock_guard<std::mutex> lock(mu_);
    ranges_[reinterpret_cast<uintptr_t>(p)] = std::max<size_t>(bytes, 1);
    return p;
  }
  void deallocate(void* ptr) noexcept override {
    if (!ptr) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ranges_.erase(reinterpret_cast<uintptr_t>(ptr));
    }
    host_allocator().deallocate(ptr);
  }
  bool owns(const void* ptr) const {
    const auto a = reinterpret_cast<uintptr_t>(ptr);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = ranges_.upper_bound(a);
    if (it == ranges_.begin()) return false;
    --it;
    return a < it->first + it->second;
  }

 private:
  mutable std::mutex mu_;
  std::map<uintptr_t, size_t> ranges_;
};

TrackedHostAllocator& tracked_allocator() {
  static TrackedHostAllocator* a = new TrackedHostAllocator;  // never destroyed: buffers may outlive backends
  return *a;
}
}  // namespace

Allocator& CpuBackend::allocator() { return tracked_allocator(); }

bool CpuBackend::is_host_memory(const Tensor& t) const { return !tracked_allocator().owns(t.raw()); }

void CpuBackend::upload_async_impl(const Tensor& dst, const Tensor& src, uint64_t /*after*/, uint64_t /*ticket*/) {
  copy_impl(dst, src);
}

void CpuBackend::download_async_impl(const Tensor& dst, const Tensor& src, uint64_t /*ticket*/) { copy_impl(dst, src); }

void CpuBackend::copy_impl(const Tensor& dst, const Tensor& src) {
  TG_CHECK(dst.bytes() == src.bytes(), "copy: sizes differ: {} vs {}", dst.str(), src.str());
  TG_CHECK(dst.device().is_cpu() && src.device().is_cpu(), "CPU backend copy between {} and {}", dst.str(), src.str());
  if (dst.raw() != src.raw() && dst.bytes()) std::memmove(dst.raw(), src.raw(), dst.bytes());
}

void CpuBackend::zero_impl(const Tensor& dst) {
  if (dst.bytes()) std::memset(dst.raw(), 0, dst.bytes());
}

void CpuBackend::fill_impl(const Tensor& dst, float value) {
  float* p = dst.data<float>();
  std::fill(p, p + dst.numel(), value);
}

// ---- element-wise ------------------------------------------------------------------------------------------
void CpuBackend::add_impl(const Tensor& a, const Tensor& b, const Tensor& out) {
  check_same_numel(a, b, "add");
  check_same_numel(a, out, "add");
  cpu::map_elements(
      "add", threads_, kGrain, [](int64_t, float va, float vb) { return va + vb; }, out, a, b);
}

void CpuBackend::axpy_impl(float alpha, const Tensor& x, const Tensor& y) {
  check_same_numel(x, y, "axpy");
  const float* px = x.data<float>();
  float* py = y.data<float>();
  parallel_for(
      x.numel(),
      [&](int64_t s, int64_t e) {
        for (int64_t i = s; i < e; ++i) py[i] += alpha * px[i];
      },
      kGrain);
}

void CpuBackend::scale_impl(float alpha, const Tensor& x) {
  float* p = x.data<float>();
  parallel_for(
      x.numel(),
      [&](int64_t s, int64_t e) {
        for (int64_t i = s; i < e; ++i) p[i] *= alpha;
      },
      kGrain);
}

void CpuBackend::relu_forward_impl(const Tensor& x, const Tensor& y) {
  check_same_numel(x, y, "relu");
  cpu::map_elements(
      "relu_forward", threads_, kGrain, [](int64_t, float v) { return relu_one(v); }, y, x);
}

void CpuBackend::relu_backward_impl(const Tensor& y, const Tensor& dy, const Tensor& dx) {
  check_same_numel(y, dy, "relu_backward");
  check_same_numel(y, dx, "relu_backward");
  cpu::map_elements(
      "relu_backward", threads_, kGrain, [](int64_t, float vy, float g) { return relu_grad_one(vy, g); }, dx, y, dy);
}

void CpuBackend::dropout_forward_impl(const Tensor& x, const Tensor& y, const Tensor& mask, float keep_prob,
                                      PhiloxKey key, uint32_t step, uint32_t salt) {
  check_same_numel(x, y, "dropout");
  check_same_numel(x, mask, "dropout");
  TG_CHECK(keep_prob > 0.f && keep_prob <= 1.f, "dropout keep_prob {} is not in (0, 1]", keep_prob);
  uint8_t* pm = mask.data<uint8_t>();
  const float inv = 1.f / keep_prob;
  cpu::map_elements(
      "dropout_forward", threads_, kGrain,
      [&](int64_t i, float v) {
        const uint8_t keep = philox_uniform(key, static_cast<uint64_t>(i), step, salt, 0) < keep_prob;
        pm[i] = keep;
        return keep ? v * inv : 0.f;
      },
      y, x);
}

void CpuBackend::dropout_backward_impl(const Tensor& dy, const Tensor& mask, float keep_prob, const Tensor& dx) {
  check_same_numel(dy, dx, "dropout_backward");
  const uint8_t* pm = mask.data<uint8_t>();
  const float inv = 1.f / keep_prob;
  cpu::map_elements(
      "dropout_backward", threads_, kGrain, [&](int64_t i, float g) { return pm[i] ? g * inv : 0.f; }, dx, dy);
}

void CpuBackend::concat_channels_impl(const std::vector<Tensor>& parts, const Tensor& out) {
  const int64_t c_out = out.shape().dim(-1);
  const int64_t rows = out.numel() / c_out;  // N*H*W
  // Rows of channels copied as bytes: any dtype (the front checked that the parts share the output's).
  const size_t es = dtype_size(out.dtype());
  char* po = static_cast<char*>(out.raw());
  int64_t offset = 0;
  for (const Tensor& p : parts) {
    const int64_t c = p.shape().dim(-1);
    TG_CHECK(p.numel() == rows * c, "concat: part {} does not match output {}", p.str(), out.str());
    const char* pp = static_cast<const char*>(p.raw());
    parallel_for(
        rows,
        [&](int64_t s, int64_t e) {
          for (int64_t r = s; r < e; ++r) std::memcpy(po + (r * c_out + offset) * es, pp + r * c * es, c * es);
        },
        256);
    offset += c;
  }
  TG_CHECK(offset == c_out, "concat: parts have {} channels, output {}", offset, c_out);
}

void CpuBackend::split_channels_impl(const Tensor& dout, const std::vector<Tensor>& dparts) {
  const int64_t c_out = dout.shape().dim(-1);
  const int64_t rows = dout.numel() / c_out;
  const size_t es = dtype_size(dout.dtype());
  const char* po = static_cast<const char*>(dout.raw());
  int64_t offset = 0;
  for (const Tensor& p : dparts) {
    const int64_t c = p.shape().dim(-1);
    if (p) {
      char* pp = static_cast<char*>(p.raw());
      parallel_for(
          rows,
          [&](int64_t s, int64_t e) {
            for (int64_t r = s; r < e; ++r) std::memcpy(pp + r * c * es, po + (r * c_out + offset) * es, c * es);
          },
          256);
    }
    offset += c;
  }
}

// ---- reductions (double accumulation in a fixed order: the result depends only on the data) ------------
// Eight independent accumulators, element i going to accumulator i % 8, then added in a fixed tree: the
// compiler vectorizes the eight chains (a single chain is bound by the latency of one double add per
// element; sum_squares over ResNet-50's weights was 4% of its training step).
namespace {
template <typename T, typename Term>
double sum8(const T* p, int64_t n, Term term) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += term(cpu::to_f32(p[i + j]));
  for (int j = 0; i < n; ++i, ++j) acc[j] += term(cpu::to_f32(p[i]));
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

template <typename Term>
double sum8(const Tensor& x, const char* op, Term term) {
  return cpu::dispatch_compute(x.dtype(), op, [&](auto* type) {
    return sum8(static_cast<const Elem<decltype(type)>*>(x.raw()), x.numel(), term);
  });
}
}  // namespace

double CpuBackend::sum_impl(const Tensor& x) {
  return sum8(x, "sum", [](float v) { return static_cast<double>(v); });
}

double CpuBackend::sum_squares_impl(const Tensor& x) {
  return sum8(x, "sum_squares", [](float v) { return static_cast<double>(v) * v; });
}

void CpuBackend::reduce_into_impl(Reduction r, const Tensor* xs, const float* weights, int count, const Tensor& out) {
  double acc = 0.0;
  for (int k = 0; k < count; ++k) {
    const double s = r == Reduction::kSum ? sum_impl(xs[k]) : sum_squares_impl(xs[k]);
    acc += static_cast<double>(weights[k]) * s;
  }
  *out.data<float>() = static_cast<float>(acc);
}

float CpuBackend::max_abs_impl(const Tensor& x) {
  return cpu::dispatch_compute(x.dtype(), "max_abs", [&](auto* type) {
    const auto* p = static_cast<const Elem<decltype(type)>*>(x.raw());
    float m = 0.f;
    for (int64_t i = 0; i < x.numel(); ++i) {
      const float a = std::fabs(cpu::to_f32(p[i]));
      if (std::isnan(a)) return a;  // NaN propagates (as on CUDA), whatever follows it
      if (a > m) m = a;
    }
    return m;
  });
}

// ---- softmax cross-entropy ------------------------------------------------------------------------------------
namespace {
// The loss of rows (N, K) of logits of storage type T: max, log-sum-exp and the loss in double from f32 logits.
template <typename T>
void softmax_xent_rows(const T* pl, int64_t n, int64_t k, const Tensor& labels, float label_smoothing,
                       const Tensor& probs, const Tensor& losses) {
  const int32_t* py = labels.data<int32_t>();
  float* pp = probs.data<float>();
  float* pout = losses.data<float>();
  for (int64_t r = 0; r < n; ++r)
    TG_CHECK(py[r] >= 0 && py[r] < k, "label {} of example {} is outside [0, {})", py[r], r, k);
  const float off = label_smoothing / static_cast<float>(k);
  const float on = 1.f - label_smoothing + off;
  for (int64_t r = 0; r < n; ++r) {
    const T* row = pl + r * k;
    float* prow = pp + r * k;
    float mx = cpu::to_f32(row[0]);
    for (int64_t j = 1; j < k; ++j) mx = std::max(mx, cpu::to_f32(row[j]));
    double z = 0;
    for (int64_t j = 0; j < k; ++j) z += std::exp(static_cast<double>(cpu::to_f32(row[j]) - mx));
    const double log_z = std::log(z);
    double loss = 0;
    for (int64_t j = 0; j < k; ++j) {
      double log_p = static_cast<double>(cpu::to_f32(row[j]) - mx) - log_z;
      prow[j] = static_cast<float>(std::exp(log_p));
      double target = (j == py[r]) ? on : off;
      if (target != 0) loss -= target * log_p;
    }
    pout[r] = static_cast<float>(loss);
  }
}
}  // namespace

void CpuBackend::softmax_xent_forward_impl(const Tensor& logits, const Tensor& labels, float label_smoothing,
                                           const Tensor& probs, const Tensor& losses) {
  const int64_t n = logits.shape().dim(0), k = logits.shape().dim(1);
  cpu::dispatch_compute(logits.dtype(), "softmax_xent_forward", [&](auto* type) {
    softmax_xent_rows(static_cast<const Elem<decltype(type)>*>(logits.raw()), n, k, labels, label_smoothing, probs,
                      losses);
  });
}

void CpuBackend::softmax_xent_backward_impl(const Tensor& probs, const Tensor& labels, float label_smoothing,
                                            float scale, const Tensor& dlogits) {
  const int64_t n = probs.shape().dim(0), k = probs.shape().dim(1);
  const float* pp = probs.data<float>();
  const int32_t* py = labels.data<int32_t>();
  const float off = label_smoothing / static_cast<float>(k);
  const float on = 1.f - label_smoothing + off;
  cpu::dispatch_compute(dlogits.dtype(), "softmax_xent_backward", [&](auto* type) {
    using T = Elem<decltype(type)>;
    T* pd = static_cast<T*>(dlogits.raw());
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < k; ++j)
        pd[r * k + j] = cpu::from_f32<T>(scale * (pp[r * k + j] - (j == py[r] ? on : off)));
  });
}

}  // namespace tg

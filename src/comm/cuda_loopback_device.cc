// The CUDA LoopbackDevice: copies (cudaMemcpyAsync, device to device) and the reduction kernel
// (cuda_loopback_reduce.cu) queued on the rank's stream, one CUDA event per mark (no timing), the stream's state by
// cudaStreamQuery. Compiled only in CUDA builds.
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <array>

#include "src/comm/cuda_device_scope.h"
#include "src/comm/cuda_loopback_reduce.h"
#include "terngrad/comm/loopback_device.h"
#include "terngrad/core/error.h"

namespace tg {

namespace {

using comm_detail::LoopbackReduceKind;

LoopbackReduceKind reduce_kind(DType dtype, ReduceOp op) {
  const bool sum = op == ReduceOp::kSum;
  switch (dtype) {
    case DType::kF32:
      return sum ? LoopbackReduceKind::kF32Sum : LoopbackReduceKind::kF32Max;
    case DType::kI32:
      return sum ? LoopbackReduceKind::kI32Sum : LoopbackReduceKind::kI32Max;
    case DType::kI8:
      return sum ? LoopbackReduceKind::kI8Sum : LoopbackReduceKind::kI8Max;
    case DType::kF16:
      if (sum) return LoopbackReduceKind::kF16Sum;
      break;
    case DType::kBf16:
      if (sum) return LoopbackReduceKind::kBf16Sum;
      break;
    default:
      break;
  }
  TG_THROW("loopback reduction: no CUDA reduction {} for {}", enum_name(op), dtype_name(dtype));
}

class CudaLoopbackDevice final : public LoopbackDevice {
 public:
  CudaLoopbackDevice(int device, void* stream) : device_(device), stream_(stream) {
    comm_detail::CudaDeviceScope scope(device_);
    for (cudaEvent_t& e : events_) {
      const cudaError_t r = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
      if (r != cudaSuccess) {
        destroy_events();
        check(r, "cudaEventCreateWithFlags");
      }
      ++created_;
    }
  }
  ~CudaLoopbackDevice() override {
    comm_detail::CudaDeviceScope scope(device_, /*best_effort=*/true);
    destroy_events();
  }
  CudaLoopbackDevice(const CudaLoopbackDevice&) = delete;
  CudaLoopbackDevice& operator=(const CudaLoopbackDevice&) = delete;

  Device device() const override { return Device::cuda(device_); }
  void* stream() const override { return stream_; }
  void* use_stream(void* stream) override {
    void* previous = stream_;
    stream_ = stream;
    return previous;
  }
  std::unique_ptr<LoopbackDevice> another() const override {
    return std::make_unique<CudaLoopbackDevice>(device_, stream_);
  }

  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    comm_detail::CudaDeviceScope scope(device_);
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, native()), "cudaMemcpyAsync");
  }
  void reduce(void* dst, const void* const* srcs, int sources, int64_t count, DType dtype, ReduceOp op) override {
    TG_CHECK(sources >= 1 && sources <= comm_detail::LoopbackSources::kMax, "loopback reduction: {} sources (1 to {})",
             sources, comm_detail::LoopbackSources::kMax);
    comm_detail::LoopbackSources s{};
    for (int k = 0; k < sources; ++k) s.p[k] = srcs[k];
    s.n = sources;
    comm_detail::CudaDeviceScope scope(device_);
    check(comm_detail::launch_loopback_reduce(dst, s, count, reduce_kind(dtype, op), stream_),
          "the loopback reduction's launch");
  }
  void record(Mark mark) override {
    comm_detail::CudaDeviceScope scope(device_);
    check(cudaEventRecord(event(mark), native()), "cudaEventRecord");
  }
  void wait_for(const LoopbackDevice& other, Mark mark) override {
    const auto* o = dynamic_cast<const CudaLoopbackDevice*>(&other);
    TG_CHECK(o != nullptr, "loopback on cuda:{}: a peer on {} (every rank of a group on one kind of device)", device_,
             other.device().str());
    comm_detail::CudaDeviceScope scope(device_);
    check(cudaStreamWaitEvent(native(), o->event(mark), 0), "cudaStreamWaitEvent");
  }
  bool idle() override {
    comm_detail::CudaDeviceScope scope(device_);
    const cudaError_t e = cudaStreamQuery(native());
    if (e == cudaErrorNotReady) return false;
    check(e, "cudaStreamQuery");
    return true;
  }
  std::string own_error() noexcept override {
    try {
      comm_detail::CudaDeviceScope scope(device_, /*best_effort=*/true);
      const cudaError_t e = cudaStreamQuery(native());
      if (e == cudaSuccess || e == cudaErrorNotReady) return {};
      return fmt::format("cuda:{}: the stream reports {} ({})", device_, cudaGetErrorName(e), cudaGetErrorString(e));
    } catch (...) {
      return "cuda:" + std::to_string(device_) + ": the stream's state could not be read";
    }
  }

 private:
  void destroy_events() noexcept {
    for (int k = 0; k < created_; ++k) cudaEventDestroy(events_[static_cast<size_t>(k)]);  // freed once complete
    created_ = 0;
  }
  cudaStream_t native() const { return static_cast<cudaStream_t>(stream_); }
  cudaEvent_t event(Mark mark) const { return events_[static_cast<size_t>(mark)]; }
  void check(int result, const char* what) const {
    if (result == cudaSuccess) return;
    const cudaError_t e = static_cast<cudaError_t>(result);
    TG_THROW("loopback on cuda:{}: {} failed: {} ({})", device_, what, cudaGetErrorName(e), cudaGetErrorString(e));
  }

  int device_;
  void* stream_;
  std::array<cudaEvent_t, kMarks> events_{};
  int created_ = 0;
};

}  // namespace

std::unique_ptr<LoopbackDevice> make_cuda_loopback_device(int device, void* stream) {
  return std::make_unique<CudaLoopbackDevice>(device, stream);
}

}  // namespace tg

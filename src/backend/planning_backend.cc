// The CUDA stand-in of make_planning_backend (planning_backend.h; backend.cc parses the device): every hook refuses,
// but for the two workspace queries a net's setup makes, which answer as cuda_pool.cc and cuda_lrn.cc do (0 bytes).
#include "terngrad/backend/planning_backend.h"

#include <type_traits>

namespace tg {

namespace {

class RefusingAllocator final : public Allocator {
 public:
  explicit RefusingAllocator(Device d) : device_(d) {}
  Device device() const override { return device_; }
  void* allocate(size_t bytes) override {
    TG_THROW("{}: a planning backend allocates nothing (asked for {} bytes)", device_.str(), bytes);
  }
  void deallocate(void*) noexcept override {}

 private:
  Device device_;
};

class CudaPlanningBackend final : public Backend {
 public:
  explicit CudaPlanningBackend(int index) : device_(Device::cuda(index)), allocator_(device_) {}
  Device device() const override { return device_; }
  std::string name() const override { return fmt::format("{} (planned: no GPU used)", device_.str()); }
  Allocator& allocator() override { return allocator_; }
  Allocator& staging_allocator() override { return allocator_; }
  bool supports_compute(DType t) const override { return is_compute_dtype(t); }
  std::string why_not(DType t) const override {
    return supports_compute(t) ? "" : fmt::format("{} is not a compute dtype", dtype_name(t));
  }

 protected:
  void synchronize_impl() override {}
  void record_fence_impl(uint64_t) override {}
  void upload_async_impl(const Tensor&, const Tensor&, uint64_t, uint64_t) override { refuse("upload_async"); }
  void download_async_impl(const Tensor&, const Tensor&, uint64_t) override { refuse("download_async"); }
  void wait_transfer_impl(uint64_t) override {}

  // The hooks: the size_t ones are the workspace queries (pool_workspace_bytes, lrn_workspace_bytes), 0 on CUDA.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#define TG_PLANNING_IMPL(ret, name, params) \
  ret name params override { return answer<ret>(#name); }
  TG_BACKEND_IMPLS(TG_PLANNING_IMPL)
#undef TG_PLANNING_IMPL
#pragma GCC diagnostic pop

 private:
  template <typename R>
  R answer(const char* op) const {
    if constexpr (std::is_same_v<R, size_t>)
      return 0;
    else
      refuse(op);
  }
  [[noreturn]] void refuse(const char* op) const {
    TG_THROW("{}: {} on a planning backend (it only answers what a memory plan needs)", device_.str(), op);
  }
  Device device_;
  RefusingAllocator allocator_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_planning_backend(int index) { return std::make_unique<CudaPlanningBackend>(index); }

}  // namespace tg

// The host's LoopbackDevice: copies and reductions run at once on the calling thread (the rendezvous between phases
// orders them), marks are nothing, the "stream" is always idle.
#include <algorithm>
#include <cstring>

#include "src/comm/reduce_into.h"
#include "terngrad/comm/loopback_device.h"
#include "terngrad/core/error.h"

namespace tg {

namespace {

// The reduction walks the elements in chunks of this many bytes, so that the partial sums stay in cache while every
// source is added to them.
constexpr size_t kChunkBytes = size_t{64} << 10;

class HostLoopbackDevice final : public LoopbackDevice {
 public:
  Device device() const override { return Device::cpu(); }
  void* stream() const override { return nullptr; }
  void* use_stream(void*) override { return nullptr; }
  std::unique_ptr<LoopbackDevice> another() const override { return std::make_unique<HostLoopbackDevice>(); }

  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0) std::memcpy(dst, src, bytes);
  }
  void reduce(void* dst, const void* const* srcs, int sources, int64_t count, DType dtype, ReduceOp op) override {
    TG_CHECK(sources >= 1 && sources <= kMaxSources, "loopback reduction: {} sources (1 to {})", sources, kMaxSources);
    const size_t elem = dtype_size(dtype), total = static_cast<size_t>(count) * elem;
    if (!chunk_) chunk_.reset(new uint8_t[kChunkBytes]);
    const size_t chunk = kChunkBytes / elem * elem;
    for (size_t off = 0; off < total; off += chunk) {
      const size_t bytes = std::min(chunk, total - off);
      std::memcpy(chunk_.get(), static_cast<const uint8_t*>(srcs[0]) + off, bytes);
      for (int s = 1; s < sources; ++s)
        comm_detail::reduce_into(chunk_.get(), static_cast<const uint8_t*>(srcs[s]) + off, bytes, dtype, op);
      std::memcpy(static_cast<uint8_t*>(dst) + off, chunk_.get(), bytes);  // after every source's chunk was read
    }
  }
  void record(Mark) override {}
  void wait_for(const LoopbackDevice&, Mark) override {}
  bool idle() override { return true; }
  std::string own_error() noexcept override { return {}; }

 private:
  std::unique_ptr<uint8_t[]> chunk_;
};

}  // namespace

std::unique_ptr<LoopbackDevice> make_host_loopback_device() { return std::make_unique<HostLoopbackDevice>(); }

}  // namespace tg

// The CUDA loopback device's reduction kernel (cuda_loopback_reduce.cu), behind a plain C++ interface so that the
// device class (cuda_loopback_device.cc) needs no CUDA compiler. Internal to src/comm; CUDA builds only.
#pragma once

#include <cstdint>

namespace tg::comm_detail {

// Which element type and combination; the same rounding as reduce_into (reduce_into.h).
enum class LoopbackReduceKind : int { kF32Sum, kF32Max, kI32Sum, kI32Max, kI8Sum, kI8Max, kF16Sum, kBf16Sum };

struct LoopbackSources {
  static constexpr int kMax = 16;
  const void* p[kMax];
  int n;
};

// dst[i] = fold of srcs.p[0..n)[i] in order, over count elements, queued on `stream` (a cudaStream_t); returns the
// launch's cudaError_t.
int launch_loopback_reduce(void* dst, const LoopbackSources& srcs, int64_t count, LoopbackReduceKind kind,
                           void* stream);

}  // namespace tg::comm_detail

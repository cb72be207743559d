// LoopbackDevice: what a LoopbackCommunicator (loopback_communicator.h) needs from one rank's device: copies and
// reductions queued on the rank's stream, marks between the ranks' streams, and the stream's state. Host memory
// (make_host_loopback_device: the calls run at once on the calling thread, marks are nothing) or one GPU's memory
// (make_cuda_loopback_device, CUDA builds: cudaMemcpyAsync and a reduction kernel on the stream, a CUDA event per
// mark). Driven by its rank's thread; marks are read by the other ranks' threads (wait_for), after a rendezvous.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "terngrad/comm/communicator.h"
#include "terngrad/core/device.h"
#include "terngrad/core/dtype.h"

namespace tg {

class LoopbackDevice {
 public:
  static constexpr int kMaxSources = 16;  // reduce()'s sources: the ranks of one loopback group at most
  // The marks of one collective, one per phase: this rank's buffers are ready (entered), its slice is reduced, and
  // it has read everything it reads of the others' buffers (done).
  enum class Mark : uint8_t { kEntered, kReduced, kDone };
  static constexpr int kMarks = 3;

  virtual ~LoopbackDevice() = default;

  virtual Device device() const = 0;
  // The stream later calls are queued on (a cudaStream_t as void*; nullptr on the host), and its replacement
  // (returns the previous one), as Communicator::use_stream.
  virtual void* stream() const = 0;
  virtual void* use_stream(void* stream) = 0;
  // Another device object of the same device and stream, with marks of its own (a split's communicator).
  virtual std::unique_ptr<LoopbackDevice> another() const = 0;

  // Queued on the stream: dst = src (bytes; no overlap), and dst[i] = (((srcs[0][i] op srcs[1][i]) op srcs[2][i]) ...)
  // over count elements, each combination rounded as reduce_into's (comm/reduce_into.h: f32/i8/i32 sum and max, f16
  // and bf16 sum): every rank's slice reduced in rank order gives every rank the same bits as the host's. dst may be
  // one of the sources (element by element in place).
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  // srcs: `sources` pointers (1 to kMaxSources).
  virtual void reduce(void* dst, const void* const* srcs, int sources, int64_t count, DType dtype, ReduceOp op) = 0;
  // `mark` recorded on the stream now; the stream waits (without the host waiting) for `other`'s last record of it.
  virtual void record(Mark mark) = 0;
  virtual void wait_for(const LoopbackDevice& other, Mark mark) = 0;
  // Whether everything queued on the stream so far has finished (throws on a device error).
  virtual bool idle() = 0;
  // "" while the device reports no error of its own on this rank's stream, else one line naming it.
  virtual std::string own_error() noexcept = 0;
};

std::unique_ptr<LoopbackDevice> make_host_loopback_device();
#if TG_HAVE_CUDA
// `stream`: the rank's stream on GPU `device` (nullptr: the legacy default stream).
std::unique_ptr<LoopbackDevice> make_cuda_loopback_device(int device, void* stream);
#endif

}  // namespace tg

// Communicator: the collectives data-parallel ranks use (all-reduce, reduce-scatter, all-gather, broadcast,
// barrier), sub-groups (split) and the byte counters every call adds to. A rank is one device's part of the
// exchange. Implementations: MpiCommunicator (mpi_communicator.h: one rank per process, host memory),
// ThreadCommunicator (thread_communicator.h: several ranks inside one process, one thread each, host memory),
// NcclCommunicator (nccl_communicator.h, CUDA builds: one rank per GPU, device memory, stream-ordered) and
// CompositeCommunicator (composite_communicator.h: P processes x R threads as one group of P*R ranks). Buffers
// are raw pointers plus the Device they live on (or Tensors); an implementation refuses devices it cannot reach
// with an error naming both, and reduction types it cannot reduce with an error listing those it can
// (supports()).
//
// In place: reduce_scatter may take recv == send + rank() * count elements, allgather send == recv + rank() *
// send_bytes (MPI's and NCCL's in-place forms); any other overlap of send and recv is refused.
//
// Byte accounting, per call and per rank (N = size(), n = payload bytes of this rank):
//   allreduce:      payload n, moved 2(N-1)/N * n   (ring all-reduce: reduce-scatter + all-gather)
//   reduce_scatter: payload n = N * count * element size (the whole send buffer), moved (N-1)/N * n
//                   (the ring's reduce-scatter half: every other rank's part of this rank's block arrives)
//   allgather:      payload n (the send block), moved (N-1) * n   (every other rank's block arrives)
//   broadcast:      payload n, moved n on every rank when N > 1   (pipelined ring)
//   barrier, split: nothing (split is set-up, not step traffic).
// These are the algorithm's costs, the same for every implementation, so runs compare across transports.
// The public methods are non-virtual: they check arguments, count bytes and call the *_impl.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "terngrad/core/device.h"
#include "terngrad/core/dtype.h"
#include "terngrad/core/enum_names.h"
#include "terngrad/core/tensor.h"

namespace tg {

class ProgressWatchdog;

enum class ReduceOp : uint8_t { kSum, kMax };
template <>
struct EnumNames<ReduceOp> : EnumNamesBase {
  static constexpr const char* kFlag = "reduce op";
  static constexpr EnumName<ReduceOp> kList[] = {{ReduceOp::kSum, "sum"}, {ReduceOp::kMax, "max"}};
};

// Whether dtype/op is one of the combinations every communicator supports (f32/i8/i32 sum and max, f16 sum).
bool reduce_supported(DType dtype, ReduceOp op);

struct CommStats {
  uint64_t calls = 0;
  uint64_t payload_bytes = 0;  // bytes handed to the collectives by this rank
  uint64_t moved_bytes = 0;    // bytes the algorithm moves into this rank (see the file comment)
  CommStats& operator+=(const CommStats& o) {
    calls += o.calls;
    payload_bytes += o.payload_bytes;
    moved_bytes += o.moved_bytes;
    return *this;
  }
};

// The implementation hooks of a communicator, one X(return type, name, (parameters)) each; a communicator
// declares them all with
//   #define TG_DECLARE_COMM_IMPL(ret, name, params) ret name params override;
//   TG_COMMUNICATOR_IMPLS(TG_DECLARE_COMM_IMPL)
//   #undef TG_DECLARE_COMM_IMPL
#define TG_COMMUNICATOR_IMPLS(X)                                                                                       \
  X(void, allreduce_impl, (void* buffer, int64_t count, DType dtype, ReduceOp op, Device device))                      \
  X(void, reduce_scatter_impl, (const void* send, void* recv, int64_t count, DType dtype, ReduceOp op, Device device)) \
  X(void, allgather_impl, (const void* send, void* recv, size_t send_bytes, Device device))                            \
  X(void, broadcast_impl, (void* buffer, size_t bytes, int root, Device device))                                       \
  X(void, barrier_impl, ())                                                                                            \
  X(std::unique_ptr<Communicator>, split_impl, (int color, int key))

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;  // "local (rank 2 of 4)", "mpi (rank 0 of 16)"

  // In place: buffer (count elements of dtype) becomes the element-wise reduction over all ranks.
  // Every implementation supports F32 Sum/Max, I8 Sum/Max (int8 sums wrap past 127: callers keep
  // |sum| <= 127), I32 Sum/Max and F16 Sum (each combination adds in fp32 and rounds to fp16); some add more
  // (BF16 Sum: ThreadCommunicator, NcclCommunicator). supports() says which.
  void allreduce(void* buffer, int64_t count, DType dtype, ReduceOp op, Device device = Device::cpu());
  void allreduce(const Tensor& t, ReduceOp op) { allreduce(t.raw(), t.numel(), t.dtype(), op, t.device()); }
  // recv (count elements) = the element-wise reduction over all ranks of block rank() of send (size() * count
  // elements, rank-major: block k is elements [k * count, (k + 1) * count)). recv may be send + rank() * count
  // elements (in place). The same dtype/op combinations as allreduce (supports()); each implementation documents
  // its summation order (ThreadCommunicator: rank order, as its allreduce).
  void reduce_scatter(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                      Device device = Device::cpu());
  // recv (size() * send_bytes) = every rank's send block in rank order. send may be recv + rank() * send_bytes
  // (in place).
  void allgather(const void* send, void* recv, size_t send_bytes, Device device = Device::cpu());
  // buffer on every rank becomes root's buffer.
  void broadcast(void* buffer, size_t bytes, int root, Device device = Device::cpu());
  void barrier();

  // Collective over all ranks of this communicator: the ranks passing the same color >= 0 form one new
  // communicator, ranked by (key, rank in this one); a rank passing color < 0 joins none and gets nullptr. The
  // new communicator is independent of this one: its own byte counters, and it may be driven by another thread
  // than this one (one thread at a time per communicator, as always). Implementations say how their splits
  // relate to the parent (e.g. whether an abort reaches them).
  std::unique_ptr<Communicator> split(int color, int key);

  // Device communicators (NCCL) enqueue their collectives on a CUDA stream: this makes `stream` (a cudaStream_t)
  // the one later collectives go on and returns the previous one (the gradient exchange moves its groups to the
  // backend's side stream for a step, then back). Host communicators have no stream: nullptr, nothing changes.
  virtual void* use_stream(void* stream) {
    (void)stream;
    return nullptr;
  }

  // Whether allreduce accepts dtype/op here. The default is reduce_supported() (the set above).
  virtual bool supports(DType dtype, ReduceOp op) const { return reduce_supported(dtype, op); }
  // "f32 sum, f32 max, ...": every combination supports() accepts, for error messages.
  std::string supported_text() const;

  const CommStats& stats() const { return stats_; }

  // Every collective of this communicator enters and leaves `watchdog` (progress_watchdog.h); nullptr: none. Set
  // before the collectives run; the watchdog outlives them.
  void set_watchdog(ProgressWatchdog* watchdog) { watchdog_ = watchdog; }

  // The byte model of the file comment, exposed for reports and tests.
  static uint64_t allreduce_moved_bytes(uint64_t payload, int size);
  static uint64_t allgather_moved_bytes(uint64_t payload, int size);
  static uint64_t reduce_scatter_moved_bytes(uint64_t payload, int size);  // payload: the whole send buffer

 protected:
  // What each communicator implements: one list (TG_COMMUNICATOR_IMPLS below) declares the hooks here and in
  // every communicator, as the Backend's do.
#define TG_DECLARE_COMM_IMPL(ret, name, params) virtual ret name params = 0;
  TG_COMMUNICATOR_IMPLS(TG_DECLARE_COMM_IMPL)
#undef TG_DECLARE_COMM_IMPL

 private:
  CommStats stats_;
  ProgressWatchdog* watchdog_ = nullptr;
};

}  // namespace tg

// GradientExchange: one replica's part of a step's gradient exchange (DESIGN.md section 3, steps 3-7) for its L
// local workers (the workers computing on its device), among the P ranks of a communicator over replicas (MPI
// processes with one replica each, or the replicas of one process: train/replica_threads.h), called "processes"
// below: N = P * L workers in all, global worker index = rank * L + local.
//   1. scalers: each local worker's per-tensor scalers, the max over local workers, then all-reduce MAX over
//      the processes (every worker then uses the same s per tensor);
//   2. codes: each local worker's ternary codes (Philox keyed by its global index); allgather2 gathers every
//      worker's packed 2-bit codes (the process sends its L blocks), allreduce8 sums codes as int8 (local
//      workers summed first; exact up to 127 workers); fp16/fp32 tensors are summed over the local workers,
//      then all-reduced over the processes;
//   3. decode: the gradient tensors of the target workers (the first worker of each replica) are overwritten
//      with the average over all N workers.
// Results are the same bits for any bucketing, overlapped or not. Ternary code sums are exact integers, so they
// do not depend on how the N workers are split into processes either; fp32/fp16 sums are formed inside each
// process first (worker order), then across processes, so with several workers per process their rounding
// follows that grouping (as for any all-reduce).
//
// Buckets and overlap (--bucket_mb, --overlap): tensors are grouped into buckets of about bucket_mb of fp32
// gradient in the order backward produces them (the last tensors first). The trainer reports progress from
// inside the last local worker's backward (tensors_ready); a bucket's scalers are computed as soon as it is
// complete, and a communication thread runs its collectives while backward computes the next bucket. All
// CPU work (scalers, encode, decode) runs on the compute thread's team, between layers (progress) or in
// finish(); the communication thread only waits on the network. Collectives are posted in one fixed order,
// scalers(0), data(0), scalers(1), data(1), ..., identical on every process, as MPI requires. Without
// overlap (or with a single process) the whole gradient is one bucket exchanged in finish() on the calling
// thread.
//
// Devices: every buffer lives on the replica's backend and every codec operation is a Backend op (the device
// form of GradientCodec), so the same code runs on the CPU and on a GPU and no gradient leaves its device; the
// communicator gets device pointers (NCCL on GPUs). On the CPU the shared scalers are checked every step
// (a non-finite one stops every worker with the same error); on a GPU that check would cost a host
// synchronization per bucket, so a non-finite scaler there gives zero codes and NaN averages, which the next
// step's loss check reports.
//
// --exchange auto picks allgather2 below 8 workers and allreduce8 from 8 on.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "terngrad/backend/backend.h"
#include "terngrad/comm/communicator.h"
#include "terngrad/compress/gradient_codec.h"
#include "terngrad/core/buffer.h"
#include "terngrad/core/enum_names.h"
#include "terngrad/core/phase_times.h"

namespace tg {

class CommunicationThread;
class Timeline;

enum class ExchangeMode : uint8_t { kAuto, kAllgather2, kAllreduce8 };
template <>
struct EnumNames<ExchangeMode> : EnumNamesBase {
  static constexpr const char* kFlag = "--exchange";
  static constexpr EnumName<ExchangeMode> kList[] = {{ExchangeMode::kAuto, "auto"},
                                                     {ExchangeMode::kAllgather2, "allgather2"},
                                                     {ExchangeMode::kAllreduce8, "allreduce8"}};
};
// kAuto -> kAllgather2 for num_workers < 8, kAllreduce8 otherwise; explicit modes stay.
ExchangeMode resolve_exchange_mode(ExchangeMode m, int num_workers);

struct ExchangeOptions {
  ExchangeMode mode = ExchangeMode::kAuto;
  uint64_t seed = 1;
  double bucket_mb = 25;  // MiB of fp32 gradient per bucket (with overlap)
  bool overlap = true;    // buckets exchanged by a communication thread while backward runs
};

// Bytes of one step. The per-worker figures follow the byte model of communicator.h over all N workers, as if
// every worker were its own rank, so runs compare across process layouts; process_wire_bytes is what this
// process's collectives moved (0 with a single process).
struct ExchangeStats {
  uint64_t payload_bytes = 0;       // bytes a worker hands to collectives
  uint64_t moved_bytes = 0;         // bytes the algorithms move per worker
  uint64_t fp32_payload_bytes = 0;  // the same step sent as fp32 (4 bytes per element)
  uint64_t fp32_moved_bytes = 0;    // ... and what a ring all-reduce of it moves per worker
  uint64_t process_wire_bytes = 0;  // moved into this process by its collectives (byte model, P ranks)
};

class GradientExchange {
 public:
  // backend: the replica's device, where the gradients and the exchange's buffers live and its codec ops run.
  // worker_grads[l]: local worker l's gradient, one f32 tensor on that device per policy tensor (read; the
  // targets' are overwritten with the average). targets: local workers whose gradients receive the average.
  // processes: the communicator over replicas, or nullptr for this replica alone; with overlap its
  // collectives are called from the communication thread only, while a step is in progress.
  GradientExchange(Backend& backend, const CompressionPolicy& policy, std::vector<std::vector<Tensor>> worker_grads,
                   std::vector<int> targets, Communicator* processes, const ExchangeOptions& options,
                   Timeline* timeline = nullptr);
  ~GradientExchange();
  GradientExchange(const GradientExchange&) = delete;
  GradientExchange& operator=(const GradientExchange&) = delete;

  // ---- one step, from the compute thread ----
  void begin(uint32_t step);
  // Tensors [first, num_tensors) are final on every local worker (backward runs from the last tensor down).
  void tensors_ready(int first);
  // Encodes and decodes the buckets whose collectives finished; never blocks on the network.
  void progress();
  // Blocks until every bucket is decoded into the targets; returns the step's bytes.
  ExchangeStats finish();
  // begin + tensors_ready(0) + finish.
  ExchangeStats run(uint32_t step);

  ExchangeMode mode() const { return mode_; }
  int num_workers() const { return num_workers_; }
  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  TensorRange bucket(int b) const { return buckets_[b].range; }
  bool overlapped() const { return comm_thread_ != nullptr; }
  const GradientCodec& codec() const { return codec_; }
  // Of the last step: scalers, encode, comm_blocked, comm_in_flight and decode times.
  const PhaseTimes& times() const { return times_; }
  // Of the last step: the shared scalers and local worker 0's zero-code count per ternary tensor (summaries;
  // on a GPU each call copies them to the host, a synchronization).
  const std::vector<float>& shared_scalers();
  const std::vector<int64_t>& zero_codes();

 private:
  enum class Stage : uint8_t {
    kWaiting,
    kScalersReady,
    kScalersPosted,
    kScalersShared,
    kEncoded,
    kDataPosted,
    kDataDone,
    kDecoded
  };
  struct Bucket {
    TensorRange range;
    RangeLayout layout;
    Tensor local_codes;  // u8 (L * packed_bytes) this replica's workers' codes, worker l's at l * packed_bytes
    Tensor gathered;     // u8 (N * packed_bytes) allgather2 with several processes
    Tensor code_sums;    // i8 (4 * packed_bytes) allreduce8
    Tensor f16;          // f16 (f16_elements) with several processes
    Tensor f32;          // f32 (f32_elements) with several processes
    Stage stage = Stage::kWaiting;
    uint64_t ticket = 0;  // the communication thread's job of the current stage
  };
  void plan_buckets(double bucket_mb, bool one_bucket);
  void allocate_buffers();
  // Stages of one bucket (compute thread unless noted).
  void compute_scalers(Bucket& b);
  void share_scalers(Bucket& b);  // collective (communication thread with overlap)
  void encode(Bucket& b);
  void exchange_data(Bucket& b);  // collectives (communication thread with overlap)
  void decode(Bucket& b);
  void post_next();          // posts the next collective of the fixed order when its input is ready
  bool advance(bool block);  // one round of post / collect / encode / decode; true if anything moved
  void collect(Bucket& b);   // after its job finished: timings, next stage
  static void run_share_scalers(void* self, int64_t bucket);
  static void run_exchange_data(void* self, int64_t bucket);
  template <typename Fn>
  void timed(Phase phase, const char* name, int64_t arg, Fn&& fn);
  template <typename Fn>
  void blocking_collective(Bucket& b, const char* name, Fn&& fn);

  Backend& be_;
  bool on_host_;  // the backend's memory is the host's (the CPU)
  GradientCodec codec_;
  std::vector<std::vector<Tensor>> grads_;  // (L) local workers' gradients
  std::vector<const std::vector<Tensor>*> grad_ptrs_;
  std::vector<int> targets_;
  Communicator* processes_;
  int num_processes_ = 1, process_rank_ = 0, local_ = 1, num_workers_ = 1;
  ExchangeMode mode_;
  std::vector<Bucket> buckets_;  // in backward order: bucket 0 holds the last tensors
  Buffer storage_;               // on the device: every bucket's buffers and the scaler vectors, allocated once
  Tensor local_scalers_;         // f32 (L * num_ternary) each local worker's scalers, worker l's at l * num_ternary
  std::vector<Tensor> local_scaler_rows_;  // (L) views of local_scalers_, one per worker
  Tensor shared_scalers_;                  // f32 (num_ternary)
  Tensor zero_codes_;                      // i32 (num_ternary) local worker 0's zero codes
  std::vector<float> host_scalers_;        // (num_ternary) for shared_scalers()
  std::vector<int64_t> host_zero_codes_;   // (num_ternary) for zero_codes()
  ExchangeStats step_stats_;               // the byte model of one step (fixed by the policy)
  uint32_t step_ = 0;
  int ready_from_ = 0;  // tensors [ready_from_, num_tensors) are final
  int next_post_ = 0;   // position in the fixed order: 2 * bucket + (0 scalers, 1 data)
  bool in_step_ = false;
  std::unique_ptr<CommunicationThread> comm_thread_;
  Timeline* timeline_;
  int exchange_track_ = -1, comm_track_ = -1;
  PhaseTimes times_;
  uint64_t wire_before_ = 0;
};

}  // namespace tg

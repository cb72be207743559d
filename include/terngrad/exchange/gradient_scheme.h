// GradientScheme: what happens to one bucket of gradients in a step's exchange: its coding (fp32, fp16,
// TernGrad, hierarchical TernGrad, ...) and the collectives that carry it, written as one fixed list of stages
// that the scheduler (GradientExchange, exchange/gradient_exchange.h) runs for every bucket in order. The scheme
// owns its buffers and its state; the scheduler owns the bucket order, the overlap with backward and the timing
// (PyTorch DDP's split between the Reducer and a comm hook; Horovod's compressor chosen by name).
//
// Stages are either compute stages (codec work on the replica's backend: they run on the compute thread,
// between layers or in finish()) or collective stages (calls on the communicators: with --overlap they run on
// the communication thread, which only waits on the network). A collective stage may touch only the buffers its
// bucket's earlier stages filled; every rank posts the collective stages of every bucket in one fixed order
// (bucket 0's, then bucket 1's, ...), as MPI requires. A stage with nothing to do for a bucket simply returns.
// Every stage of a scheme must be deterministic: the same bits for any bucketing, overlap or thread count.
//
// A new scheme is one folder under src/exchange/schemes/ and its row in the registry (exchange/scheme_registry.h),
// or a SchemeRegistration in its own file.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "terngrad/backend/backend.h"
#include "terngrad/comm/communicator.h"
#include "terngrad/compress/compression_policy.h"
#include "terngrad/core/error.h"
#include "terngrad/core/phase_times.h"
#include "terngrad/core/slab.h"
#include "terngrad/core/weight_decay.h"
#include "terngrad/exchange/exchange_options.h"

namespace tg {

// The groups a replica's exchange talks to (the Topology's view of one replica; nullptr: a group of one).
struct ExchangeComms {
  Communicator* world = nullptr;  // every replica of every process
  Communicator* local = nullptr;  // the replicas of this node (fast links: NVLink, shared memory)
  Communicator* cross = nullptr;  // the replicas with this replica's local rank on every node (one ring each)
};

// Bytes of one step. The per-worker figures follow the byte model of communicator.h over all N workers, as if
// every worker were its own rank, so runs compare across process layouts; the process figures are what this
// replica's collectives moved (measured by the communicators' counters, 0 alone), split into traffic inside
// the node and traffic between nodes.
struct ExchangeStats {
  uint64_t payload_bytes = 0;       // bytes a worker hands to collectives
  uint64_t moved_bytes = 0;         // bytes the algorithms move per worker
  uint64_t fp32_payload_bytes = 0;  // the same step sent as fp32 (4 bytes per element)
  uint64_t fp32_moved_bytes = 0;    // ... and what a ring all-reduce of it moves per worker
  uint64_t process_wire_bytes = 0;  // moved into this replica by its collectives (byte model, all groups)
  uint64_t intra_node_bytes = 0;    // ... of which inside its node (the local group; flat groups: see below)
  uint64_t inter_node_bytes = 0;    // ... of which between nodes (the cross group; flat groups: see below)
};

enum class StageKind : uint8_t { kCompute, kCollective };

// One stage of a bucket's lifecycle. `phase` is where a compute stage's time counts (scalers, encode, decode);
// collective stages count as communication. `name` labels the timeline events.
struct SchemeStage {
  const char* name;
  StageKind kind;
  Phase phase;
};

// What every scheme is built from (owned by the GradientExchange, alive as long as the scheme).
struct SchemeContext {
  Backend* backend = nullptr;
  const CompressionPolicy* policy = nullptr;        // which coding each tensor travels in, and their layout
  std::vector<std::vector<Tensor>> grads;           // (L) local workers' f32 gradients, policy order, on the device
  std::vector<const std::vector<Tensor>*> workers;  // (L) pointers to grads, in worker order (codec inputs)
  std::vector<int> targets;                         // local workers whose gradients receive the average
  ExchangeComms comms;
  int local_workers = 1;  // L: workers computing on this replica
  int num_workers = 1;    // N: workers of every replica of every process
  int first_worker = 0;   // global index of local worker 0 (worker l is first_worker + l)
  ExchangeOptions options;
  // Weight decay the scheme applies to every local worker's gradients in its first stage, instead of backward
  // (GradientExchange::apply_weight_decay; only schemes whose applies_weight_decay() is true); null: none.
  const WeightDecayTerms* weight_decay = nullptr;
  // The average lands in the first target's gradients; the other targets get a copy of tensors [r.begin, r.end).
  void copy_to_other_targets(TensorRange r) const;
};

// What a run's memory plan asks of a scheme before it exists (SchemeInfo::buffer_bytes): the policy, the flags, the
// job's layout, and the sizes several schemes' buffers are made of.
struct SchemeMemoryQuery {
  const CompressionPolicy* policy = nullptr;
  ExchangeOptions options;  // --exchange (mode), --error_feedback, --local_bits
  ExchangeLayout layout;
  int local_workers = 1;             // L
  bool group = false;                // a world group to exchange with (else the average is taken in place)
  int64_t ternary_elements() const;  // of the tensors coded ternary
  size_t packed_bytes() const;       // one worker's 2-bit codes
  size_t dense_bytes() const;        // the fp16 and fp32 tensors' fused sums (with a group)
  size_t scaler_bytes() const;       // every worker's scalers, the shared ones, the check word, the per-tensor flags
};

// One per-tensor quantity a scheme reports after a step (GradientScheme::summaries).
struct TensorSummary {
  const char* quantity = "";  // "scaler", "zero_fraction", ...
  int tensor = 0;             // index in the policy
  double value = 0;           // as the step computed it (a quantity not measured is left out, so NaN is a NaN)
};

// A scheme's optional fused update (--decode_in_update): part of the average stays coded after the step and the
// optimizer decodes it inside its own update (Optimizer::apply's coded averages, Backend::optimizer_update_coded),
// one pass over those gradients fewer. The same bits as decoding in the scheme's last stage.
class CodedUpdate {
 public:
  virtual ~CodedUpdate() = default;
  // Before the first step (after plan): from now on the decode stage leaves the coded tensors' gradients unwritten
  // and coded_averages() describes their averages instead.
  virtual void defer_decode() = 0;
  // One entry per policy tensor, defined for those whose average stays coded (views of the scheme's buffers,
  // valid after each step's last stage until the next step begins); empty before defer_decode.
  virtual const std::vector<CodedAverage>& coded_averages() const = 0;
  // When bucket `bucket` has been through every stage and the scheduler would otherwise sit waiting for the
  // network: decode its coded averages into the target's gradients now (the decode stage's work, done in time that
  // would be idle) and leave their entries of coded_averages() undefined until the next step. False when the
  // bucket has nothing left to decode.
  virtual bool decode_deferred(int bucket) = 0;
};

class GradientScheme {
 public:
  explicit GradientScheme(SchemeContext& ctx) : ctx_(ctx) {}
  virtual ~GradientScheme() = default;
  GradientScheme(const GradientScheme&) = delete;
  GradientScheme& operator=(const GradientScheme&) = delete;

  virtual const char* name() const = 0;  // its registry name: "terngrad", "fp32", ...
  // The lifecycle of every bucket, in order (fixed for the scheme's life).
  virtual const std::vector<SchemeStage>& stages() const = 0;
  // Once, before the first step, with the buckets in backward order: allocates and first-touches every buffer
  // (nothing in a step allocates).
  virtual void plan(const std::vector<TensorRange>& buckets) = 0;
  // The step's counter (Philox) and per-step bookkeeping, before any stage of the step.
  virtual void begin_step(uint32_t step) { step_ = step; }
  // Stage `stage` (index into stages()) of bucket `bucket`.
  virtual void run_stage(int stage, int bucket) = 0;
  // The byte model of one step (fixed by the policy and the groups); process_* figures are left 0.
  virtual ExchangeStats byte_model() const = 0;
  // Whether the scheme can apply the weight decay itself (SchemeContext::weight_decay), fused into a pass it makes
  // over the gradients anyway, so backward need not make one.
  virtual bool applies_weight_decay() const { return false; }

  // The optional capability of leaving part of the average coded for the optimizer (CodedUpdate); null: none.
  virtual CodedUpdate* coded_update() { return nullptr; }

  // Per-rank state the scheme carries from step to step (error-feedback residuals, low-rank factors):
  // checkpointed per rank, on the device; nullptr when it has none.
  virtual Slab* rank_state() { return nullptr; }
  // What becomes of rank_state() when a run resumes on another number of ranks (--allow_topology_change: a machine
  // lost or added): the scheme's answer, as only it knows what its state means. kDrop: every rank starts it afresh.
  // kKeepSurvivors: rank r of the new layout takes rank r's state of the checkpoint (r < both counts), a rank beyond
  // the checkpoint's count starts afresh, a rank beyond the new count is dropped; `bias` says what that costs. Kept
  // only where a rank's state has the checkpoint's tensors (the same workers per rank); --reset_rank_state drops it
  // whatever the answer.
  struct ResizePolicy {
    enum Kind { kDrop, kKeepSurvivors } kind = kDrop;
    std::string bias;  // one sentence for the log and the docs
    // kKeepSurvivors: tensors whose names start with this are the same on every rank (all-reduced); a new rank takes
    // them from rank 0's state. Empty: none.
    std::string replicated_prefix;
  };
  virtual ResizePolicy rank_state_on_resize() const { return {}; }
  // Per-tensor quantities of the last step, copied to the host (a synchronization on a GPU): TensorBoard's
  // "<quantity>/<tensor>" scalars, the quantization probe. Empty when the scheme reports none.
  virtual std::vector<TensorSummary> summaries() const { return {}; }
  // The scheme's health: a device flag (i32 (1)) set when a quantity every worker shares (a scaler) was not finite
  // at any step since the last clear: read before a checkpoint is written, so a NaN never reaches one (summaries()
  // then name the tensor). Undefined when the scheme has nothing to watch.
  virtual Tensor nonfinite_flag() const { return Tensor(); }
  // A short description for the start-of-run log ("allgather2, error feedback").
  virtual std::string describe() const { return name(); }

 protected:
  SchemeContext& ctx_;
  uint32_t step_ = 0;
};

}  // namespace tg

// GradientExchange: one replica's part of a step's gradient exchange (docs/design.md, "One step"), as a
// scheme-agnostic bucket scheduler. The coding and the collectives of a bucket belong to a GradientScheme
// (exchange/gradient_scheme.h) chosen by name (exchange/scheme_registry.h); this class decides the buckets, the
// order in which their stages run, what overlaps with backward, and where the time goes.
//
// Workers: the replica computes L local workers (virtual nodes) whose gradients come in; N is the number of
// workers of every replica of every process, and local worker l has the global index world.rank() * L + l.
// The average over all N workers lands in the gradients of the targets (local workers; usually the first).
//
// Buckets and overlap (--bucket_mb, --overlap; DDP's and Horovod's buckets): tensors are grouped into buckets
// of at most bucket_mb of fp32 gradient in the order backward produces them (the last tensors first; a tensor
// that would cross the limit closes the open bucket and starts the next; a larger tensor is a bucket of its
// own). The trainer reports progress from inside the last local worker's backward (tensors_ready); a bucket
// starts its stages as soon as it is complete. Compute stages run on the calling (compute) thread: in
// tensors_ready/progress between layers, and in finish(); collective stages run on a communication thread in
// one fixed order, identical on every process (bucket 0's collective stages in their order, then bucket 1's,
// ...), as MPI requires. Without overlap (or with no group to talk to) the whole gradient is one bucket whose
// stages all run in finish() on the calling thread. A scheme's stages are deterministic, so the results are the
// same bits overlapped or not and for any bucketing.
//
// On a GPU (a backend with a side stream; OverlapEngine, exchange_options.h) there is no communication thread: when a
// bucket is complete its stages, codec kernels and collectives alike, are enqueued at once on the backend's side
// stream (after an event of the main stream, Backend::enter_side_stream), the groups' collectives moved to that
// stream for the time (Communicator::use_stream); the rest of backward goes on on the main stream, and finish()
// makes the main stream wait for the side stream (the optimizer's update sees the average). Buckets complete in
// the same order on every rank and each is enqueued whole, so the collectives keep the fixed order. Without
// overlap the stages are enqueued in finish() on the main stream, as before. The phase times of a stream-overlapped
// step are the host's time to enqueue; the timeline gets the device's: each stage of each bucket between two device
// marks (Backend::record_mark) on a track "side stream (rank r)", recorded once the device has passed them (looked
// for at each begin(), and all of them by flush_timeline()).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "terngrad/backend/backend.h"
#include "terngrad/comm/communicator.h"
#include "terngrad/core/phase_times.h"
#include "terngrad/exchange/exchange_options.h"
#include "terngrad/exchange/gradient_scheme.h"

namespace tg {

class CommunicationThread;
class Timeline;

class GradientExchange {
 public:
  // backend: the replica's device, where the gradients and the scheme's buffers live and its codec ops run.
  // worker_grads[l]: local worker l's gradient, one f32 tensor on that device per policy tensor (read; the
  // targets' are overwritten with the average). comms: the replica's groups (all nullptr: this replica
  // alone); with overlap their collectives are called from the communication thread only, during a step.
  GradientExchange(Backend& backend, const CompressionPolicy& policy, std::vector<std::vector<Tensor>> worker_grads,
                   std::vector<int> targets, const ExchangeComms& comms, const ExchangeOptions& options,
                   Timeline* timeline = nullptr);
  // One flat group (`world`, or nullptr alone).
  GradientExchange(Backend& backend, const CompressionPolicy& policy, std::vector<std::vector<Tensor>> worker_grads,
                   std::vector<int> targets, Communicator* world, const ExchangeOptions& options,
                   Timeline* timeline = nullptr);
  ~GradientExchange();
  GradientExchange(const GradientExchange&) = delete;
  GradientExchange& operator=(const GradientExchange&) = delete;

  // ---- one step, from the compute thread ----
  void begin(uint32_t step);
  // Tensors [first, num_tensors) are final on every local worker (backward runs from the last tensor down).
  void tensors_ready(int first);
  // Runs the compute stages whose inputs are ready; never blocks on the network.
  void progress();
  // Blocks until every bucket has been through every stage; returns the step's bytes.
  ExchangeStats finish();
  // begin + tensors_ready(0) + finish.
  ExchangeStats run(uint32_t step);
  // Before the first step: the scheme adds the weight decay (g += coefficient * param, per policy tensor) to every
  // local worker's gradients in its first stage, fused into its first pass over them; the caller's backward must
  // then leave it out (Net::set_backward_applies_weight_decay). Refused unless scheme().applies_weight_decay().
  void apply_weight_decay(WeightDecayTerms terms);
  // What apply_weight_decay handed over (empty without it).
  const WeightDecayTerms& weight_decay() const { return weight_decay_; }

  // Before the first step: part of the average stays coded after finish() (the target's gradients of those
  // tensors are not written; CodedUpdate::defer_decode), for Optimizer::apply to decode inside its update from
  // coded_averages(). Refused unless scheme().coded_update() and the average has one target worker.
  void defer_decode();
  // With defer_decode: per policy tensor the average still coded (defined for the tensors left coded), valid from
  // finish() until the next begin(); nullptr otherwise.
  const std::vector<CodedAverage>* coded_averages() const;
  // With defer_decode, after finish(): decodes every average still coded into the target's gradients now (the
  // same bits as the optimizer's decode; coded_averages() is then undefined for them until the next begin()).
  // Whoever reads the step's average (--quantization_error_every) calls it. Does nothing without defer_decode.
  void decode_deferred_now();

  const GradientScheme& scheme() const { return *scheme_; }
  GradientScheme& scheme() { return *scheme_; }
  const char* scheme_name() const { return scheme_->name(); }
  int num_workers() const { return ctx_.num_workers; }
  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  TensorRange bucket(int b) const { return buckets_[b].range; }
  bool overlapped() const { return comm_thread_ != nullptr || on_side_stream_; }
  // Overlapped on the backend's side stream (the GPU's schedule), not on a communication thread.
  bool overlapped_on_stream() const { return on_side_stream_; }
  const CompressionPolicy& policy() const { return policy_; }
  const ExchangeOptions& options() const { return ctx_.options; }  // as constructed (mode as given, seed)
  // Of the last step: scalers, encode, comm_blocked, comm_in_flight and decode times.
  const PhaseTimes& times() const { return times_; }
  // Stream overlap with a timeline: waits for the device and records every side-stream span still pending (before
  // the timeline is written). Otherwise nothing.
  void flush_timeline();
  // Of the last step: the scheme's per-tensor quantities (GradientScheme::summaries; on a GPU a synchronization).
  std::vector<TensorSummary> summaries() const;
  // Whether the scheme's health flag (GradientScheme::nonfinite_flag) was raised at any step since the last call
  // (a synchronization on a GPU; call it before writing a checkpoint), and clears it.
  bool take_nonfinite_flag();

 private:
  struct Bucket {
    TensorRange range;
    int stage = 0;        // the next stage to run (== stages().size(): done)
    bool ready = false;   // its tensors are final
    bool posted = false;  // its current (collective) stage is on the communication thread
    uint64_t ticket = 0;
  };
  void plan_buckets(double bucket_mb, bool one_bucket);
  bool advance(bool block);        // one round over the buckets; true if anything moved
  bool advance_bucket(Bucket& b);  // runs / posts / collects what it can of one bucket
  void run_compute(Bucket& b);
  void run_blocking(Bucket& b);  // a collective stage on this thread (no overlap)
  void post_next();              // posts the collectives whose turn it is in the fixed order
  void collect(Bucket& b);
  void run_on_side_stream(Bucket& b);  // every stage of a complete bucket, enqueued on the side stream
  void record_device_spans();          // the pending side-stream spans the device has passed, onto the timeline
  static void run_posted(void* self, int64_t job);
  bool done() const;

  Backend& be_;
  CompressionPolicy policy_;
  SchemeContext ctx_;
  std::unique_ptr<GradientScheme> scheme_;
  std::vector<SchemeStage> stages_;
  std::vector<int> collective_stages_;  // indices into stages_ of the collective stages
  std::vector<Bucket> buckets_;         // in backward order: bucket 0 holds the last tensors
  std::vector<int64_t> post_order_;     // job = bucket * stages + stage, in the fixed order
  size_t next_post_ = 0;
  uint32_t step_ = 0;
  int ready_from_ = 0;  // tensors [ready_from_, num_tensors) are final
  bool in_step_ = false;
  bool has_groups_ = false;
  std::unique_ptr<CommunicationThread> comm_thread_;
  bool on_side_stream_ = false;  // overlapped on the backend's side stream (OverlapEngine::kStream)
  struct DeviceSpan {            // a stage of a bucket on the side stream, between two device marks
    int64_t step;
    int bucket;
    const char* name;
    uint64_t begin, end;
  };
  std::vector<DeviceSpan> pending_spans_;
  int side_track_ = -1;
  Timeline* timeline_;
  int exchange_track_ = -1, comm_track_ = -1;
  PhaseTimes times_;
  std::vector<Communicator*> groups_;  // distinct groups of ctx_.comms (for the wire counters)
  uint64_t wire_before_[3] = {0, 0, 0};
  CodedUpdate* coded_ = nullptr;   // the scheme's, after defer_decode()
  WeightDecayTerms weight_decay_;  // apply_weight_decay's (SchemeContext::weight_decay points here)
};

}  // namespace tg

// HierarchicalScheme ("hierarchical", --exchange hierarchical): an fp32 (or fp16) reduce-scatter inside a node,
// ternary codes between nodes and then inside the node (BytePS's and Horovod's hierarchical all-reduce, with
// TernGrad's codes on the slow links). Per bucket, with L
// local ranks per node, M nodes, W workers per rank (W_node = L W workers per node, N = M W_node in all):
//   scalers          each local worker's per-tensor scalers and their local max (as TernGrad's);
//   share scalers    all-reduce MAX over the world group: one s per tensor (or per --scaler_bucket elements: a
//                    tensor's parts are then whole buckets) for every worker and node;
//   local sum        F = the rank's workers' gradients summed (fp32) in L shards: shard k holds part k of every
//                    tensor of the bucket (ceil(n / L) elements each; the last part shorter, padded);
//   reduce-scatter   inside the node (SUM; fp32, or fp16 with --local_bits 16): local rank k owns shard k;
//   encode           shard /= W_node (the node's average a); its ternary pieces become 2-bit codes drawn with the
//                    shared scalers from Philox keyed by the node's first worker, counted by (step, tensor +
//                    num_tensors * k, element of the part): an element's draw does not depend on the bucketing;
//                    the fp32-coded parts (--size_to_binarize, logits) are copied to a dense buffer;
//   cross exchange   with the ranks that own shard k on every other node (the cross group: one ring per local
//                    index, so every NIC of a node carries traffic): allgather2 of the codes, or allreduce8 of
//                    their int8 sums (allgather2 below 8 nodes, allreduce8 from 8 on, as TernGrad's rule), and
//                    an all-reduce SUM of the dense pieces;
//   all-gather codes inside the node: every local rank gets every local rank's block (its shard's codes of
//                    every node, or their sums, and the dense sums): 2-bit codes, not the decoded fp32 average
//                    (M n / 4 bytes instead of 4 n: 8x fewer on 2 nodes);
//   decode           every part of every tensor = s * sum of the nodes' codes / M, the dense sums / M, into the
//                    target's gradients. With defer_decode (the trainer's --decode_in_update) the ternary tensors
//                    are left coded for the optimizer (coded_averages(): one part per local rank's shard), unless
//                    the scheduler decodes them while it waits (decode_deferred).
// E[s code] = a (the scaler is the max of the workers' own scalers, never below max|a| without clipping), so
// the average is unbiased as TernGrad's; its variance is that of M ternarizations instead of N.
// Special cases: one node (no cross group): no ternarization; the stages are scalers (the weight decay only),
// local sum, reduce-scatter, average (/ W_node), all-gather of the average inside the node, scatter: the fp32
// average of the node's ranks, the same bits as the fp32 scheme when the local group sums in rank order
// (ThreadCommunicator; two MPI ranks). One rank per node and one worker per rank: TernGrad's exchange bit for
// bit (same key, tensor counter, scalers and sums).
// --grad_bits 32: nothing is ternary; the cross stage all-reduces the shards (a hierarchical fp32 all-reduce).
#pragma once

#include <algorithm>
#include <memory>
#include <vector>

#include "src/exchange/exchange_arena.h"
#include "src/exchange/schemes/terngrad/deferred_averages.h"
#include "src/exchange/schemes/terngrad/shared_scalers.h"
#include "src/exchange/schemes/terngrad/ternary_coding.h"
#include "terngrad/exchange/gradient_scheme.h"

namespace tg {

class HierarchicalScheme final : public GradientScheme, public CodedUpdate {
 public:
  explicit HierarchicalScheme(SchemeContext& ctx);
  const char* name() const override { return "hierarchical"; }
  const std::vector<SchemeStage>& stages() const override;
  void plan(const std::vector<TensorRange>& buckets) override;
  void run_stage(int stage, int bucket) override;
  ExchangeStats byte_model() const override;
  bool applies_weight_decay() const override { return true; }  // in the scalers' pass
  void begin_step(uint32_t step) override;
  // Several nodes and ternary tensors: the average can stay coded (the node's gathered codes, in parts).
  CodedUpdate* coded_update() override;
  void defer_decode() override;
  const std::vector<CodedAverage>& coded_averages() const override { return deferred_.current(); }
  bool decode_deferred(int bucket) override;
  // Per ternary tensor its shared scaler and (several nodes) the zero fraction of the node's average on this
  // rank's part of it.
  std::vector<TensorSummary> summaries() const override {
    return scalers_->summaries(zero_codes_, zero_code_elements_);
  }
  Tensor nonfinite_flag() const override { return scalers_->flag(); }
  std::string describe() const override;

 private:
  // Tensor `tensor` of a bucket: its part k, elements [k * part, min(n, (k + 1) * part)), lies at `at` in shard
  // k; its codes at byte packed_at of a shard's codes, or (fp32-coded) its values at dense_at of a shard's dense
  // sums: the same places in every shard (the shorter last parts padded), so a part's codes are found alike in
  // every local rank's block.
  struct Piece {
    int tensor = 0;
    int64_t n = 0, part = 0, at = 0;
    bool ternary = false;
    int64_t packed_at = 0, dense_at = 0;
    int64_t begin(int k) const { return std::min(n, k * part); }
    int64_t count(int k) const { return std::min(n, begin(k) + part) - begin(k); }
  };
  struct Bucket {
    TensorRange range;
    std::vector<Piece> pieces;  // (tensors of the range)
    int64_t shard = 0;          // S: elements per local rank (one part of every tensor)
    Tensor f;                   // f32 (L * S): the arena's, or the gradient itself (in_place)
    bool in_place = false;      // f is the one local worker's gradient: no local sum's copy
    Tensor h;                   // f16 (L * S): --local_bits 16
    int64_t packed_bytes = 0;   // P: bytes of a shard's codes (every ternary part's, padded)
    int64_t dense = 0;          // D: elements of a shard's fp32 pieces (padded)
    Tensor packed;              // u8 (P): this node's codes of the own shard
    // Several nodes: per local rank a block of `block` bytes: its shard's codes of every node (M * P, allgather2)
    // or their sums (4 P int8, allreduce8), then at dense_offset its shard's dense sums (4 D); the cross exchange
    // fills the own block, the all-gather inside the node the others.
    int64_t block = 0, dense_offset = 0;
    Tensor node;       // u8 (L * block)
    Tensor node_sums;  // i8 view of node (allreduce8)
    Tensor gathered;   // u8 (M * P): the own block's codes (allgather2)
    Tensor code_sums;  // i8 (4 P): the own block's code sums (allreduce8)
    Tensor dense_sum;  // f32 (D): the own block's dense sums
  };
  Tensor shard_of(const Bucket& b, const Tensor& whole) const;
  Tensor part_scalers(const Piece& pc, int k) const;
  Tensor zero_count(const Piece& pc) const;       // i32 (1): the piece's tensor's entry of zero_codes_, or undefined
  Tensor dense_of(const Bucket& b, int k) const;  // local rank k's dense sums (f32 (D)) in b.node
  void scalers(Bucket& b);
  void local_sum(Bucket& b);
  void reduce_scatter(Bucket& b);
  void encode(Bucket& b);
  void cross_exchange(Bucket& b);
  void all_gather(Bucket& b);
  void decode(Bucket& b);
  void decode_ternary(Bucket& b);
  void scatter(Bucket& b);

  int L_ = 1, k_ = 0, M_ = 1, node_workers_ = 1;
  uint32_t node_key_worker_ = 0;
  bool cross_gather_ = true;  // allgather2 across nodes (else allreduce8)
  bool half_ = false;         // --local_bits 16
  std::vector<SchemeStage> stages_;
  std::vector<int> stage_ops_;  // (stages_) which of the member functions above each stage runs
  TernaryCoding coding_;        // the scalers' (the encodes and decodes work on shards: the Backend's ops directly)
  ExchangeArena arena_;
  std::vector<Bucket> buckets_;
  std::unique_ptr<SharedScalers> scalers_;
  Tensor zero_codes_;                        // i32 (num_ternary), several nodes: zeros among this rank's codes
  std::vector<int64_t> zero_code_elements_;  // (num_ternary): the codes counted, this rank's part of each tensor
  DeferredAverages deferred_;                // defer_decode: the ternary tensors' coded averages
};

std::unique_ptr<GradientScheme> make_hierarchical_scheme(SchemeContext& ctx);
// Its buffers (an estimate): the node's sum in the shard-major layout (fp32, and fp16 with --local_bits 16);
// between nodes, this rank's shard's codes and the node's blocks (every node's codes of a shard, all-gathered
// below 8 nodes, summed as int8 from 8 on, and the dense shard in fp32).
size_t hierarchical_buffer_bytes(const SchemeMemoryQuery& q);

}  // namespace tg

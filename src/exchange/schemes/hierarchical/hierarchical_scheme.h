// HierarchicalScheme ("hierarchical", --exchange hierarchical): fp32 inside a node, ternary codes between nodes
// (BytePS's and Horovod's hierarchical all-reduce, with TernGrad's codes on the slow links). Per bucket, with L
// local ranks per node, M nodes, W workers per rank (W_node = L W workers per node, N = M W_node in all):
//   scalers          each local worker's per-tensor scalers and their local max (as TernGrad's);
//   share scalers    all-reduce MAX over the world group: one s per tensor for every worker and node;
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
//   decode           shard = s * sum of the nodes' codes / M, and the dense sums / M;
//   all-gather       inside the node: every local rank gets every shard;
//   scatter          F's tensors into the first target (copies to the other targets).
// E[s code] = a (the scaler is the max of the workers' own scalers, never below max|a| without clipping), so
// the average is unbiased as TernGrad's; its variance is that of M ternarizations instead of N.
// Special cases: one node (no cross group): no ternarization, the fp32 average of the node's ranks, the same bits
// as the fp32 scheme when the local group sums in rank order (ThreadCommunicator; two MPI ranks); one rank per
// node and one worker per rank: TernGrad's exchange bit for bit (same key, tensor counter, scalers and sums).
// --grad_bits 32: nothing is ternary; the cross stage all-reduces the shards (a hierarchical fp32 all-reduce).
#pragma once

#include <memory>
#include <vector>

#include "src/exchange/exchange_arena.h"
#include "terngrad/exchange/gradient_scheme.h"

namespace tg {

class HierarchicalScheme final : public GradientScheme {
 public:
  explicit HierarchicalScheme(SchemeContext& ctx);
  const char* name() const override { return "hierarchical"; }
  const std::vector<SchemeStage>& stages() const override;
  void plan(const std::vector<TensorRange>& buckets) override;
  void run_stage(int stage, int bucket) override;
  ExchangeStats byte_model() const override;
  bool applies_weight_decay() const override { return true; }  // in the scalers' pass
  Tensor shared_scalers() const override { return shared_scalers_; }
  Tensor nonfinite_flag() const override { return nonfinite_; }
  std::string describe() const override;

 private:
  // A piece of the own shard: elements [begin, begin + count) of tensor `tensor`, at `at` in the shard.
  struct Piece {
    int tensor = 0;
    int64_t begin = 0, count = 0, at = 0;
    bool ternary = false;
    int64_t packed_at = 0;  // ternary: its codes' first byte in the shard's packed buffer
    int64_t dense_at = 0;   // fp32: its place in the dense buffer
  };
  struct Bucket {
    TensorRange range;
    std::vector<int64_t> part;    // (tensors of the range) elements of each part of a tensor: ceil(n / L)
    std::vector<int64_t> offset;  // (tensors of the range) where a tensor's part starts in a shard
    int64_t shard = 0;            // S: elements per local rank (one part of every tensor)
    Tensor f;                     // f32 (L * S): the arena's, or the gradient itself (in_place)
    bool in_place = false;        // f is the one local worker's gradient: no local sum, no scatter
    Tensor h;                     // f16 (L * S): --local_bits 16
    std::vector<Piece> pieces;    // of the own shard
    int64_t packed_bytes = 0, dense = 0;
    Tensor packed;     // u8 (packed_bytes): this node's codes of the own shard
    Tensor gathered;   // u8 (M * packed_bytes): allgather2
    Tensor code_sums;  // i8 (4 * packed_bytes): allreduce8
    Tensor dense_sum;  // f32 (dense)
  };
  Tensor shard_of(const Bucket& b, const Tensor& whole) const;
  void scalers(Bucket& b);
  void local_sum(Bucket& b);
  void reduce_scatter(Bucket& b);
  void encode(Bucket& b);
  void cross_exchange(Bucket& b);
  void decode(Bucket& b);
  void all_gather(Bucket& b);
  void scatter(Bucket& b);

  int L_ = 1, k_ = 0, M_ = 1, node_workers_ = 1;
  uint32_t node_key_worker_ = 0;
  bool cross_gather_ = true;  // allgather2 across nodes (else allreduce8)
  bool half_ = false;         // --local_bits 16
  ExchangeArena arena_;
  std::vector<Bucket> buckets_;
  Tensor local_scalers_;
  std::vector<Tensor> local_scaler_rows_;
  Tensor shared_scalers_;
  Tensor nonfinite_;
  std::vector<float> host_scalers_;
};

std::unique_ptr<GradientScheme> make_hierarchical_scheme(SchemeContext& ctx);

}  // namespace tg

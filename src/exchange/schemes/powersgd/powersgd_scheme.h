// PowerSgdScheme ("powersgd", --exchange powersgd --powersgd_rank R): rank-R low-rank compression of every weight
// matrix worth it, with error feedback and a warm-started Q, as PyTorch DDP's PowerSGD hook and the paper (Vogels
// et al., NeurIPS 2019) define it. Every collective is an all-reduce SUM over the world group, so it scales with
// the nodes like fp32 does, at (rows + cols) x R floats per matrix instead of rows x cols.
//
// A tensor of shape (..., n) is the matrix M (m = numel / n rows, n columns) of its bytes as they lie; PyTorch's
// hook compresses the transpose (out channels first), and so does this scheme: P (n x R) = M^T Q, Q (m x R) = M P,
// approximation M ~ Q P^T. A tensor is compressed when it is a matrix (rank >= 2) and
// (n + m) x R x 2 < n x m (the hook's min_compression_rate 2; R is min(n, m, --powersgd_rank)); the others
// (biases, batch-norm vectors, small matrices) are summed as fp32 in the same all-reduce as the P's. Per bucket:
//   compute P      each local worker's gradient plus its residual (error feedback) kept as the residual's new
//                  start; Q orthogonalized (warm start: last step's Q); P = sum over local workers of M^T Q; the
//                  uncompressed tensors' local sums beside the P's in one fused buffer
//   all-reduce P   the fused buffer, SUM
//   compute Q      the uncompressed tensors' average into the target; each P orthogonalized; Q = sum of M P
//   all-reduce Q   the bucket's Q's, SUM
//   decode         Q / N (kept as the next step's warm start), the target's gradient = Q P^T, every local
//                  worker's residual = its corrected gradient - Q P^T
// Q starts as normal random numbers from the run's seed (the same on every rank). Per-rank state (rank_state()):
// each compressed tensor's Q and each local worker's residual of it, checkpointed per rank and restored bit for
// bit. P is no state: every step computes it from M and Q before reading it. The products and orthogonalizations
// run on the replica's backend (Backend::matmul, Backend::orthogonalize_columns); each is deterministic for one
// backend and thread count, and every rank computes the approximation from the same all-reduced P and Q.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "src/exchange/exchange_arena.h"
#include "terngrad/core/slab.h"
#include "terngrad/exchange/gradient_scheme.h"

namespace tg {

class PowerSgdScheme final : public GradientScheme {
 public:
  // Decides which tensors are compressed; a rank that compresses none is an error naming the accepted ranks.
  explicit PowerSgdScheme(SchemeContext& ctx);
  const char* name() const override { return "powersgd"; }
  const std::vector<SchemeStage>& stages() const override;
  void plan(const std::vector<TensorRange>& buckets) override;
  void run_stage(int stage, int bucket) override;
  ExchangeStats byte_model() const override;
  Slab* rank_state() override { return &state_; }
  // Q is all-reduced (every rank holds the same), a residual is gradient not yet applied: survivors keep both; the
  // lost ranks' residuals are never applied (once); a new rank starts with zero residuals and rank 0's Q.
  ResizePolicy rank_state_on_resize() const override {
    return {ResizePolicy::kKeepSurvivors,
            "the lost ranks' residuals (gradient not yet applied) are never applied; the survivors keep theirs; "
            "every rank keeps the all-reduced Q; new ranks start with zero residuals",
            "powersgd/q/"};
  }
  std::string describe() const override;

 private:
  // One policy tensor as a matrix.
  struct Matrix {
    int64_t rows = 0, cols = 0;  // m, n: the tensor's bytes as an (m, n) row-major matrix
    int64_t rank = 0;            // R for this tensor; 0: not compressed (summed as fp32)
    int q_state = -1;            // index of its Q in state_
    std::vector<int> residual;   // per local worker: index of its residual in state_
  };
  struct Bucket {
    TensorRange range;
    Tensor sums;                  // f32: the uncompressed tensors' sums, then the P's
    Tensor q;                     // f32: the Q's being summed
    std::vector<int64_t> sum_at;  // per tensor of the range: its offset in sums (uncompressed: its elements; P)
    std::vector<int64_t> q_at;    // per tensor of the range: its Q's offset in q (compressed ones)
  };
  Tensor p_of(const Bucket& b, int t) const;       // (n, R) view of tensor t's P in b.sums
  Tensor q_work_of(const Bucket& b, int t) const;  // (m, R) view of tensor t's Q in b.q
  Tensor q_state_of(int t) const;                  // (m, R) view of tensor t's warm-start Q
  Tensor matrix_of(int worker, int t) const;       // (m, n) view of a local worker's gradient
  void compute_p(Bucket& b);
  void compute_q(Bucket& b);
  void decode(Bucket& b);
  int64_t compressed_tensors() const;

  int64_t max_rank_ = 0;  // --powersgd_rank
  std::vector<Matrix> matrices_;
  Slab state_;  // "powersgd/q/<tensor>", "powersgd/w<l>/error/<tensor>"
  ExchangeArena arena_;
  std::vector<Bucket> buckets_;
};

std::unique_ptr<GradientScheme> make_powersgd_scheme(SchemeContext& ctx);
// Its buffers (an estimate): each local worker's residual, the factors (rank << rows).
size_t powersgd_buffer_bytes(const SchemeMemoryQuery& q);
// Its option: --powersgd_rank (ExchangeConfig::powersgd_rank).
const std::vector<Flag<ExchangeConfig>>& powersgd_flags();

}  // namespace tg

// PowerSgdScheme: rank-R low-rank gradients with error feedback and a warm-started Q (powersgd_scheme.h).
#include "src/exchange/schemes/powersgd/powersgd_scheme.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "src/exchange/dense_part.h"
#include "terngrad/core/buffer.h"
#include "terngrad/core/error.h"
#include "terngrad/core/philox.h"

namespace tg {

namespace {
enum Stage { kComputeP, kAllreduceP, kComputeQ, kAllreduceQ, kDecode };

constexpr int64_t kMinCompressionRate = 2;  // PyTorch's hook: compress when (n + m) R x 2 < n m
constexpr uint32_t kQStream = 0x50534744;   // the Philox stream of the initial Q's ("PSGD")

// The rank a tensor of (rows, cols) is compressed at for --powersgd_rank R, or 0 when compressing does not pay.
int64_t tensor_rank(int64_t rows, int64_t cols, int64_t R) {
  const int64_t r = std::min({rows, cols, R});
  return (rows + cols) * r * kMinCompressionRate < rows * cols ? r : 0;
}
// The largest R at which a (rows, cols) matrix is still compressed (0: none).
int64_t largest_rank(int64_t rows, int64_t cols) {
  int64_t r = (rows * cols - 1) / (kMinCompressionRate * (rows + cols));  // (n + m) r 2 < n m
  return std::min({r, rows, cols});
}

// Standard normal numbers from Philox (Box-Muller on two uniforms in (0, 1]), element i of stream `tensor`.
float normal_at(PhiloxKey key, uint32_t tensor, uint64_t i) {
  const double u1 = 1.0 - philox_uniform(key, 2 * i, tensor, 0, 0);
  const double u2 = philox_uniform(key, 2 * i + 1, tensor, 0, 0);
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}
}  // namespace

PowerSgdScheme::PowerSgdScheme(SchemeContext& ctx) : GradientScheme(ctx), max_rank_(ctx.options.powersgd_rank) {
  TG_CHECK(max_rank_ >= 1, "--powersgd_rank {} must be at least 1", max_rank_);
  const CompressionPolicy& p = *ctx.policy;
  matrices_.resize(static_cast<size_t>(p.num_tensors()));
  int64_t accepted = 0;
  for (int t = 0; t < p.num_tensors(); ++t) {
    const Shape& s = ctx.grads[0][t].shape();
    Matrix& mx = matrices_[t];
    if (s.rank() < 2 || s.numel() == 0) continue;  // vectors (biases, batch norm) stay fp32
    mx.cols = s[s.rank() - 1];
    mx.rows = s.numel() / mx.cols;
    accepted = std::max(accepted, largest_rank(mx.rows, mx.cols));
    mx.rank = tensor_rank(mx.rows, mx.cols, max_rank_);
  }
  TG_CHECK(compressed_tensors() > 0,
           "--powersgd_rank {} compresses no tensor of this network (a matrix of n x m is compressed when "
           "(n + m) x rank x 2 < n x m): the accepted values are 1 to {}",
           max_rank_, accepted);
  for (int t = 0; t < p.num_tensors(); ++t) {
    Matrix& mx = matrices_[t];
    if (mx.rank == 0) continue;
    mx.q_state = state_.add(fmt::format("powersgd/q/{}", p.tensors()[t].name), Shape{mx.rows, mx.rank});
  }
  for (int l = 0; l < ctx.local_workers; ++l)
    for (int t = 0; t < p.num_tensors(); ++t)
      if (matrices_[t].rank > 0)
        matrices_[t].residual.push_back(
            state_.add(fmt::format("powersgd/w{}/error/{}", l, p.tensors()[t].name), Shape{ctx.grads[0][t].numel()}));
  state_.allocate(ctx.backend->allocator());
  ctx.backend->zero(state_.flat_bytes());
  // The initial Q's: the same normal numbers on every rank (the run's seed), written once here.
  const PhiloxKey key = philox_key(ctx.options.seed, kQStream);
  for (int t = 0; t < p.num_tensors(); ++t) {
    if (matrices_[t].rank == 0) continue;
    const Tensor q = state_.view(matrices_[t].q_state);
    Buffer host(host_allocator(), q.bytes());
    float* v = static_cast<float*>(host.data());
    for (int64_t i = 0; i < q.numel(); ++i) v[i] = normal_at(key, static_cast<uint32_t>(t), static_cast<uint64_t>(i));
    ctx.backend->copy(q, Tensor(host.data(), q.shape(), DType::kF32, Device::cpu()));
  }
}

int64_t PowerSgdScheme::compressed_tensors() const {
  return std::count_if(matrices_.begin(), matrices_.end(), [](const Matrix& m) { return m.rank > 0; });
}

const std::vector<SchemeStage>& PowerSgdScheme::stages() const {
  static const std::vector<SchemeStage> s = {{"compute P", StageKind::kCompute, Phase::kEncode},
                                             {"all-reduce P", StageKind::kCollective, Phase::kCommInFlight},
                                             {"compute Q", StageKind::kCompute, Phase::kEncode},
                                             {"all-reduce Q", StageKind::kCollective, Phase::kCommInFlight},
                                             {"decode", StageKind::kCompute, Phase::kDecode}};
  return s;
}

void PowerSgdScheme::plan(const std::vector<TensorRange>& buckets) {
  struct Piece {
    size_t at;
    int64_t floats;
  };
  std::vector<Piece> sums, qs;  // per bucket: the arena pieces of its sums and its Q's
  for (const TensorRange& r : buckets) {
    Bucket b;
    b.range = r;
    int64_t n_sums = 0, n_q = 0;
    for (int t = r.begin; t < r.end; ++t) {
      const Matrix& mx = matrices_[t];
      b.sum_at.push_back(n_sums);
      b.q_at.push_back(n_q);
      n_sums += mx.rank > 0 ? mx.cols * mx.rank : ctx_.grads[0][t].numel();
      n_q += mx.rows * mx.rank;
    }
    sums.push_back({arena_.reserve(4 * static_cast<size_t>(n_sums)), n_sums});
    qs.push_back({arena_.reserve(4 * static_cast<size_t>(n_q)), n_q});
    buckets_.push_back(std::move(b));
  }
  arena_.allocate(*ctx_.backend);
  for (size_t i = 0; i < buckets_.size(); ++i) {
    buckets_[i].sums = arena_.view(sums[i].at, sums[i].floats, DType::kF32);
    buckets_[i].q = arena_.view(qs[i].at, qs[i].floats, DType::kF32);
  }
}

Tensor PowerSgdScheme::p_of(const Bucket& b, int t) const {
  const Matrix& mx = matrices_[t];
  const int64_t at = b.sum_at[t - b.range.begin];
  return b.sums.slice0(at, at + mx.cols * mx.rank).reshaped(Shape{mx.cols, mx.rank});
}

Tensor PowerSgdScheme::q_work_of(const Bucket& b, int t) const {
  const Matrix& mx = matrices_[t];
  const int64_t at = b.q_at[t - b.range.begin];
  return b.q.slice0(at, at + mx.rows * mx.rank).reshaped(Shape{mx.rows, mx.rank});
}

Tensor PowerSgdScheme::q_state_of(int t) const { return state_.view(matrices_[t].q_state); }

Tensor PowerSgdScheme::matrix_of(int worker, int t) const {
  return ctx_.grads[worker][t].reshaped(Shape{matrices_[t].rows, matrices_[t].cols});
}

void PowerSgdScheme::run_stage(int stage, int bucket) {
  Bucket& b = buckets_[bucket];
  Communicator* world = ctx_.comms.world;
  switch (stage) {
    case kComputeP:
      compute_p(b);
      break;
    case kAllreduceP:
      if (world && b.sums.numel() > 0) world->allreduce(b.sums, ReduceOp::kSum);
      break;
    case kComputeQ:
      compute_q(b);
      break;
    case kAllreduceQ:
      if (world && b.q.numel() > 0) world->allreduce(b.q, ReduceOp::kSum);
      break;
    case kDecode:
      decode(b);
      break;
  }
}

void PowerSgdScheme::compute_p(Bucket& b) {
  Backend& be = *ctx_.backend;
  const int L = ctx_.local_workers;
  Tensor xs[Backend::kMaxCodecInputs];
  for (int t = b.range.begin; t < b.range.end; ++t) {
    const Matrix& mx = matrices_[t];
    if (mx.rank == 0) {  // summed as fp32 beside the P's
      const int64_t at = b.sum_at[t - b.range.begin];
      for (int l = 0; l < L; ++l) xs[l] = ctx_.grads[l][t];
      be.encode_f32_sum(xs, L, b.sums.slice0(at, at + ctx_.grads[0][t].numel()));
      continue;
    }
    // Error feedback: M <- M + e, and e <- M (the decode subtracts the approximation from it).
    for (int l = 0; l < L; ++l) {
      const Tensor e = state_.view(mx.residual[l]);
      be.axpy(1.f, e, ctx_.grads[l][t]);
      be.copy(e, ctx_.grads[l][t]);
    }
    const Tensor q = q_state_of(t);
    be.orthogonalize_columns(q, 0.f);
    const Tensor p = p_of(b, t);
    for (int l = 0; l < L; ++l) be.matmul(matrix_of(l, t), true, q, false, l == 0 ? 0.f : 1.f, p);
  }
}

void PowerSgdScheme::compute_q(Bucket& b) {
  Backend& be = *ctx_.backend;
  const int L = ctx_.local_workers;
  const std::vector<Tensor>& out = ctx_.grads[ctx_.targets[0]];
  for (int t = b.range.begin; t < b.range.end; ++t) {
    const Matrix& mx = matrices_[t];
    if (mx.rank == 0) {
      const int64_t at = b.sum_at[t - b.range.begin];
      be.decode_f32_sum(b.sums.slice0(at, at + out[t].numel()), ctx_.num_workers, out[t]);
      continue;
    }
    const Tensor p = p_of(b, t);
    be.orthogonalize_columns(p, 0.f);
    const Tensor q = q_work_of(b, t);
    for (int l = 0; l < L; ++l) be.matmul(matrix_of(l, t), false, p, false, l == 0 ? 0.f : 1.f, q);
  }
}

void PowerSgdScheme::decode(Bucket& b) {
  Backend& be = *ctx_.backend;
  const int target = ctx_.targets[0];
  for (int t = b.range.begin; t < b.range.end; ++t) {
    const Matrix& mx = matrices_[t];
    if (mx.rank == 0) continue;
    const Tensor q = q_work_of(b, t);
    be.scale(1.f / static_cast<float>(ctx_.num_workers), q);
    be.matmul(q, false, p_of(b, t), true, 0.f, matrix_of(target, t));
    be.copy(q_state_of(t), q);  // the next step's warm start
    const Tensor& approx = ctx_.grads[target][t];
    for (int l = 0; l < ctx_.local_workers; ++l) be.axpy(-1.f, approx, state_.view(mx.residual[l]));
  }
  ctx_.copy_to_other_targets(b.range);
}

ExchangeStats PowerSgdScheme::byte_model() const {
  ExchangeStats s;
  uint64_t first = 0, second = 0;  // floats of the P all-reduces and of the Q all-reduces
  for (const Bucket& b : buckets_) first += static_cast<uint64_t>(b.sums.numel()), second += b.q.numel();
  const int n = ctx_.num_workers;
  s.payload_bytes = 4 * (first + second);
  s.moved_bytes =
      Communicator::allreduce_moved_bytes(4 * first, n) + Communicator::allreduce_moved_bytes(4 * second, n);
  DensePart::set_fp32_equivalent(ctx_, s);
  return s;
}

std::string PowerSgdScheme::describe() const {
  const ExchangeStats s = byte_model();
  return fmt::format(
      "powersgd (rank {}, {} of {} tensors low-rank, {:.1f}x fewer bytes than fp32, error feedback, warm start)",
      max_rank_, compressed_tensors(), matrices_.size(),
      static_cast<double>(s.fp32_payload_bytes) / static_cast<double>(std::max<uint64_t>(s.payload_bytes, 1)));
}

std::unique_ptr<GradientScheme> make_powersgd_scheme(SchemeContext& ctx) {
  return std::make_unique<PowerSgdScheme>(ctx);
}

size_t powersgd_buffer_bytes(const SchemeMemoryQuery& q) {
  const size_t n = static_cast<size_t>(q.policy->total_elements());
  return 4 * static_cast<size_t>(q.local_workers) * n + 4 * n / 64;
}

const std::vector<Flag<ExchangeConfig>>& powersgd_flags() {
  using C = ExchangeConfig;
  static const std::vector<Flag<C>> table = {
      {"powersgd_rank", &C::powersgd_rank,
       "`--exchange powersgd`: the rank R of each weight matrix's approximation P Q^T (a matrix of n x m is "
       "compressed when (n + m) x R x 2 < n x m, else summed as fp32; PyTorch's PowerSGD hook's "
       "matrix_approximation_rank)",
       at_least(1), kFlagRun},
  };
  return table;
}

}  // namespace tg

// HierarchicalScheme: reduce-scatter in the node, ternary codes across nodes, all-gather in the node.
#include "src/exchange/schemes/terngrad/hierarchical_scheme.h"

#include <algorithm>

#include "terngrad/core/error.h"
#include "terngrad/core/philox.h"

namespace tg {

namespace {
enum Stage {
  kScalers,
  kShareScalers,
  kLocalSum,
  kReduceScatter,
  kEncode,
  kCrossExchange,
  kAllGather,
  kDecode,
  kScatter
};
constexpr int64_t kAlign = 64;
int64_t aligned(int64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }
}  // namespace

HierarchicalScheme::HierarchicalScheme(SchemeContext& ctx)
    : GradientScheme(ctx), coding_(*ctx.policy, ctx.options.seed) {
  const CompressionPolicy& p = *ctx.policy;
  TG_CHECK(p.f16_elements() == 0,
           "--exchange hierarchical takes --grad_bits 1 (ternary between nodes) or 32 (fp32), not 16");
  // (Without ternary tensors nothing is rounded: the flag does nothing, as for every fp32 exchange.)
  TG_CHECK(!ctx.options.error_feedback || p.num_ternary() == 0,
           "--error_feedback is an option of the terngrad scheme (--exchange allgather2 or allreduce8), not of "
           "--exchange hierarchical");
  TG_CHECK(ctx.options.local_bits == 32 || ctx.options.local_bits == 16, "--local_bits must be 32 or 16, got {}",
           ctx.options.local_bits);
  L_ = ctx.comms.local ? ctx.comms.local->size() : 1;
  k_ = ctx.comms.local ? ctx.comms.local->rank() : 0;
  M_ = ctx.comms.cross ? ctx.comms.cross->size() : 1;
  node_workers_ = L_ * ctx.local_workers;
  TG_CHECK(static_cast<int64_t>(M_) * node_workers_ == ctx.num_workers,
           "--exchange hierarchical: {} nodes x {} ranks x {} workers do not make the {} workers of the job", M_, L_,
           ctx.local_workers, ctx.num_workers);
  node_key_worker_ = static_cast<uint32_t>(ctx.first_worker - k_ * ctx.local_workers);
  cross_gather_ = resolve_exchange_mode(ExchangeMode::kAuto, M_) == ExchangeMode::kAllgather2;
  half_ = ctx.options.local_bits == 16 && L_ > 1;
  auto stage = [&](Stage op, const char* name, StageKind kind, Phase phase) {
    stages_.push_back({name, kind, phase});
    stage_ops_.push_back(op);
  };
  stage(kScalers, "scalers", StageKind::kCompute, Phase::kScalers);
  if (ctx.comms.cross) stage(kShareScalers, "share scalers", StageKind::kCollective, Phase::kCommInFlight);
  stage(kLocalSum, "local sum", StageKind::kCompute, Phase::kEncode);
  stage(kReduceScatter, "reduce-scatter (node)", StageKind::kCollective, Phase::kCommInFlight);
  if (ctx.comms.cross) {
    stage(kEncode, "encode", StageKind::kCompute, Phase::kEncode);
    stage(kCrossExchange, "exchange codes (nodes)", StageKind::kCollective, Phase::kCommInFlight);
    stage(kAllGather, "all-gather codes (node)", StageKind::kCollective, Phase::kCommInFlight);
    stage(kDecode, "decode", StageKind::kCompute, Phase::kDecode);
  } else {
    stage(kEncode, "average", StageKind::kCompute, Phase::kEncode);
    stage(kAllGather, "all-gather (node)", StageKind::kCollective, Phase::kCommInFlight);
    stage(kScatter, "scatter", StageKind::kCompute, Phase::kDecode);
  }
}

std::string HierarchicalScheme::describe() const {
  if (!ctx_.comms.cross)
    return fmt::format("hierarchical (1 node x {} ranks; {} inside the node)", L_, half_ ? "fp16" : "fp32");
  return fmt::format(
      "hierarchical ({} nodes x {} ranks; {} reduce-scatter inside a node, {} between nodes, the codes "
      "all-gathered inside a node)",
      M_, L_, half_ ? "fp16" : "fp32",
      ctx_.policy->num_ternary() == 0 ? "fp32" : (cross_gather_ ? "allgather2" : "allreduce8"));
}

const std::vector<SchemeStage>& HierarchicalScheme::stages() const { return stages_; }

void HierarchicalScheme::plan(const std::vector<TensorRange>& ranges) {
  const CompressionPolicy& p = *ctx_.policy;
  const int64_t bucket = p.scaler_bucket();
  const bool nodes = ctx_.comms.cross != nullptr;
  scalers_ = std::make_unique<SharedScalers>(ctx_, coding_, arena_);
  const size_t at_zeros = arena_.reserve(4 * static_cast<size_t>(p.num_ternary()));
  struct Offsets {
    size_t f, h, packed, node;
  };
  std::vector<Offsets> off;
  for (const TensorRange& r : ranges) {
    Bucket b;
    b.range = r;
    // Shard-major: local rank k owns part k of every tensor of the bucket (parts of ceil(n / L) elements, the
    // last one shorter), so which rank encodes an element, and the piece it is in, do not depend on the
    // bucketing. F = shard 0 (part 0 of each tensor, padded to ceil(n / L)), shard 1, ...
    for (int i = r.begin; i < r.end; ++i) {
      Piece pc;
      pc.tensor = i;
      pc.n = p.tensors()[i].numel;
      pc.part = (pc.n + L_ - 1) / L_;
      // Per-bucket scalers: a part is whole buckets, so each part's elements use whole scalers.
      if (bucket > 0 && pc.n > bucket) pc.part = (pc.part + bucket - 1) / bucket * bucket;
      pc.at = b.shard;
      b.shard += pc.part;
      pc.ternary = nodes && p.tensors()[i].coding == GradCoding::kTernary;
      if (nodes && pc.ternary) {
        pc.packed_at = b.packed_bytes;
        b.packed_bytes += ternary_packed_bytes(pc.part);
      } else if (nodes) {
        pc.dense_at = b.dense;
        b.dense += pc.part;
      }
      b.pieces.push_back(pc);
    }
    const int64_t whole = L_ * b.shard;
    // A bucket of one tensor whose parts are equal (n = L * S) already is in the shard-major layout: with one
    // local worker that is also the target, its gradient is F (the reduce-scatter and the encode work on it in
    // place; the local sum's copy of the bucket is not needed).
    b.in_place =
        ctx_.local_workers == 1 && ctx_.targets[0] == 0 && r.end - r.begin == 1 && p.tensors()[r.begin].numel == whole;
    if (nodes) {
      b.dense_offset = aligned(cross_gather_ ? M_ * b.packed_bytes : 4 * b.packed_bytes);
      b.block = aligned(b.dense_offset + 4 * b.dense);
    }
    Offsets o{};
    o.f = b.in_place ? 0 : arena_.reserve(4 * static_cast<size_t>(whole));
    o.h = half_ ? arena_.reserve(2 * static_cast<size_t>(whole)) : 0;
    o.packed = arena_.reserve(static_cast<size_t>(b.packed_bytes));
    o.node = arena_.reserve(static_cast<size_t>(L_ * b.block));
    off.push_back(o);
    buckets_.push_back(std::move(b));
  }
  arena_.allocate(*ctx_.backend);
  scalers_->bind(arena_);
  if (nodes && p.num_ternary() > 0) {
    zero_codes_ = arena_.view(at_zeros, p.num_ternary(), DType::kI32);
    zero_code_elements_.assign(static_cast<size_t>(p.num_ternary()), 0);
    for (const Bucket& b : buckets_)
      for (const Piece& pc : b.pieces)
        if (pc.ternary) zero_code_elements_[static_cast<size_t>(p.tensors()[pc.tensor].ternary_index)] = pc.count(k_);
  }
  for (size_t i = 0; i < buckets_.size(); ++i) {
    Bucket& b = buckets_[i];
    const int64_t whole = L_ * b.shard;
    b.f = b.in_place ? ctx_.grads[0][b.range.begin].reshaped(Shape{whole}) : arena_.view(off[i].f, whole, DType::kF32);
    if (half_) b.h = arena_.view(off[i].h, whole, DType::kF16);
    b.packed = arena_.view(off[i].packed, b.packed_bytes, DType::kU8);
    b.node = arena_.view(off[i].node, L_ * b.block, DType::kU8);
    b.node_sums = arena_.view(off[i].node, L_ * b.block, DType::kI8);
    const size_t own = off[i].node + static_cast<size_t>(k_ * b.block);
    if (cross_gather_) b.gathered = arena_.view(own, M_ * b.packed_bytes, DType::kU8);
    if (!cross_gather_) b.code_sums = arena_.view(own, 4 * b.packed_bytes, DType::kI8);
    b.dense_sum = dense_of(b, k_);
  }
}

// The shared scalers of part k of a piece's tensor: its buckets (a part is whole buckets), or its one scaler.
Tensor HierarchicalScheme::part_scalers(const Piece& pc, int k) const {
  const TensorCodingPlan& t = ctx_.policy->tensors()[pc.tensor];
  const int64_t bucket = ctx_.policy->scaler_bucket();
  if (t.num_scalers == 1) return scalers_->shared().slice0(t.scaler_index, t.scaler_index + 1);
  const int64_t first = t.scaler_index + pc.begin(k) / bucket;
  return scalers_->shared().slice0(first, first + ternary_num_scalers(pc.count(k), bucket));
}

Tensor HierarchicalScheme::zero_count(const Piece& pc) const {
  const int i = ctx_.policy->tensors()[pc.tensor].ternary_index;
  return zero_codes_.defined() && i >= 0 ? zero_codes_.slice0(i, i + 1) : Tensor();
}

Tensor HierarchicalScheme::shard_of(const Bucket& b, const Tensor& whole) const {
  return whole.slice0(k_ * b.shard, (k_ + 1) * b.shard);
}

Tensor HierarchicalScheme::dense_of(const Bucket& b, int k) const {
  return Tensor(static_cast<char*>(b.node.raw()) + k * b.block + b.dense_offset, Shape{b.dense}, DType::kF32,
                b.node.device());
}

void HierarchicalScheme::run_stage(int stage, int bucket) {
  Bucket& b = buckets_[bucket];
  switch (stage_ops_[stage]) {
    case kScalers:
      scalers(b);
      break;
    case kShareScalers:
      scalers_->share(ctx_.comms.world, ctx_.policy->layout(b.range));
      break;
    case kLocalSum:
      local_sum(b);
      break;
    case kReduceScatter:
      reduce_scatter(b);
      break;
    case kEncode:
      encode(b);
      break;
    case kCrossExchange:
      cross_exchange(b);
      break;
    case kAllGather:
      all_gather(b);
      break;
    case kDecode:
      decode(b);
      break;
    case kScatter:
      scatter(b);
      break;
  }
}

// With weight decay to apply (apply_weight_decay): the ternary tensors' in the scalers' pass, the others' (and all
// of them on one node, where nothing is ternarized) by axpy.
void HierarchicalScheme::scalers(Bucket& b) {
  const RangeLayout l = ctx_.policy->layout(b.range);
  const bool ternary = l.num_scalers() > 0 && ctx_.comms.cross;  // one node: nothing is ternarized
  scalers_->add_other_weight_decay(b.range, /*pass_runs=*/ternary);
  if (!ternary) return;
  scalers_->compute(b.range);
}

// F = the sum of the rank's workers' gradients, in the shard-major layout (the padding stays 0).
void HierarchicalScheme::local_sum(Bucket& b) {
  Backend& be = *ctx_.backend;
  if (b.in_place) {  // F is the gradient
    if (half_) be.cast(b.h, b.f);
    return;
  }
  const int W = ctx_.local_workers;
  Tensor xs[Backend::kMaxCodecInputs];
  for (const Piece& pc : b.pieces)
    for (int k = 0; k < L_; ++k) {
      const int64_t a = pc.begin(k), count = pc.count(k);
      if (count == 0) continue;
      for (int w = 0; w < W; ++w) xs[w] = ctx_.grads[w][pc.tensor].reshaped(Shape{pc.n}).slice0(a, a + count);
      const int64_t at = k * b.shard + pc.at;
      be.encode_f32_sum(xs, W, b.f.slice0(at, at + count));
    }
  if (half_) be.cast(b.h, b.f);
}

void HierarchicalScheme::reduce_scatter(Bucket& b) {
  Communicator* local = ctx_.comms.local;
  if (!local || b.shard == 0) return;
  const Tensor& whole = half_ ? b.h : b.f;
  const Tensor own = shard_of(b, whole);
  local->reduce_scatter(whole.raw(), own.raw(), b.shard, whole.dtype(), ReduceOp::kSum, ctx_.backend->device());
}

// The node's average of the own shard; with several nodes its codes (and dense pieces) for the cross exchange.
void HierarchicalScheme::encode(Bucket& b) {
  Backend& be = *ctx_.backend;
  const Tensor own = shard_of(b, b.f);
  if (b.shard == 0) return;
  if (half_) be.cast(own, shard_of(b, b.h));
  be.decode_f32_sum(own, node_workers_, own);  // the node's average (a division, as the fp32 scheme's decode)
  if (!ctx_.comms.cross) return;               // one node: the average is complete
  const CompressionPolicy& p = *ctx_.policy;
  const RangeLayout l = ctx_.policy->layout(b.range);
  scalers_->check(b.range, l, step_);
  const PhiloxKey key = philox_key(ctx_.options.seed, node_key_worker_);
  // Tensor t's part k draws as tensor t + k * num_tensors, its elements counted from the part's start: the same
  // draw for an element whatever the bucketing (and, with one local rank, TernGrad's draws).
  const uint32_t shard_salt = static_cast<uint32_t>(k_) * static_cast<uint32_t>(p.num_tensors());
  for (const Piece& pc : b.pieces) {
    const int64_t count = pc.count(k_);
    if (count == 0) continue;
    const Tensor values = own.slice0(pc.at, pc.at + count);
    if (pc.ternary) {
      be.ternary_encode(values, part_scalers(pc, k_), key, step_, static_cast<uint32_t>(pc.tensor) + shard_salt,
                        b.packed.slice0(pc.packed_at, pc.packed_at + ternary_packed_bytes(count)), zero_count(pc),
                        p.scaler_bucket());
    } else {
      be.copy(b.dense_sum.slice0(pc.dense_at, pc.dense_at + count), values);
    }
  }
  if (!cross_gather_ && b.packed_bytes > 0) be.ternary_sum_codes(b.packed, b.packed_bytes, 1, b.code_sums);
}

void HierarchicalScheme::cross_exchange(Bucket& b) {
  Communicator* cross = ctx_.comms.cross;
  const Device dev = ctx_.backend->device();
  if (b.packed_bytes > 0) {
    if (cross_gather_)
      cross->allgather(b.packed.raw(), b.gathered.raw(), static_cast<size_t>(b.packed_bytes), dev);
    else
      cross->allreduce(b.code_sums.raw(), 4 * b.packed_bytes, DType::kI8, ReduceOp::kSum, dev);
  }
  if (b.dense > 0) cross->allreduce(b.dense_sum.raw(), b.dense, DType::kF32, ReduceOp::kSum, dev);
}

// Several nodes: the blocks (codes and dense sums) of every local rank. One node: the average's shards.
void HierarchicalScheme::all_gather(Bucket& b) {
  Communicator* local = ctx_.comms.local;
  if (!local) return;
  const Device dev = ctx_.backend->device();
  if (ctx_.comms.cross) {
    if (b.block > 0)
      local->allgather(static_cast<char*>(b.node.raw()) + k_ * b.block, b.node.raw(), static_cast<size_t>(b.block),
                       dev);
    return;
  }
  if (b.shard == 0) return;
  const Tensor& whole = half_ ? b.h : b.f;
  const Tensor own = shard_of(b, whole);
  if (half_) ctx_.backend->cast(own, shard_of(b, b.f));
  local->allgather(own.raw(), whole.raw(), static_cast<size_t>(own.numel()) * dtype_size(whole.dtype()), dev);
}

// Several nodes: every part of every tensor from the node's blocks into the target's gradients (the ternary
// ones left coded with defer_decode).
void HierarchicalScheme::decode(Bucket& b) {
  Backend& be = *ctx_.backend;
  const std::vector<Tensor>& out = ctx_.grads[ctx_.targets[0]];
  for (const Piece& pc : b.pieces) {
    if (pc.ternary) continue;
    const Tensor flat = out[pc.tensor].reshaped(Shape{pc.n});
    for (int k = 0; k < L_; ++k) {
      const int64_t a = pc.begin(k), count = pc.count(k);
      if (count > 0)
        be.decode_f32_sum(dense_of(b, k).slice0(pc.dense_at, pc.dense_at + count), M_, flat.slice0(a, a + count));
    }
  }
  if (!deferred_.active()) decode_ternary(b);
  ctx_.copy_to_other_targets(b.range);
}

void HierarchicalScheme::decode_ternary(Bucket& b) {
  Backend& be = *ctx_.backend;
  const CompressionPolicy& p = *ctx_.policy;
  const std::vector<Tensor>& out = ctx_.grads[ctx_.targets[0]];
  const int64_t bucket = p.scaler_bucket();
  for (const Piece& pc : b.pieces) {
    if (!pc.ternary) continue;
    const Tensor flat = out[pc.tensor].reshaped(Shape{pc.n});
    for (int k = 0; k < L_; ++k) {
      const int64_t a = pc.begin(k), count = pc.count(k), at = k * b.block;
      if (count == 0) continue;
      if (cross_gather_)
        be.ternary_decode_gathered(b.node.slice0(at + pc.packed_at, b.node.numel()), b.packed_bytes, M_,
                                   part_scalers(pc, k), flat.slice0(a, a + count), bucket);
      else
        be.ternary_decode_sums(b.node_sums.slice0(at + 4 * pc.packed_at, at + 4 * pc.packed_at + count),
                               part_scalers(pc, k), M_, flat.slice0(a, a + count), bucket);
    }
  }
}

// One node: F's tensors into the first target (copies to the other targets).
void HierarchicalScheme::scatter(Bucket& b) {
  Backend& be = *ctx_.backend;
  if (half_) be.cast(b.f, b.h);
  if (!b.in_place) {  // else F is the target's gradient, and the only one
    const std::vector<Tensor>& out = ctx_.grads[ctx_.targets[0]];
    for (const Piece& pc : b.pieces) {
      const Tensor flat = out[pc.tensor].reshaped(Shape{pc.n});
      for (int k = 0; k < L_; ++k) {
        const int64_t a = pc.begin(k), count = pc.count(k), at = k * b.shard + pc.at;
        if (count > 0) be.copy(flat.slice0(a, a + count), b.f.slice0(at, at + count));
      }
    }
  }
  ctx_.copy_to_other_targets(b.range);
}

CodedUpdate* HierarchicalScheme::coded_update() {
  return ctx_.comms.cross && ctx_.policy->num_ternary() > 0 ? this : nullptr;
}

// The coded averages are views of the node's blocks (fixed at plan time) in L parts, a part per local rank's
// block: every step's exchange refills the buffers they view.
void HierarchicalScheme::defer_decode() {
  TG_CHECK(coded_update(),
           "the hierarchical scheme leaves its average coded only with several nodes and ternary tensors");
  TG_CHECK(ctx_.targets.size() == 1,
           "the hierarchical scheme leaves its average coded for one target worker only, not {}", ctx_.targets.size());
  const CompressionPolicy& p = *ctx_.policy;
  std::vector<CodedAverage> coded(static_cast<size_t>(p.num_tensors()));
  std::vector<TensorRange> ranges;
  for (const Bucket& b : buckets_) {
    ranges.push_back(b.range);
    for (const Piece& pc : b.pieces) {
      if (!pc.ternary) continue;
      const TensorCodingPlan& t = p.tensors()[pc.tensor];
      CodedAverage& c = coded[pc.tensor];
      c.scaler = scalers_->shared().slice0(t.scaler_index, t.scaler_index + t.num_scalers);
      c.bucket = p.scaler_bucket();
      c.num_workers = M_;
      c.part = pc.part;
      c.part_stride = b.block;
      if (cross_gather_) {
        c.gathered = b.node.slice0(pc.packed_at, b.node.numel());
        c.stride = b.packed_bytes;
      } else {
        c.code_sums = b.node_sums.slice0(4 * pc.packed_at, b.node_sums.numel());
      }
    }
  }
  deferred_.start(std::move(coded), std::move(ranges));
}

void HierarchicalScheme::begin_step(uint32_t step) {
  GradientScheme::begin_step(step);
  deferred_.begin_step();
}

bool HierarchicalScheme::decode_deferred(int bucket) {
  if (!deferred_.take(bucket)) return false;
  decode_ternary(buckets_[bucket]);
  return true;
}

// Per rank and step: the scalers' MAX over the world; inside the node the reduce-scatter of the padded bucket and
// the all-gather of its average (one node) or of the blocks (several); between nodes the shard's codes (allgather2 or
// allreduce8) and its fp32 pieces.
ExchangeStats HierarchicalScheme::byte_model() const {
  const CompressionPolicy& p = *ctx_.policy;
  const int ranks = ctx_.comms.world ? ctx_.comms.world->size() : 1;
  ExchangeStats s;
  if (p.num_ternary() > 0 && ctx_.comms.world) {
    s.payload_bytes += 4ull * p.num_scalers();
    s.moved_bytes += Communicator::allreduce_moved_bytes(4ull * p.num_scalers(), ranks);
  }
  const uint64_t esize = half_ ? 2 : 4;
  for (const Bucket& b : buckets_) {
    const uint64_t shard = static_cast<uint64_t>(b.shard) * esize, L = static_cast<uint64_t>(L_);
    // Inside the node: the reduce-scatter, then the all-gather of the average (one node) or of the blocks.
    const uint64_t gathered = M_ > 1 ? static_cast<uint64_t>(b.block) : shard;
    if (L_ > 1) {
      s.payload_bytes += L * shard + gathered;
      s.moved_bytes += (L - 1) * (shard + gathered);
    }
    if (M_ > 1) {
      const uint64_t pb = static_cast<uint64_t>(b.packed_bytes);
      if (cross_gather_) {
        s.payload_bytes += pb;
        s.moved_bytes += Communicator::allgather_moved_bytes(pb, M_);
      } else {
        s.payload_bytes += 4 * pb;
        s.moved_bytes += Communicator::allreduce_moved_bytes(4 * pb, M_);
      }
      s.payload_bytes += 4ull * static_cast<uint64_t>(b.dense);
      s.moved_bytes += Communicator::allreduce_moved_bytes(4ull * static_cast<uint64_t>(b.dense), M_);
    }
  }
  s.fp32_payload_bytes = 4ull * p.total_elements();
  s.fp32_moved_bytes = Communicator::allreduce_moved_bytes(s.fp32_payload_bytes, ctx_.num_workers);
  return s;
}

std::unique_ptr<GradientScheme> make_hierarchical_scheme(SchemeContext& ctx) {
  return std::make_unique<HierarchicalScheme>(ctx);
}

size_t hierarchical_buffer_bytes(const SchemeMemoryQuery& q) {
  const size_t n = static_cast<size_t>(q.policy->total_elements());
  size_t bytes = q.scaler_bytes() + 4 * n + (q.options.local_bits == 16 ? 2 * n : 0);
  if (q.layout.num_nodes > 1) {
    const size_t R = static_cast<size_t>(std::max(1, q.layout.ranks_per_node));
    const size_t M = static_cast<size_t>(q.layout.num_nodes), packed = q.packed_bytes();
    const size_t dense_elements = n - static_cast<size_t>(q.ternary_elements());
    bytes += packed / R + (M < 8 ? M * packed : 4 * packed) + 4 * dense_elements;
  }
  return bytes;
}

}  // namespace tg

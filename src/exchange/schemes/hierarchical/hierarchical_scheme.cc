// HierarchicalScheme: reduce-scatter in the node, ternary codes across nodes, all-gather in the node.
#include "src/exchange/schemes/hierarchical/hierarchical_scheme.h"

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
  kDecode,
  kAllGather,
  kScatter
};
}

HierarchicalScheme::HierarchicalScheme(SchemeContext& ctx) : GradientScheme(ctx) {
  const CompressionPolicy& p = ctx.codec->policy();
  TG_CHECK(p.f16_elements() == 0,
           "--exchange hierarchical takes --grad_bits 1 (ternary between nodes) or 32 (fp32), not 16");
  TG_CHECK(!ctx.options.error_feedback,
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
}

std::string HierarchicalScheme::describe() const {
  return fmt::format("hierarchical ({} nodes x {} ranks; {} inside a node, {} between nodes)", M_, L_,
                     half_ ? "fp16" : "fp32",
                     ctx_.codec->policy().num_ternary() == 0 ? "fp32" : (cross_gather_ ? "allgather2" : "allreduce8"));
}

const std::vector<SchemeStage>& HierarchicalScheme::stages() const {
  static const std::vector<SchemeStage> s = {{"scalers", StageKind::kCompute, Phase::kScalers},
                                             {"share scalers", StageKind::kCollective, Phase::kCommInFlight},
                                             {"local sum", StageKind::kCompute, Phase::kEncode},
                                             {"reduce-scatter (node)", StageKind::kCollective, Phase::kCommInFlight},
                                             {"encode", StageKind::kCompute, Phase::kEncode},
                                             {"exchange codes (nodes)", StageKind::kCollective, Phase::kCommInFlight},
                                             {"decode", StageKind::kCompute, Phase::kDecode},
                                             {"all-gather (node)", StageKind::kCollective, Phase::kCommInFlight},
                                             {"scatter", StageKind::kCompute, Phase::kDecode}};
  return s;
}

void HierarchicalScheme::plan(const std::vector<TensorRange>& ranges) {
  const CompressionPolicy& p = ctx_.codec->policy();
  const int W = ctx_.local_workers;
  const int64_t T = p.num_ternary();
  const size_t at_local = arena_.reserve(4 * static_cast<size_t>(W * T));
  const size_t at_shared = arena_.reserve(4 * static_cast<size_t>(T));
  const size_t at_flag = arena_.reserve(4);
  struct Offsets {
    size_t f, h, packed, gathered, sums, dense;
  };
  std::vector<Offsets> off;
  for (const TensorRange& r : ranges) {
    Bucket b;
    b.range = r;
    // Shard-major: local rank k owns part k of every tensor of the bucket (parts of ceil(n / L) elements, the
    // last one shorter), so which rank encodes an element, and the piece it is in, do not depend on the
    // bucketing. F = shard 0 (part 0 of each tensor, padded to ceil(n / L)), shard 1, ...
    for (int i = r.begin; i < r.end; ++i) {
      const int64_t n = p.tensors()[i].numel;
      b.part.push_back((n + L_ - 1) / L_);
      b.offset.push_back(b.shard);
      b.shard += b.part.back();
    }
    for (int i = r.begin; i < r.end; ++i) {
      const int64_t n = p.tensors()[i].numel, part = b.part[i - r.begin];
      Piece pc;
      pc.tensor = i;
      pc.begin = std::min(n, k_ * part);
      pc.count = std::min(n, pc.begin + part) - pc.begin;
      pc.at = b.offset[i - r.begin];
      if (pc.count == 0) continue;
      pc.ternary = p.tensors()[i].coding == GradCoding::kTernary;
      if (pc.ternary) {
        pc.packed_at = b.packed_bytes;
        b.packed_bytes += (pc.count + 3) / 4;
      } else {
        pc.dense_at = b.dense;
        b.dense += pc.count;
      }
      b.pieces.push_back(pc);
    }
    const size_t whole = static_cast<size_t>(L_ * b.shard);
    // A bucket of one tensor whose parts are equal (n = L * S) already is in the shard-major layout: with one
    // local worker that is also the target, its gradient is F (the reduce-scatter, the decode and the all-gather
    // work on it in place; the local sum's and the scatter's copies of the bucket are not needed).
    b.in_place = ctx_.local_workers == 1 && ctx_.targets[0] == 0 && r.end - r.begin == 1 &&
                 p.tensors()[r.begin].numel == static_cast<int64_t>(whole);
    Offsets o{};
    o.f = b.in_place ? 0 : arena_.reserve(4 * whole);
    o.h = half_ ? arena_.reserve(2 * whole) : 0;
    o.packed = arena_.reserve(static_cast<size_t>(b.packed_bytes));
    o.gathered = cross_gather_ ? arena_.reserve(static_cast<size_t>(M_ * b.packed_bytes)) : 0;
    o.sums = cross_gather_ ? 0 : arena_.reserve(4 * static_cast<size_t>(b.packed_bytes));
    o.dense = arena_.reserve(4 * static_cast<size_t>(b.dense));
    off.push_back(o);
    buckets_.push_back(std::move(b));
  }
  arena_.allocate(*ctx_.backend);
  local_scalers_ = arena_.view(at_local, W * T, DType::kF32);
  for (int w = 0; w < W; ++w) local_scaler_rows_.push_back(local_scalers_.slice0(w * T, (w + 1) * T));
  shared_scalers_ = arena_.view(at_shared, T, DType::kF32);
  nonfinite_ = arena_.view(at_flag, 1, DType::kI32);
  host_scalers_.assign(static_cast<size_t>(T), 0.f);
  for (size_t i = 0; i < buckets_.size(); ++i) {
    Bucket& b = buckets_[i];
    const int64_t whole = L_ * b.shard;
    b.f = b.in_place ? ctx_.grads[0][b.range.begin].reshaped(Shape{whole}) : arena_.view(off[i].f, whole, DType::kF32);
    if (half_) b.h = arena_.view(off[i].h, whole, DType::kF16);
    b.packed = arena_.view(off[i].packed, b.packed_bytes, DType::kU8);
    if (cross_gather_) b.gathered = arena_.view(off[i].gathered, M_ * b.packed_bytes, DType::kU8);
    if (!cross_gather_) b.code_sums = arena_.view(off[i].sums, 4 * b.packed_bytes, DType::kI8);
    b.dense_sum = arena_.view(off[i].dense, b.dense, DType::kF32);
  }
}

Tensor HierarchicalScheme::shard_of(const Bucket& b, const Tensor& whole) const {
  return whole.slice0(k_ * b.shard, (k_ + 1) * b.shard);
}

void HierarchicalScheme::run_stage(int stage, int bucket) {
  Bucket& b = buckets_[bucket];
  switch (stage) {
    case kScalers:
      scalers(b);
      break;
    case kShareScalers: {
      const RangeLayout l = ctx_.codec->layout(b.range);
      if (ctx_.comms.cross && l.num_scalers() > 0)
        ctx_.comms.world->allreduce(shared_scalers_.slice0(l.scaler_begin, l.scaler_end).raw(), l.num_scalers(),
                                    DType::kF32, ReduceOp::kMax, ctx_.backend->device());
      break;
    }
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
    case kDecode:
      decode(b);
      break;
    case kAllGather:
      all_gather(b);
      break;
    case kScatter:
      scatter(b);
      break;
  }
}

// With weight decay to apply (apply_weight_decay): the ternary tensors' in the scalers' pass, the others' (and all
// of them on one node, where nothing is ternarized) by axpy.
void HierarchicalScheme::scalers(Bucket& b) {
  const RangeLayout l = ctx_.codec->layout(b.range);
  const bool ternary = l.num_scalers() > 0 && ctx_.comms.cross;  // one node: nothing is ternarized
  ctx_.add_unfused_weight_decay(b.range, /*ternary_fused=*/ternary);
  if (!ternary) return;
  for (int w = 0; w < ctx_.local_workers; ++w)
    ctx_.codec->local_scalers(*ctx_.backend, ctx_.grads[w], b.range, local_scaler_rows_[w], nullptr, ctx_.weight_decay);
  ctx_.codec->max_local_scalers(*ctx_.backend, local_scaler_rows_, b.range, shared_scalers_);
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
  for (int i = b.range.begin; i < b.range.end; ++i) {
    const int64_t n = ctx_.grads[0][i].numel(), part = b.part[i - b.range.begin];
    for (int k = 0; k < L_; ++k) {
      const int64_t a = std::min(n, k * part), e = std::min(n, a + part);
      if (a == e) continue;
      for (int w = 0; w < W; ++w) xs[w] = ctx_.grads[w][i].reshaped(Shape{n}).slice0(a, e);
      const int64_t at = k * b.shard + b.offset[i - b.range.begin];
      be.encode_f32_sum(xs, W, b.f.slice0(at, at + (e - a)));
    }
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

void HierarchicalScheme::encode(Bucket& b) {
  Backend& be = *ctx_.backend;
  const Tensor own = shard_of(b, b.f);
  if (b.shard == 0) return;
  if (half_) be.cast(own, shard_of(b, b.h));
  be.decode_f32_sum(own, node_workers_, own);  // the node's average (a division, as the fp32 scheme's decode)
  if (!ctx_.comms.cross) return;               // one node: the average is complete
  const CompressionPolicy& p = ctx_.codec->policy();
  const RangeLayout l = ctx_.codec->layout(b.range);
  if (l.num_scalers() > 0) {
    const Tensor shared = shared_scalers_.slice0(l.scaler_begin, l.scaler_end);
    be.unscale_and_check(shared, 1.f, shared, nonfinite_);
    if (be.device().is_cpu() && ctx_.options.host_scaler_check) {
      be.copy(Tensor(host_scalers_.data() + l.scaler_begin, Shape{l.num_scalers()}, DType::kF32, Device::cpu()),
              shared);
      ctx_.codec->check_scalers(host_scalers_.data(), b.range, step_);
    }
  }
  const PhiloxKey key = philox_key(ctx_.options.seed, node_key_worker_);
  // Tensor t's part k draws as tensor t + k * num_tensors, its elements counted from the part's start: the same
  // draw for an element whatever the bucketing (and, with one local rank, TernGrad's draws).
  const uint32_t shard_salt = static_cast<uint32_t>(k_) * static_cast<uint32_t>(p.num_tensors());
  for (const Piece& pc : b.pieces) {
    const Tensor values = own.slice0(pc.at, pc.at + pc.count);
    if (pc.ternary) {
      const int s = p.tensors()[pc.tensor].scaler_index;
      be.ternary_encode(values, shared_scalers_.slice0(s, s + 1), key, step_,
                        static_cast<uint32_t>(pc.tensor) + shard_salt,
                        b.packed.slice0(pc.packed_at, pc.packed_at + (pc.count + 3) / 4), Tensor());
    } else {
      be.copy(b.dense_sum.slice0(pc.dense_at, pc.dense_at + pc.count), values);
    }
  }
  if (!cross_gather_ && b.packed_bytes > 0) be.ternary_sum_codes(b.packed, b.packed_bytes, 1, b.code_sums);
}

void HierarchicalScheme::cross_exchange(Bucket& b) {
  Communicator* cross = ctx_.comms.cross;
  if (!cross) return;
  const Device dev = ctx_.backend->device();
  if (b.packed_bytes > 0) {
    if (cross_gather_)
      cross->allgather(b.packed.raw(), b.gathered.raw(), static_cast<size_t>(b.packed_bytes), dev);
    else
      cross->allreduce(b.code_sums.raw(), 4 * b.packed_bytes, DType::kI8, ReduceOp::kSum, dev);
  }
  if (b.dense > 0) cross->allreduce(b.dense_sum.raw(), b.dense, DType::kF32, ReduceOp::kSum, dev);
}

void HierarchicalScheme::decode(Bucket& b) {
  Backend& be = *ctx_.backend;
  const Tensor own = shard_of(b, b.f);
  if (ctx_.comms.cross && b.shard > 0) {
    const CompressionPolicy& p = ctx_.codec->policy();
    for (const Piece& pc : b.pieces) {
      const Tensor values = own.slice0(pc.at, pc.at + pc.count);
      if (pc.ternary) {
        const int s = p.tensors()[pc.tensor].scaler_index;
        const Tensor scaler = shared_scalers_.slice0(s, s + 1);
        if (cross_gather_)
          be.ternary_decode_gathered(b.gathered.slice0(pc.packed_at, b.gathered.numel()), b.packed_bytes, M_, scaler,
                                     values);
        else
          be.ternary_decode_sums(b.code_sums.slice0(4 * pc.packed_at, 4 * pc.packed_at + pc.count), scaler, M_, values);
      } else {
        be.decode_f32_sum(b.dense_sum.slice0(pc.dense_at, pc.dense_at + pc.count), M_, values);
      }
    }
  }
  if (half_ && b.shard > 0) be.cast(shard_of(b, b.h), own);
}

void HierarchicalScheme::all_gather(Bucket& b) {
  Communicator* local = ctx_.comms.local;
  if (!local || b.shard == 0) return;
  const Tensor& whole = half_ ? b.h : b.f;
  const Tensor own = shard_of(b, whole);
  local->allgather(own.raw(), whole.raw(), static_cast<size_t>(own.numel()) * dtype_size(whole.dtype()),
                   ctx_.backend->device());
}

void HierarchicalScheme::scatter(Bucket& b) {
  Backend& be = *ctx_.backend;
  if (half_) be.cast(b.f, b.h);
  if (b.in_place) return;  // F is the target's gradient, and the only one
  const std::vector<Tensor>& out = ctx_.grads[ctx_.targets[0]];
  for (int i = b.range.begin; i < b.range.end; ++i) {
    const int64_t n = out[i].numel(), part = b.part[i - b.range.begin];
    const Tensor flat = out[i].reshaped(Shape{n});
    for (int k = 0; k < L_; ++k) {
      const int64_t a = std::min(n, k * part), e = std::min(n, a + part);
      if (a == e) continue;
      const int64_t at = k * b.shard + b.offset[i - b.range.begin];
      be.copy(flat.slice0(a, e), b.f.slice0(at, at + (e - a)));
    }
  }
  ctx_.copy_to_other_targets(b.range);
}

// Per rank and step: the scalers' MAX over the world; inside the node the reduce-scatter and the all-gather of
// the padded bucket; between nodes the shard's codes (allgather2 or allreduce8) and its fp32 pieces.
ExchangeStats HierarchicalScheme::byte_model() const {
  const CompressionPolicy& p = ctx_.codec->policy();
  const int ranks = ctx_.comms.world ? ctx_.comms.world->size() : 1;
  ExchangeStats s;
  if (p.num_ternary() > 0 && ctx_.comms.world) {
    s.payload_bytes += 4ull * p.num_ternary();
    s.moved_bytes += Communicator::allreduce_moved_bytes(4ull * p.num_ternary(), ranks);
  }
  const uint64_t esize = half_ ? 2 : 4;
  for (const Bucket& b : buckets_) {
    const uint64_t shard = static_cast<uint64_t>(b.shard) * esize;
    if (L_ > 1) {
      s.payload_bytes += static_cast<uint64_t>(L_) * shard + shard;   // reduce-scatter send, all-gather send
      s.moved_bytes += 2ull * static_cast<uint64_t>(L_ - 1) * shard;  // (L-1) blocks in, each way
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

}  // namespace tg

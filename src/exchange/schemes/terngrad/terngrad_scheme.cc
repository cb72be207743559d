// TernGradScheme: scalers, their MAX, 2-bit codes of every worker, gathered or summed, decoded.
#include "src/exchange/schemes/terngrad/terngrad_scheme.h"

#include "terngrad/core/error.h"

namespace tg {

namespace {
enum Stage { kScalers, kShareScalers, kEncode, kExchange, kDecode };
}

TernGradScheme::TernGradScheme(SchemeContext& ctx)
    : GradientScheme(ctx),
      mode_(resolve_exchange_mode(ctx.options.mode(), ctx.num_workers)),
      coding_(*ctx.policy, ctx.options.seed) {
  TG_CHECK(mode_ == ExchangeMode::kAllgather2 || mode_ == ExchangeMode::kAllreduce8,
           "the terngrad scheme exchanges codes by allgather2 or allreduce8, not --exchange {}", enum_name(mode_));
  if (mode_ == ExchangeMode::kAllreduce8 && ctx.policy->num_ternary() > 0)
    TG_CHECK(ctx.num_workers <= kMaxCodeSumWorkers,
             "--exchange allreduce8 sums int8 codes, exact up to {} workers; {} workers need allgather2",
             kMaxCodeSumWorkers, ctx.num_workers);
  if (ctx.options.error_feedback) feedback_ = std::make_unique<ErrorFeedback>(ctx);
}

std::string TernGradScheme::describe() const {
  const int64_t bucket = ctx_.policy->scaler_bucket();
  return fmt::format("terngrad ({}{}{})", enum_name(mode_), feedback_ ? ", error feedback" : "",
                     bucket > 0 ? fmt::format(", a scaler per {} elements", bucket) : "");
}

const std::vector<SchemeStage>& TernGradScheme::stages() const {
  static const std::vector<SchemeStage> s = {{"scalers", StageKind::kCompute, Phase::kScalers},
                                             {"share scalers", StageKind::kCollective, Phase::kCommInFlight},
                                             {"encode", StageKind::kCompute, Phase::kEncode},
                                             {"exchange codes", StageKind::kCollective, Phase::kCommInFlight},
                                             {"decode", StageKind::kCompute, Phase::kDecode}};
  return s;
}

void TernGradScheme::plan(const std::vector<TensorRange>& ranges) {
  const int L = ctx_.local_workers, N = ctx_.num_workers;
  const int64_t T = ctx_.policy->num_ternary();
  const bool group = ctx_.comms.world != nullptr;
  scalers_ = std::make_unique<SharedScalers>(ctx_, coding_, arena_);
  const size_t at_zeros = arena_.reserve(4 * static_cast<size_t>(T));
  struct Offsets {
    size_t local, gathered, sums;
  };
  std::vector<Offsets> off;
  for (const TensorRange& r : ranges) {
    Bucket b;
    b.range = r;
    b.layout = ctx_.policy->layout(r);
    const size_t pb = static_cast<size_t>(b.layout.packed_bytes());
    Offsets o{};
    o.local = arena_.reserve(static_cast<size_t>(L) * pb);
    o.gathered = mode_ == ExchangeMode::kAllgather2 && group ? arena_.reserve(static_cast<size_t>(N) * pb) : 0;
    o.sums = mode_ == ExchangeMode::kAllreduce8 ? arena_.reserve(4 * pb) : 0;
    off.push_back(o);
    buckets_.push_back(b);
  }
  arena_.allocate(*ctx_.backend);
  scalers_->bind(arena_);
  zero_codes_ = arena_.view(at_zeros, T, DType::kI32);
  if (feedback_)
    for (int w = 0; w < L; ++w) residuals_.push_back(feedback_->residuals(w));
  for (size_t i = 0; i < buckets_.size(); ++i) {
    Bucket& b = buckets_[i];
    const int64_t pb = b.layout.packed_bytes();
    b.local_codes = arena_.view(off[i].local, L * pb, DType::kU8);
    if (mode_ == ExchangeMode::kAllgather2 && group) b.gathered = arena_.view(off[i].gathered, N * pb, DType::kU8);
    if (mode_ == ExchangeMode::kAllreduce8) b.code_sums = arena_.view(off[i].sums, 4 * pb, DType::kI8);
  }
  dense_ = std::make_unique<DensePart>(ctx_, ranges);
}

void TernGradScheme::run_stage(int stage, int bucket) {
  Bucket& b = buckets_[bucket];
  switch (stage) {
    case kScalers:
      scalers(b);
      break;
    case kShareScalers:
      scalers_->share(ctx_.comms.world, b.layout);
      break;
    case kEncode:
      encode(b, bucket);
      break;
    case kExchange:
      exchange(b, bucket);
      break;
    case kDecode:
      decode(b, bucket);
      break;
  }
}

// With weight decay to apply (apply_weight_decay): the ternary tensors' in the scalers' pass (one read of g fewer
// than backward's axpy and then the scalers), the fp32-coded ones' by axpy.
void TernGradScheme::scalers(Bucket& b) {
  scalers_->add_other_weight_decay(b.range, /*pass_runs=*/true);
  if (b.layout.num_scalers() > 0) scalers_->compute(b.range, feedback_ ? &residuals_ : nullptr);
}

void TernGradScheme::encode(Bucket& b, int index) {
  const RangeLayout& l = b.layout;
  Backend& be = *ctx_.backend;
  if (l.packed_bytes() > 0) {
    scalers_->check(b.range, l, step_);
    const int64_t pb = l.packed_bytes();
    for (int w = 0; w < ctx_.local_workers; ++w)
      coding_.encode_ternary(be, ctx_.grads[w], b.range, scalers_->shared(), step_,
                             static_cast<uint32_t>(ctx_.first_worker + w), b.local_codes.slice0(w * pb, (w + 1) * pb),
                             w == 0 ? zero_codes_ : Tensor(), feedback_ ? feedback_->residuals(w) : nullptr);
    if (mode_ == ExchangeMode::kAllreduce8)
      coding_.sum_codes(be, b.local_codes, pb, ctx_.local_workers, b.range, b.code_sums);
  }
  dense_->encode(index);
}

void TernGradScheme::exchange(Bucket& b, int index) {
  Communicator* world = ctx_.comms.world;
  if (!world) return;
  const RangeLayout& l = b.layout;
  const Device dev = ctx_.backend->device();
  if (l.packed_bytes() > 0) {
    if (mode_ == ExchangeMode::kAllgather2)
      world->allgather(b.local_codes.raw(), b.gathered.raw(),
                       static_cast<size_t>(ctx_.local_workers) * l.packed_bytes(), dev);
    else
      world->allreduce(b.code_sums.raw(), 4 * l.packed_bytes(), DType::kI8, ReduceOp::kSum, dev);
  }
  dense_->exchange(world, index);
}

// The coded averages are views of buffers fixed at plan time (the gathered codes or the code sums, the shared
// scalers), so they are described once; every step's exchange refills the buffers they view.
void TernGradScheme::defer_decode() {
  TG_CHECK(ctx_.targets.size() == 1, "the terngrad scheme leaves its average coded for one target worker only, not {}",
           ctx_.targets.size());
  std::vector<CodedAverage> coded(static_cast<size_t>(ctx_.policy->num_tensors()));
  std::vector<TensorRange> ranges;
  for (const Bucket& b : buckets_) {
    ranges.push_back(b.range);
    if (b.layout.packed_bytes() == 0) continue;
    const bool gathered = mode_ == ExchangeMode::kAllgather2;
    coding_.coded_averages(gathered ? (ctx_.comms.world ? b.gathered : b.local_codes) : Tensor(),
                           b.layout.packed_bytes(), gathered ? Tensor() : b.code_sums, ctx_.num_workers, b.range,
                           scalers_->shared(), coded);
  }
  deferred_.start(std::move(coded), std::move(ranges));
}

void TernGradScheme::begin_step(uint32_t step) {
  GradientScheme::begin_step(step);
  deferred_.begin_step();
}

bool TernGradScheme::decode_deferred(int bucket) {
  if (!deferred_.take(bucket)) return false;
  decode_ternary(buckets_[bucket]);
  return true;
}

void TernGradScheme::decode_ternary(Bucket& b) {
  const std::vector<Tensor>& out = ctx_.grads[ctx_.targets[0]];
  if (mode_ == ExchangeMode::kAllgather2)
    coding_.decode_ternary_gathered(*ctx_.backend, ctx_.comms.world ? b.gathered : b.local_codes,
                                    b.layout.packed_bytes(), ctx_.num_workers, b.range, scalers_->shared(), out);
  else
    coding_.decode_ternary_sums(*ctx_.backend, b.code_sums, ctx_.num_workers, b.range, scalers_->shared(), out);
}

void TernGradScheme::decode(Bucket& b, int index) {
  if (b.layout.packed_bytes() > 0 && !deferred_.active()) decode_ternary(b);
  dense_->decode(index);
  ctx_.copy_to_other_targets(b.range);
}

// The byte model of a step, per worker over all N workers (communicator.h), one collective per fused buffer.
ExchangeStats TernGradScheme::byte_model() const {
  const CompressionPolicy& p = *ctx_.policy;
  const int n = ctx_.num_workers;
  ExchangeStats s;
  if (p.num_ternary() > 0) {
    const uint64_t scalers = 4ull * p.num_scalers();
    s.payload_bytes += scalers;
    s.moved_bytes += Communicator::allreduce_moved_bytes(scalers, n);
    if (mode_ == ExchangeMode::kAllgather2) {
      s.payload_bytes += p.packed_bytes();
      s.moved_bytes += Communicator::allgather_moved_bytes(p.packed_bytes(), n);
    } else {
      s.payload_bytes += 4ull * p.packed_bytes();
      s.moved_bytes += Communicator::allreduce_moved_bytes(4ull * p.packed_bytes(), n);
    }
  }
  dense_->add_byte_model(s);
  DensePart::set_fp32_equivalent(ctx_, s);
  return s;
}

std::unique_ptr<GradientScheme> make_terngrad_scheme(SchemeContext& ctx) {
  return std::make_unique<TernGradScheme>(ctx);
}

size_t terngrad_buffer_bytes(const SchemeMemoryQuery& q) {
  const size_t L = static_cast<size_t>(q.local_workers), N = static_cast<size_t>(q.layout.num_workers);
  const ExchangeMode mode = resolve_exchange_mode(q.options.mode(), q.layout.num_workers);
  size_t bytes = q.scaler_bytes() + q.dense_bytes() + L * q.packed_bytes();
  if (mode == ExchangeMode::kAllgather2 && q.group) bytes += N * q.packed_bytes();
  if (mode == ExchangeMode::kAllreduce8) bytes += 4 * q.packed_bytes();
  if (q.options.error_feedback) bytes += 4 * L * static_cast<size_t>(q.ternary_elements());
  return bytes;
}

}  // namespace tg

// DensePart: the fp16/fp32 tensors of a bucket: local sums, all-reduce, average.
#include "src/exchange/dense_part.h"

namespace tg {

DensePart::DensePart(SchemeContext& ctx, const std::vector<TensorRange>& buckets)
    : ctx_(ctx), coding_(*ctx.policy), ranges_(buckets) {
  if (!ctx_.comms.world) return;  // alone: averaged in place, no buffers
  std::vector<size_t> at16, at32;
  for (const TensorRange& r : ranges_) {
    const RangeLayout l = ctx_.policy->layout(r);
    at16.push_back(arena_.reserve(2 * static_cast<size_t>(l.f16_elements())));
    at32.push_back(arena_.reserve(4 * static_cast<size_t>(l.f32_elements())));
  }
  arena_.allocate(*ctx_.backend);
  for (size_t b = 0; b < ranges_.size(); ++b) {
    const RangeLayout l = ctx_.policy->layout(ranges_[b]);
    f16_.push_back(arena_.view(at16[b], l.f16_elements(), DType::kF16));
    f32_.push_back(arena_.view(at32[b], l.f32_elements(), DType::kF32));
  }
}

bool DensePart::empty(int bucket) const {
  const RangeLayout l = ctx_.policy->layout(ranges_[bucket]);
  return l.f16_elements() == 0 && l.f32_elements() == 0;
}

void DensePart::encode(int bucket) {
  if (!ctx_.comms.world) return;
  const RangeLayout l = ctx_.policy->layout(ranges_[bucket]);
  if (l.f16_elements() > 0) coding_.encode_f16(*ctx_.backend, ctx_.workers, ranges_[bucket], f16_[bucket]);
  if (l.f32_elements() > 0) coding_.encode_f32(*ctx_.backend, ctx_.workers, ranges_[bucket], f32_[bucket]);
}

void DensePart::exchange(Communicator* group, int bucket) {
  if (!group) return;
  const Device dev = ctx_.backend->device();
  const Tensor& h = f16_[bucket];
  const Tensor& f = f32_[bucket];
  if (h.numel() > 0) group->allreduce(h.raw(), h.numel(), DType::kF16, ReduceOp::kSum, dev);
  if (f.numel() > 0) group->allreduce(f.raw(), f.numel(), DType::kF32, ReduceOp::kSum, dev);
}

void DensePart::decode(int bucket) {
  const TensorRange r = ranges_[bucket];
  const std::vector<Tensor>& out = ctx_.grads[ctx_.targets[0]];
  if (!ctx_.comms.world) {
    coding_.average_local(*ctx_.backend, ctx_.workers, r, out);
    return;
  }
  const RangeLayout l = ctx_.policy->layout(r);
  if (l.f16_elements() > 0) coding_.decode_f16_sum(*ctx_.backend, f16_[bucket], ctx_.num_workers, r, out);
  if (l.f32_elements() > 0) coding_.decode_f32_sum(*ctx_.backend, f32_[bucket], ctx_.num_workers, r, out);
}

void DensePart::add_byte_model(ExchangeStats& s) const {
  const CompressionPolicy& p = *ctx_.policy;
  const int n = ctx_.num_workers;
  for (uint64_t bytes : {2ull * p.f16_elements(), 4ull * p.f32_elements()}) {
    if (bytes == 0) continue;
    s.payload_bytes += bytes;
    s.moved_bytes += Communicator::allreduce_moved_bytes(bytes, n);
  }
}

void DensePart::set_fp32_equivalent(const SchemeContext& ctx, ExchangeStats& s) {
  s.fp32_payload_bytes = 4ull * ctx.policy->total_elements();
  s.fp32_moved_bytes = Communicator::allreduce_moved_bytes(s.fp32_payload_bytes, ctx.num_workers);
}

}  // namespace tg

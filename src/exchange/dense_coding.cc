// DenseCoding: the fp16/fp32 tensors of a range, encoded, decoded and averaged through the Backend's ops.
#include "src/exchange/dense_coding.h"

#include "src/exchange/exchange_arena.h"
#include "terngrad/core/error.h"

namespace tg {

namespace {
// The workers' gradients of one tensor, in an array on the stack (the Backend's sums take one).
struct WorkerTensors {
  Tensor t[Backend::kMaxCodecInputs];
  int count = 0;
  explicit WorkerTensors(const std::vector<const std::vector<Tensor>*>& workers) {
    TG_CHECK(!workers.empty() && workers.size() <= static_cast<size_t>(Backend::kMaxCodecInputs),
             "gradient exchange: {} workers in one process (1 to {})", workers.size(), Backend::kMaxCodecInputs);
    count = static_cast<int>(workers.size());
  }
  const Tensor* of(const std::vector<const std::vector<Tensor>*>& workers, int i) {
    for (int w = 0; w < count; ++w) t[w] = (*workers[w])[i];
    return t;
  }
};
}  // namespace

void DenseCoding::encode_f16(Backend& be, const std::vector<const std::vector<Tensor>*>& workers, TensorRange r,
                             const Tensor& f16) const {
  const int64_t base = policy_.layout(r).f16_begin;
  WorkerTensors xs(workers);
  for (int i = r.begin; i < r.end; ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding != GradCoding::kF16) continue;
    const int64_t at = t.offset - base;
    be.encode_f16_sum(xs.of(workers, i), xs.count, fused_piece(f16, DType::kF16, at, at + t.numel, "fp16 buffer"));
  }
}

void DenseCoding::encode_f32(Backend& be, const std::vector<const std::vector<Tensor>*>& workers, TensorRange r,
                             const Tensor& f32) const {
  const int64_t base = policy_.layout(r).f32_begin;
  WorkerTensors xs(workers);
  for (int i = r.begin; i < r.end; ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding != GradCoding::kF32) continue;
    const int64_t at = t.offset - base;
    be.encode_f32_sum(xs.of(workers, i), xs.count, fused_piece(f32, DType::kF32, at, at + t.numel, "fp32 buffer"));
  }
}

void DenseCoding::average_local(Backend& be, const std::vector<const std::vector<Tensor>*>& workers, TensorRange r,
                                const std::vector<Tensor>& out) const {
  policy_.check_range(r);
  WorkerTensors xs(workers);
  for (int i = r.begin; i < r.end; ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding == GradCoding::kF16) be.average_f16(xs.of(workers, i), xs.count, out[i]);
    if (t.coding == GradCoding::kF32) be.average_f32(xs.of(workers, i), xs.count, out[i]);
  }
}

void DenseCoding::decode_f16_sum(Backend& be, const Tensor& sum, int num_workers, TensorRange r,
                                 const std::vector<Tensor>& grads) const {
  const int64_t base = policy_.layout(r).f16_begin;
  for (int i = r.begin; i < r.end; ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding != GradCoding::kF16) continue;
    const int64_t at = t.offset - base;
    be.decode_f16_sum(fused_piece(sum, DType::kF16, at, at + t.numel, "fp16 sum"), num_workers, grads[i]);
  }
}

void DenseCoding::decode_f32_sum(Backend& be, const Tensor& sum, int num_workers, TensorRange r,
                                 const std::vector<Tensor>& grads) const {
  const int64_t base = policy_.layout(r).f32_begin;
  for (int i = r.begin; i < r.end; ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding != GradCoding::kF32) continue;
    const int64_t at = t.offset - base;
    be.decode_f32_sum(fused_piece(sum, DType::kF32, at, at + t.numel, "fp32 sum"), num_workers, grads[i]);
  }
}

}  // namespace tg

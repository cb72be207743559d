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

template <class Fn>
void DenseCoding::for_each(TensorRange r, GradCoding coding, const Tensor& buf, const char* what, Fn&& fn) const {
  const RangeLayout l = policy_.layout(r);
  const bool half = coding == GradCoding::kF16;
  const int64_t base = half ? l.f16_begin : l.f32_begin;
  for (int i = r.begin; i < r.end; ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding != coding) continue;
    const int64_t at = t.offset - base;
    fn(i, fused_piece(buf, half ? DType::kF16 : DType::kF32, at, at + t.numel, what));
  }
}

void DenseCoding::encode_f16(Backend& be, const std::vector<const std::vector<Tensor>*>& workers, TensorRange r,
                             const Tensor& f16) const {
  WorkerTensors xs(workers);
  for_each(r, GradCoding::kF16, f16, "fp16 buffer",
           [&](int i, const Tensor& out) { be.encode_f16_sum(xs.of(workers, i), xs.count, out); });
}

void DenseCoding::encode_f32(Backend& be, const std::vector<const std::vector<Tensor>*>& workers, TensorRange r,
                             const Tensor& f32) const {
  WorkerTensors xs(workers);
  for_each(r, GradCoding::kF32, f32, "fp32 buffer",
           [&](int i, const Tensor& out) { be.encode_f32_sum(xs.of(workers, i), xs.count, out); });
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
  for_each(r, GradCoding::kF16, sum, "fp16 sum",
           [&](int i, const Tensor& in) { be.decode_f16_sum(in, num_workers, grads[i]); });
}

void DenseCoding::decode_f32_sum(Backend& be, const Tensor& sum, int num_workers, TensorRange r,
                                 const std::vector<Tensor>& grads) const {
  for_each(r, GradCoding::kF32, sum, "fp32 sum",
           [&](int i, const Tensor& in) { be.decode_f32_sum(in, num_workers, grads[i]); });
}

}  // namespace tg

// TernaryCoding: scalers, codes, code sums and decodes of a range's ternary tensors through the Backend's ops.
#include "src/exchange/schemes/terngrad/ternary_coding.h"

#include <cmath>

#include "src/exchange/exchange_arena.h"
#include "terngrad/core/error.h"
#include "terngrad/core/philox.h"
#include "terngrad/math/ternary_math.h"

namespace tg {

namespace {
// The scalers of ternary tensor t in a scaler vector.
Tensor tensor_scalers(const Tensor& scalers, const TensorCodingPlan& t) {
  return fused_piece(scalers, DType::kF32, t.scaler_index, t.scaler_index + t.num_scalers, "scalers");
}
}  // namespace

void TernaryCoding::check_scalers(const float* scalers, TensorRange r, uint32_t step) const {
  policy_.check_range(r);
  for (int i = r.begin; i < r.end; ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding != GradCoding::kTernary) continue;
    for (int k = 0; k < t.num_scalers; ++k) {
      const float s = scalers[t.scaler_index + k];
      if (!std::isfinite(s))
        TG_THROW(
            "non-finite gradient scaler {} for tensor '{}' at step {} (its gradient holds NaN or Inf on at "
            "least one worker)",
            s, t.name, step);
    }
  }
}

void TernaryCoding::local_scalers(Backend& be, const std::vector<Tensor>& grads, TensorRange r, const Tensor& scalers,
                                  const std::vector<Tensor>* residuals, const WeightDecayTerms* decay) const {
  policy_.check_range(r);
  const float c = policy_.flags().clip_factor;
  const size_t T = static_cast<size_t>(policy_.num_tensors());
  TG_CHECK(!decay || (decay->params.size() == T && decay->coefficients.size() == T),
           "ternary coding: weight decay for {} / {} tensors, the policy has {}", decay ? decay->params.size() : 0,
           decay ? decay->coefficients.size() : 0, T);
  // The range's tensors in tables of Backend::kScalerTable (2 or 3 launches each on a GPU).
  TernaryScalerItem items[Backend::kScalerTable];
  int count = 0;
  for (int i = r.begin; i < r.end; ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding != GradCoding::kTernary) continue;
    const bool decayed = decay && decay->coefficients[i] != 0.f;
    items[count++] = {grads[i],
                      tensor_scalers(scalers, t),
                      residuals ? (*residuals)[i] : Tensor(),
                      decayed ? decay->params[i] : Tensor(),
                      decayed ? decay->coefficients[i] : 0.f,
                      policy_.scaler_bucket()};
    if (count == Backend::kScalerTable) be.ternary_scaler_many(items, count, c), count = 0;
  }
  be.ternary_scaler_many(items, count, c);
}

void TernaryCoding::max_local_scalers(Backend& be, const std::vector<Tensor>& worker_scalers, TensorRange r,
                                      const Tensor& shared) const {
  const RangeLayout l = policy_.layout(r);
  TG_CHECK(!worker_scalers.empty() && worker_scalers.size() <= static_cast<size_t>(Backend::kMaxCodecInputs),
           "ternary coding: {} workers in one process (1 to {})", worker_scalers.size(), Backend::kMaxCodecInputs);
  Tensor xs[Backend::kMaxCodecInputs];
  const int count = static_cast<int>(worker_scalers.size());
  for (int w = 0; w < count; ++w)
    xs[w] = fused_piece(worker_scalers[w], DType::kF32, l.scaler_begin, l.scaler_end, "worker scalers");
  be.max_scalers(xs, count, fused_piece(shared, DType::kF32, l.scaler_begin, l.scaler_end, "shared scalers"));
}

void TernaryCoding::encode_ternary(Backend& be, const std::vector<Tensor>& grads, TensorRange r, const Tensor& scalers,
                                   uint32_t step, uint32_t worker, const Tensor& packed, const Tensor& zero_codes,
                                   const std::vector<Tensor>* residuals) const {
  const int64_t base = policy_.layout(r).packed_begin;
  const PhiloxKey key = philox_key(seed_, worker);
  // The range's tensors in tables of Backend::kEncodeTable (one launch each on a GPU).
  TernaryEncodeItem items[Backend::kEncodeTable];
  int count = 0;
  for (int i = r.begin; i < r.end; ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding != GradCoding::kTernary) continue;
    const int64_t at = t.offset - base;
    const int z = t.ternary_index;
    items[count++] = {grads[i],
                      tensor_scalers(scalers, t),
                      static_cast<uint32_t>(i),
                      fused_piece(packed, DType::kU8, at, at + ternary_packed_bytes(t.numel), "packed codes"),
                      zero_codes ? fused_piece(zero_codes, DType::kI32, z, z + 1, "zero codes") : Tensor(),
                      residuals ? (*residuals)[i] : Tensor(),
                      policy_.scaler_bucket()};
    if (count == Backend::kEncodeTable) be.ternary_encode_many(items, count, key, step), count = 0;
  }
  be.ternary_encode_many(items, count, key, step);
}

void TernaryCoding::sum_codes(Backend& be, const Tensor& packed, int64_t stride, int num_workers, TensorRange r,
                              const Tensor& code_sums) const {
  // Every byte of the range (the unused fields of a tensor's last byte are 00: code 0).
  const int64_t bytes = policy_.layout(r).packed_bytes();
  be.ternary_sum_codes(packed, stride, num_workers, fused_piece(code_sums, DType::kI8, 0, 4 * bytes, "code sums"));
}

void TernaryCoding::decode_ternary_gathered(Backend& be, const Tensor& gathered, int64_t stride, int num_workers,
                                            TensorRange r, const Tensor& scalers,
                                            const std::vector<Tensor>& grads) const {
  TG_CHECK(num_workers >= 1, "ternary coding: {} workers", num_workers);
  const int64_t base = policy_.layout(r).packed_begin;
  for (int i = r.begin; i < r.end; ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding != GradCoding::kTernary) continue;
    be.ternary_decode_gathered(fused_piece(gathered, DType::kU8, t.offset - base, gathered.numel(), "gathered codes"),
                               stride, num_workers, tensor_scalers(scalers, t), grads[i], policy_.scaler_bucket());
  }
}

void TernaryCoding::decode_ternary_sums(Backend& be, const Tensor& code_sums, int num_workers, TensorRange r,
                                        const Tensor& scalers, const std::vector<Tensor>& grads) const {
  TG_CHECK(num_workers >= 1, "ternary coding: {} workers", num_workers);
  const int64_t base = policy_.layout(r).packed_begin;
  for (int i = r.begin; i < r.end; ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding != GradCoding::kTernary) continue;
    const int64_t at = 4 * (t.offset - base);
    be.ternary_decode_sums(fused_piece(code_sums, DType::kI8, at, at + t.numel, "code sums"),
                           tensor_scalers(scalers, t), num_workers, grads[i], policy_.scaler_bucket());
  }
}

void TernaryCoding::coded_averages(const Tensor& gathered, int64_t stride, const Tensor& code_sums, int num_workers,
                                   TensorRange r, const Tensor& scalers, std::vector<CodedAverage>& out) const {
  TG_CHECK(num_workers >= 1, "ternary coding: {} workers", num_workers);
  TG_CHECK(gathered.defined() != code_sums.defined(),
           "ternary coding: coded averages of gathered codes or of code sums");
  TG_CHECK(static_cast<int>(out.size()) == policy_.num_tensors(), "ternary coding: {} coded averages for {} tensors",
           out.size(), policy_.num_tensors());
  const int64_t base = policy_.layout(r).packed_begin;
  for (int i = r.begin; i < r.end; ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding != GradCoding::kTernary) continue;
    CodedAverage c;
    if (gathered.defined()) {
      c.gathered = fused_piece(gathered, DType::kU8, t.offset - base, gathered.numel(), "gathered codes");
      c.stride = stride;
    } else {
      const int64_t at = 4 * (t.offset - base);
      c.code_sums = fused_piece(code_sums, DType::kI8, at, at + t.numel, "code sums");
    }
    c.scaler = tensor_scalers(scalers, t);
    c.bucket = policy_.scaler_bucket();
    c.num_workers = num_workers;
    out[i] = c;
  }
}

}  // namespace tg

// GradientCodec: scalers, encode and decode of any range of tensors over the policy's fused layout.
#include "terngrad/compress/gradient_codec.h"

#include <cmath>

#include "terngrad/backend/ternary_codec.h"
#include "terngrad/core/error.h"
#include "terngrad/core/philox.h"
#include "terngrad/math/ternary_math.h"

namespace tg {

GradientCodec::GradientCodec(CompressionPolicy policy, uint64_t seed) : policy_(std::move(policy)), seed_(seed) {}

void GradientCodec::check_range(TensorRange r) const {
  TG_CHECK(0 <= r.begin && r.begin <= r.end && r.end <= policy_.num_tensors(),
           "gradient codec: tensor range [{}, {}) outside the policy's {} tensors", r.begin, r.end,
           policy_.num_tensors());
}

RangeLayout GradientCodec::layout(TensorRange r) const {
  check_range(r);
  // Each coding's tensors are laid out back to back in policy order, so a range of tensors occupies one
  // contiguous piece of each fused buffer: it starts where the first tensor of that coding at or after
  // r.begin starts (or where the buffer's part after r.begin would start).
  RangeLayout l;
  l.packed_begin = l.packed_end = policy_.packed_bytes();
  l.f16_begin = l.f16_end = policy_.f16_elements();
  l.f32_begin = l.f32_end = policy_.f32_elements();
  l.scaler_begin = l.scaler_end = policy_.num_scalers();
  l.ternary_begin = l.ternary_end = policy_.num_ternary();
  int64_t packed = 0, f16 = 0, f32 = 0;
  int scaler = 0, ternary = 0;
  for (int i = 0; i <= policy_.num_tensors(); ++i) {
    if (i == r.begin) {
      l.packed_begin = packed, l.f16_begin = f16, l.f32_begin = f32, l.scaler_begin = scaler;
      l.ternary_begin = ternary;
    }
    if (i == r.end) {
      l.packed_end = packed, l.f16_end = f16, l.f32_end = f32, l.scaler_end = scaler, l.ternary_end = ternary;
      break;
    }
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (i >= r.begin) l.elements += t.numel;
    switch (t.coding) {
      case GradCoding::kTernary:
        packed += ternary_packed_bytes(t.numel);
        scaler += t.num_scalers;
        ++ternary;
        break;
      case GradCoding::kF16:
        f16 += t.numel;
        break;
      case GradCoding::kF32:
        f32 += t.numel;
        break;
    }
  }
  return l;
}

void GradientCodec::check_grads(const std::vector<Tensor>& grads) const { check_grads(grads, Device::cpu()); }

void GradientCodec::check_grads(const std::vector<Tensor>& grads, Device device) const {
  TG_CHECK(static_cast<int>(grads.size()) == policy_.num_tensors(),
           "gradient codec: got {} gradient tensors, the policy has {}", grads.size(), policy_.num_tensors());
  for (size_t i = 0; i < grads.size(); ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    const Tensor& g = grads[i];
    TG_CHECK(g.dtype() == DType::kF32, "gradient codec: gradient of '{}' is {}, expected f32", t.name,
             dtype_name(g.dtype()));
    TG_CHECK(g.numel() == t.numel, "gradient codec: gradient of '{}' has {} elements, the policy expects {}", t.name,
             g.numel(), t.numel);
    TG_CHECK(g.device() == device, "gradient codec: gradient of '{}' is on {}; the codec runs on {}", t.name,
             g.device().str(), device.str());
    TG_CHECK(t.numel == 0 || g.raw() != nullptr, "gradient codec: gradient of '{}' has no data", t.name);
  }
}

void GradientCodec::local_scalers(const std::vector<Tensor>& grads, TensorRange r, float* scalers) const {
  check_range(r);
  for (int i = r.begin; i < r.end; ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding == GradCoding::kTernary)  // g is only read: nothing to add
      ternary_bucket_scalers_cpu(const_cast<float*>(grads[i].data<float>()), nullptr, 0.f, nullptr, t.numel,
                                 policy_.flags().clip_factor, policy_.scaler_bucket(), scalers + t.scaler_index);
  }
}

void GradientCodec::check_scalers(const float* scalers, TensorRange r, uint32_t step) const {
  check_range(r);
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

void GradientCodec::encode_ternary(const std::vector<Tensor>& grads, TensorRange r, const float* scalers, uint32_t step,
                                   uint32_t worker, uint8_t* packed, int64_t* zero_codes) const {
  check_scalers(scalers, r, step);
  const int64_t base = layout(r).packed_begin;
  const PhiloxKey key = philox_key(seed_, worker);
  for (int i = r.begin; i < r.end; ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding != GradCoding::kTernary) continue;
    const int64_t zeros =
        ternary_encode_buckets_cpu(grads[i].data<float>(), t.numel, scalers + t.scaler_index, policy_.scaler_bucket(),
                                   key, step, static_cast<uint32_t>(i), packed + (t.offset - base));
    if (zero_codes) zero_codes[t.ternary_index] = zeros;
  }
}

// The workers' gradients of tensor i as a pointer array (the loops of ternary_codec.h take one).
namespace {
struct WorkerPointers {
  const float* p[Backend::kMaxCodecInputs];
  int count = 0;
  WorkerPointers(const std::vector<const std::vector<Tensor>*>& workers, int i) {
    TG_CHECK(!workers.empty() && workers.size() <= static_cast<size_t>(Backend::kMaxCodecInputs),
             "gradient codec: {} workers in one process (1 to {})", workers.size(), Backend::kMaxCodecInputs);
    count = static_cast<int>(workers.size());
    for (int w = 0; w < count; ++w) p[w] = (*workers[w])[i].data<float>();
  }
};
}  // namespace

void GradientCodec::encode_f16(const std::vector<const std::vector<Tensor>*>& workers, TensorRange r,
                               half_bits* f16) const {
  const int64_t base = layout(r).f16_begin;
  for (int i = r.begin; i < r.end; ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding != GradCoding::kF16) continue;
    const WorkerPointers xs(workers, i);
    encode_f16_sum_cpu(xs.p, xs.count, t.numel, f16 + (t.offset - base));
  }
}

void GradientCodec::encode_f32(const std::vector<const std::vector<Tensor>*>& workers, TensorRange r,
                               float* f32) const {
  const int64_t base = layout(r).f32_begin;
  for (int i = r.begin; i < r.end; ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding != GradCoding::kF32) continue;
    const WorkerPointers xs(workers, i);
    encode_f32_sum_cpu(xs.p, xs.count, t.numel, f32 + (t.offset - base));
  }
}

void GradientCodec::average_local(const std::vector<const std::vector<Tensor>*>& workers, TensorRange r,
                                  const std::vector<Tensor>& out) const {
  check_range(r);
  for (int i = r.begin; i < r.end; ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding == GradCoding::kTernary) continue;
    const WorkerPointers xs(workers, i);
    if (t.coding == GradCoding::kF16)
      average_f16_cpu(xs.p, xs.count, t.numel, out[i].data<float>());
    else
      average_f32_cpu(xs.p, xs.count, t.numel, out[i].data<float>());
  }
}

void GradientCodec::sum_codes(const uint8_t* packed, int64_t stride, int num_workers, TensorRange r,
                              int8_t* code_sums) const {
  // Every byte of the range (the unused fields of a tensor's last byte are 00: code 0).
  ternary_sum_codes_cpu(packed, stride, num_workers, 4 * layout(r).packed_bytes(), code_sums);
}

void GradientCodec::decode_ternary_gathered(const uint8_t* gathered, int64_t stride, int num_workers, TensorRange r,
                                            const float* scalers, const std::vector<Tensor>& grads) const {
  TG_CHECK(num_workers >= 1, "gradient codec: {} workers", num_workers);
  const int64_t base = layout(r).packed_begin;
  for (int i = r.begin; i < r.end; ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding == GradCoding::kTernary)
      ternary_decode_gathered_buckets_cpu(gathered + (t.offset - base), stride, num_workers, t.numel,
                                          scalers + t.scaler_index, policy_.scaler_bucket(), grads[i].data<float>());
  }
}

void GradientCodec::decode_ternary_sums(const int8_t* code_sums, int num_workers, TensorRange r, const float* scalers,
                                        const std::vector<Tensor>& grads) const {
  TG_CHECK(num_workers >= 1, "gradient codec: {} workers", num_workers);
  const int64_t base = layout(r).packed_begin;
  for (int i = r.begin; i < r.end; ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding == GradCoding::kTernary)
      ternary_decode_sums_buckets_cpu(code_sums + 4 * (t.offset - base), t.numel, scalers + t.scaler_index,
                                      policy_.scaler_bucket(), num_workers, grads[i].data<float>());
  }
}

void GradientCodec::decode_f16_sum(const half_bits* sum, int num_workers, TensorRange r,
                                   const std::vector<Tensor>& grads) const {
  TG_CHECK(num_workers >= 1, "gradient codec: {} workers", num_workers);
  const int64_t base = layout(r).f16_begin;
  for (int i = r.begin; i < r.end; ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding == GradCoding::kF16)
      decode_f16_sum_cpu(sum + (t.offset - base), t.numel, num_workers, grads[i].data<float>());
  }
}

void GradientCodec::decode_f32_sum(const float* sum, int num_workers, TensorRange r,
                                   const std::vector<Tensor>& grads) const {
  TG_CHECK(num_workers >= 1, "gradient codec: {} workers", num_workers);
  const int64_t base = layout(r).f32_begin;
  for (int i = r.begin; i < r.end; ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding == GradCoding::kF32)
      decode_f32_sum_cpu(sum + (t.offset - base), t.numel, num_workers, grads[i].data<float>());
  }
}

// ---- device form ------------------------------------------------------------------------------------------
namespace {
// Elements [begin, end) of a fused buffer (any shape, seen flat) as a rank-1 view; `what` names it in errors.
Tensor piece(const Tensor& buf, DType dtype, int64_t begin, int64_t end, const char* what) {
  TG_CHECK(buf.dtype() == dtype, "gradient codec: {} {} is not {}", what, buf.str(), dtype_name(dtype));
  TG_CHECK(0 <= begin && begin <= end && end <= buf.numel(),
           "gradient codec: {} {} has {} elements, the range needs [{}, {})", what, buf.str(), buf.numel(), begin, end);
  return Tensor(static_cast<char*>(buf.raw()) + begin * static_cast<int64_t>(dtype_size(dtype)), Shape{end - begin},
                dtype, buf.device());
}

// The scalers of ternary tensor t in a scaler vector.
Tensor tensor_scalers(const Tensor& scalers, const TensorCodingPlan& t) {
  return piece(scalers, DType::kF32, t.scaler_index, t.scaler_index + t.num_scalers, "scalers");
}

// The workers' gradients of one tensor, in an array on the stack (the Backend's sums take one).
struct WorkerTensors {
  Tensor t[Backend::kMaxCodecInputs];
  int count = 0;
  explicit WorkerTensors(const std::vector<const std::vector<Tensor>*>& workers) {
    TG_CHECK(!workers.empty() && workers.size() <= static_cast<size_t>(Backend::kMaxCodecInputs),
             "gradient codec: {} workers in one process (1 to {})", workers.size(), Backend::kMaxCodecInputs);
    count = static_cast<int>(workers.size());
  }
  const Tensor* of(const std::vector<const std::vector<Tensor>*>& workers, int i) {
    for (int w = 0; w < count; ++w) t[w] = (*workers[w])[i];
    return t;
  }
};
}  // namespace

void GradientCodec::local_scalers(Backend& be, const std::vector<Tensor>& grads, TensorRange r, const Tensor& scalers,
                                  const std::vector<Tensor>* residuals, const WeightDecayTerms* decay) const {
  check_range(r);
  const float c = policy_.flags().clip_factor;
  const size_t T = static_cast<size_t>(policy_.num_tensors());
  TG_CHECK(!decay || (decay->params.size() == T && decay->coefficients.size() == T),
           "gradient codec: weight decay for {} / {} tensors, the policy has {}", decay ? decay->params.size() : 0,
           decay ? decay->coefficients.size() : 0, T);
  for (int i = r.begin; i < r.end; ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding != GradCoding::kTernary) continue;
    const bool decayed = decay && decay->coefficients[i] != 0.f;
    be.ternary_scaler(grads[i], c, tensor_scalers(scalers, t), residuals ? (*residuals)[i] : Tensor(),
                      decayed ? decay->params[i] : Tensor(), decayed ? decay->coefficients[i] : 0.f,
                      policy_.scaler_bucket());
  }
}

void GradientCodec::max_local_scalers(Backend& be, const std::vector<Tensor>& worker_scalers, TensorRange r,
                                      const Tensor& shared) const {
  const RangeLayout l = layout(r);
  TG_CHECK(!worker_scalers.empty() && worker_scalers.size() <= static_cast<size_t>(Backend::kMaxCodecInputs),
           "gradient codec: {} workers in one process (1 to {})", worker_scalers.size(), Backend::kMaxCodecInputs);
  Tensor xs[Backend::kMaxCodecInputs];
  const int count = static_cast<int>(worker_scalers.size());
  for (int w = 0; w < count; ++w)
    xs[w] = piece(worker_scalers[w], DType::kF32, l.scaler_begin, l.scaler_end, "worker scalers");
  be.max_scalers(xs, count, piece(shared, DType::kF32, l.scaler_begin, l.scaler_end, "shared scalers"));
}

void GradientCodec::encode_ternary(Backend& be, const std::vector<Tensor>& grads, TensorRange r, const Tensor& scalers,
                                   uint32_t step, uint32_t worker, const Tensor& packed, const Tensor& zero_codes,
                                   const std::vector<Tensor>* residuals) const {
  const int64_t base = layout(r).packed_begin;
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
                      piece(packed, DType::kU8, at, at + ternary_packed_bytes(t.numel), "packed codes"),
                      zero_codes ? piece(zero_codes, DType::kI32, z, z + 1, "zero codes") : Tensor(),
                      residuals ? (*residuals)[i] : Tensor(),
                      policy_.scaler_bucket()};
    if (count == Backend::kEncodeTable) be.ternary_encode_many(items, count, key, step), count = 0;
  }
  be.ternary_encode_many(items, count, key, step);
}

void GradientCodec::encode_f16(Backend& be, const std::vector<const std::vector<Tensor>*>& workers, TensorRange r,
                               const Tensor& f16) const {
  const int64_t base = layout(r).f16_begin;
  WorkerTensors xs(workers);
  for (int i = r.begin; i < r.end; ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding != GradCoding::kF16) continue;
    const int64_t at = t.offset - base;
    be.encode_f16_sum(xs.of(workers, i), xs.count, piece(f16, DType::kF16, at, at + t.numel, "fp16 buffer"));
  }
}

void GradientCodec::encode_f32(Backend& be, const std::vector<const std::vector<Tensor>*>& workers, TensorRange r,
                               const Tensor& f32) const {
  const int64_t base = layout(r).f32_begin;
  WorkerTensors xs(workers);
  for (int i = r.begin; i < r.end; ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding != GradCoding::kF32) continue;
    const int64_t at = t.offset - base;
    be.encode_f32_sum(xs.of(workers, i), xs.count, piece(f32, DType::kF32, at, at + t.numel, "fp32 buffer"));
  }
}

void GradientCodec::average_local(Backend& be, const std::vector<const std::vector<Tensor>*>& workers, TensorRange r,
                                  const std::vector<Tensor>& out) const {
  check_range(r);
  WorkerTensors xs(workers);
  for (int i = r.begin; i < r.end; ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding == GradCoding::kF16) be.average_f16(xs.of(workers, i), xs.count, out[i]);
    if (t.coding == GradCoding::kF32) be.average_f32(xs.of(workers, i), xs.count, out[i]);
  }
}

void GradientCodec::sum_codes(Backend& be, const Tensor& packed, int64_t stride, int num_workers, TensorRange r,
                              const Tensor& code_sums) const {
  // Every byte of the range (the unused fields of a tensor's last byte are 00: code 0).
  const int64_t bytes = layout(r).packed_bytes();
  be.ternary_sum_codes(packed, stride, num_workers, piece(code_sums, DType::kI8, 0, 4 * bytes, "code sums"));
}

void GradientCodec::decode_ternary_gathered(Backend& be, const Tensor& gathered, int64_t stride, int num_workers,
                                            TensorRange r, const Tensor& scalers,
                                            const std::vector<Tensor>& grads) const {
  TG_CHECK(num_workers >= 1, "gradient codec: {} workers", num_workers);
  const int64_t base = layout(r).packed_begin;
  for (int i = r.begin; i < r.end; ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding != GradCoding::kTernary) continue;
    be.ternary_decode_gathered(piece(gathered, DType::kU8, t.offset - base, gathered.numel(), "gathered codes"), stride,
                               num_workers, tensor_scalers(scalers, t), grads[i], policy_.scaler_bucket());
  }
}

void GradientCodec::coded_averages(const Tensor& gathered, int64_t stride, const Tensor& code_sums, int num_workers,
                                   TensorRange r, const Tensor& scalers, std::vector<CodedAverage>& out) const {
  TG_CHECK(num_workers >= 1, "gradient codec: {} workers", num_workers);
  TG_CHECK(gathered.defined() != code_sums.defined(),
           "gradient codec: coded averages of gathered codes or of code sums");
  TG_CHECK(static_cast<int>(out.size()) == policy_.num_tensors(), "gradient codec: {} coded averages for {} tensors",
           out.size(), policy_.num_tensors());
  const int64_t base = layout(r).packed_begin;
  for (int i = r.begin; i < r.end; ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding != GradCoding::kTernary) continue;
    CodedAverage c;
    if (gathered.defined()) {
      c.gathered = piece(gathered, DType::kU8, t.offset - base, gathered.numel(), "gathered codes");
      c.stride = stride;
    } else {
      const int64_t at = 4 * (t.offset - base);
      c.code_sums = piece(code_sums, DType::kI8, at, at + t.numel, "code sums");
    }
    c.scaler = tensor_scalers(scalers, t);
    c.bucket = policy_.scaler_bucket();
    c.num_workers = num_workers;
    out[i] = c;
  }
}

void GradientCodec::decode_ternary_sums(Backend& be, const Tensor& code_sums, int num_workers, TensorRange r,
                                        const Tensor& scalers, const std::vector<Tensor>& grads) const {
  TG_CHECK(num_workers >= 1, "gradient codec: {} workers", num_workers);
  const int64_t base = layout(r).packed_begin;
  for (int i = r.begin; i < r.end; ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding != GradCoding::kTernary) continue;
    const int64_t at = 4 * (t.offset - base);
    be.ternary_decode_sums(piece(code_sums, DType::kI8, at, at + t.numel, "code sums"), tensor_scalers(scalers, t),
                           num_workers, grads[i], policy_.scaler_bucket());
  }
}

void GradientCodec::decode_f16_sum(Backend& be, const Tensor& sum, int num_workers, TensorRange r,
                                   const std::vector<Tensor>& grads) const {
  const int64_t base = layout(r).f16_begin;
  for (int i = r.begin; i < r.end; ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding != GradCoding::kF16) continue;
    const int64_t at = t.offset - base;
    be.decode_f16_sum(piece(sum, DType::kF16, at, at + t.numel, "fp16 sum"), num_workers, grads[i]);
  }
}

void GradientCodec::decode_f32_sum(Backend& be, const Tensor& sum, int num_workers, TensorRange r,
                                   const std::vector<Tensor>& grads) const {
  const int64_t base = layout(r).f32_begin;
  for (int i = r.begin; i < r.end; ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding != GradCoding::kF32) continue;
    const int64_t at = t.offset - base;
    be.decode_f32_sum(piece(sum, DType::kF32, at, at + t.numel, "fp32 sum"), num_workers, grads[i]);
  }
}

// ---- whole-gradient forms ---------------------------------------------------------------------------------
void GradientCodec::allocate(EncodedGradient& e) const {
  e.scalers.assign(policy_.num_scalers(), 0.f);
  e.packed.assign(policy_.packed_bytes(), 0);
  e.f16.assign(policy_.f16_elements(), half_bits{0});
  e.f32.assign(policy_.f32_elements(), 0.f);
  e.zero_codes.assign(policy_.num_ternary(), 0);
}

std::vector<float> GradientCodec::local_scalers(const std::vector<Tensor>& grads) const {
  check_grads(grads);
  std::vector<float> s(policy_.num_scalers(), 0.f);
  local_scalers(grads, all(), s.data());
  return s;
}

void GradientCodec::encode(const std::vector<Tensor>& grads, const std::vector<float>& shared_scalers, uint32_t step,
                           uint32_t worker, EncodedGradient& out) const {
  check_grads(grads);
  TG_CHECK(static_cast<int>(shared_scalers.size()) == policy_.num_scalers(),
           "gradient codec: got {} scalers, the policy has {} ({} ternary tensors)", shared_scalers.size(),
           policy_.num_scalers(), policy_.num_ternary());
  allocate(out);
  out.scalers = shared_scalers;
  encode_ternary(grads, all(), shared_scalers.data(), step, worker, out.packed.data(), out.zero_codes.data());
  const std::vector<const std::vector<Tensor>*> one = {&grads};
  encode_f16(one, all(), out.f16.data());
  encode_f32(one, all(), out.f32.data());
}

}  // namespace tg

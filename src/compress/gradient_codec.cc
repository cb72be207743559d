// GradientCodec: scalers, encode and decode of any range of tensors over the policy's fused layout.
#include "terngrad/compress/gradient_codec.h"

#include <algorithm>
#include <cmath>

#include "terngrad/compress/ternary_codec.h"
#include "terngrad/core/error.h"
#include "terngrad/core/half_convert.h"
#include "terngrad/core/parallel.h"
#include "terngrad/core/philox.h"
#include "terngrad/math/ternary_math.h"

namespace tg {

namespace {
constexpr int64_t kGrain = 32768;  // elements below which a loop stays on one thread
}  // namespace

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
  l.scaler_begin = l.scaler_end = policy_.num_ternary();
  int64_t packed = 0, f16 = 0, f32 = 0;
  int scaler = 0;
  for (int i = 0; i <= policy_.num_tensors(); ++i) {
    if (i == r.begin) l.packed_begin = packed, l.f16_begin = f16, l.f32_begin = f32, l.scaler_begin = scaler;
    if (i == r.end) {
      l.packed_end = packed, l.f16_end = f16, l.f32_end = f32, l.scaler_end = scaler;
      break;
    }
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (i >= r.begin) l.elements += t.numel;
    switch (t.coding) {
      case GradCoding::Ternary:
        packed += (t.numel + 3) / 4;
        ++scaler;
        break;
      case GradCoding::F16:
        f16 += t.numel;
        break;
      case GradCoding::F32:
        f32 += t.numel;
        break;
    }
  }
  return l;
}

void GradientCodec::check_grads(const std::vector<Tensor>& grads) const {
  TG_CHECK(static_cast<int>(grads.size()) == policy_.num_tensors(),
           "gradient codec: got {} gradient tensors, the policy has {}", grads.size(), policy_.num_tensors());
  for (size_t i = 0; i < grads.size(); ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    const Tensor& g = grads[i];
    TG_CHECK(g.dtype() == DType::F32, "gradient codec: gradient of '{}' is {}, expected f32", t.name,
             dtype_name(g.dtype()));
    TG_CHECK(g.numel() == t.numel, "gradient codec: gradient of '{}' has {} elements, the policy expects {}", t.name,
             g.numel(), t.numel);
    TG_CHECK(g.device().is_cpu(), "gradient codec: gradient of '{}' is on {}; the codec runs on host tensors",
             t.name, g.device().str());
    TG_CHECK(t.numel == 0 || g.raw() != nullptr, "gradient codec: gradient of '{}' has no data", t.name);
  }
}

void GradientCodec::local_scalers(const std::vector<Tensor>& grads, TensorRange r, float* scalers) const {
  check_range(r);
  for (int i = r.begin; i < r.end; ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding == GradCoding::Ternary)
      scalers[t.scaler_index] = ternary_scaler_cpu(grads[i].data<float>(), t.numel, policy_.flags().clip_factor);
  }
}

void GradientCodec::check_scalers(const float* scalers, TensorRange r, uint32_t step) const {
  check_range(r);
  for (int i = r.begin; i < r.end; ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding != GradCoding::Ternary) continue;
    const float s = scalers[t.scaler_index];
    if (!std::isfinite(s))
      TG_THROW(
          "non-finite gradient scaler {} for tensor '{}' at step {} (its gradient holds NaN or Inf on at "
          "least one worker)",
          s, t.name, step);
  }
}

void GradientCodec::encode_ternary(const std::vector<Tensor>& grads, TensorRange r, const float* scalers,
                                   uint32_t step, uint32_t worker, uint8_t* packed, int64_t* zero_codes) const {
  check_scalers(scalers, r, step);
  const int64_t base = layout(r).packed_begin;
  const PhiloxKey key = philox_key(seed_, worker);
  for (int i = r.begin; i < r.end; ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding != GradCoding::Ternary) continue;
    const int64_t zeros = ternary_encode_cpu(grads[i].data<float>(), t.numel, scalers[t.scaler_index], key, step,
                                             static_cast<uint32_t>(i), packed + (t.offset - base));
    if (zero_codes) zero_codes[t.scaler_index] = zeros;
  }
}

// fp16 of a sum of workers' fp16 payloads: chunks of kChunk elements accumulated in fp32 on the stack.
namespace {
constexpr int64_t kChunk = 2048;
void sum_rounded_to_half(const std::vector<const std::vector<Tensor>*>& workers, int tensor, int64_t k, int64_t m,
                         float* acc) {
  std::fill(acc, acc + m, 0.f);
  for (const std::vector<Tensor>* w : workers) add_rounded_to_half((*w)[tensor].data<float>() + k, acc, m);
}
}  // namespace

void GradientCodec::encode_f16(const std::vector<const std::vector<Tensor>*>& workers, TensorRange r,
                               half_bits* f16) const {
  const int64_t base = layout(r).f16_begin;
  for (int i = r.begin; i < r.end; ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding != GradCoding::F16) continue;
    half_bits* out = f16 + (t.offset - base);
    // Each worker sends fp16; the sum is formed in fp32 and rounded once.
    parallel_for(t.numel, kGrain, [&](int64_t b, int64_t e) {
      float acc[kChunk];
      for (int64_t k = b; k < e; k += kChunk) {
        const int64_t m = std::min(kChunk, e - k);
        sum_rounded_to_half(workers, i, k, m, acc);
        floats_to_halves(acc, out + k, m);
      }
    });
  }
}

void GradientCodec::encode_f32(const std::vector<const std::vector<Tensor>*>& workers, TensorRange r,
                               float* f32) const {
  const int64_t base = layout(r).f32_begin;
  for (int i = r.begin; i < r.end; ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding != GradCoding::F32) continue;
    float* out = f32 + (t.offset - base);
    parallel_for(t.numel, kGrain, [&](int64_t b, int64_t e) {
      const float* first = (*workers[0])[i].data<float>();
      for (int64_t k = b; k < e; ++k) out[k] = first[k];
      for (size_t w = 1; w < workers.size(); ++w) {  // worker order, as a reduction in rank order
        const float* g = (*workers[w])[i].data<float>();
        for (int64_t k = b; k < e; ++k) out[k] += g[k];
      }
    });
  }
}

void GradientCodec::average_local(const std::vector<const std::vector<Tensor>*>& workers, TensorRange r,
                                  const std::vector<Tensor>& out) const {
  check_range(r);
  const int n = static_cast<int>(workers.size());
  const float nf = static_cast<float>(n);
  for (int i = r.begin; i < r.end; ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding == GradCoding::Ternary || (t.coding == GradCoding::F32 && n == 1)) continue;  // g / 1 is g
    float* o = out[i].data<float>();
    if (t.coding == GradCoding::F16) {
      parallel_for(t.numel, kGrain, [&](int64_t b, int64_t e) {
        float acc[kChunk];
        half_bits h[kChunk];
        for (int64_t k = b; k < e; k += kChunk) {
          const int64_t m = std::min(kChunk, e - k);
          sum_rounded_to_half(workers, i, k, m, acc);
          floats_to_halves(acc, h, m);  // the fp16 sum, as it would have travelled
          halves_to_floats(h, o + k, m);
          for (int64_t j = 0; j < m; ++j) o[k + j] /= nf;
        }
      });
      continue;
    }
    parallel_for(t.numel, kGrain, [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) {
        float acc = (*workers[0])[i].data<float>()[k];
        for (int w = 1; w < n; ++w) acc += (*workers[w])[i].data<float>()[k];
        o[k] = acc / nf;
      }
    });
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
    if (t.coding == GradCoding::Ternary)
      ternary_decode_gathered_cpu(gathered + (t.offset - base), stride, num_workers, t.numel,
                                  scalers[t.scaler_index], grads[i].data<float>());
  }
}

void GradientCodec::decode_ternary_sums(const int8_t* code_sums, int num_workers, TensorRange r, const float* scalers,
                                        const std::vector<Tensor>& grads) const {
  TG_CHECK(num_workers >= 1, "gradient codec: {} workers", num_workers);
  const int64_t base = layout(r).packed_begin;
  for (int i = r.begin; i < r.end; ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding == GradCoding::Ternary)
      ternary_decode_sums_cpu(code_sums + 4 * (t.offset - base), t.numel, scalers[t.scaler_index], num_workers,
                              grads[i].data<float>());
  }
}

void GradientCodec::decode_f16_sum(const half_bits* sum, int num_workers, TensorRange r,
                                   const std::vector<Tensor>& grads) const {
  TG_CHECK(num_workers >= 1, "gradient codec: {} workers", num_workers);
  const int64_t base = layout(r).f16_begin;
  const float n = static_cast<float>(num_workers);
  for (int i = r.begin; i < r.end; ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding != GradCoding::F16) continue;
    const half_bits* in = sum + (t.offset - base);
    float* g = grads[i].data<float>();
    parallel_for(t.numel, kGrain, [&](int64_t b, int64_t e) {
      halves_to_floats(in + b, g + b, e - b);
      for (int64_t k = b; k < e; ++k) g[k] /= n;
    });
  }
}

void GradientCodec::decode_f32_sum(const float* sum, int num_workers, TensorRange r,
                                   const std::vector<Tensor>& grads) const {
  TG_CHECK(num_workers >= 1, "gradient codec: {} workers", num_workers);
  const int64_t base = layout(r).f32_begin;
  const float n = static_cast<float>(num_workers);
  for (int i = r.begin; i < r.end; ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding != GradCoding::F32) continue;
    const float* in = sum + (t.offset - base);
    float* g = grads[i].data<float>();
    parallel_for(t.numel, kGrain, [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) g[k] = in[k] / n;
    });
  }
}

// ---- whole-gradient forms ---------------------------------------------------------------------------------
void GradientCodec::allocate(EncodedGradient& e) const {
  e.scalers.assign(policy_.num_ternary(), 0.f);
  e.packed.assign(policy_.packed_bytes(), 0);
  e.f16.assign(policy_.f16_elements(), half_bits{0});
  e.f32.assign(policy_.f32_elements(), 0.f);
  e.zero_codes.assign(policy_.num_ternary(), 0);
}

std::vector<float> GradientCodec::local_scalers(const std::vector<Tensor>& grads) const {
  check_grads(grads);
  std::vector<float> s(policy_.num_ternary(), 0.f);
  local_scalers(grads, all(), s.data());
  return s;
}

void GradientCodec::encode(const std::vector<Tensor>& grads, const std::vector<float>& shared_scalers, uint32_t step,
                           uint32_t worker, EncodedGradient& out) const {
  check_grads(grads);
  TG_CHECK(static_cast<int>(shared_scalers.size()) == policy_.num_ternary(),
           "gradient codec: got {} scalers, the policy has {} ternary tensors", shared_scalers.size(),
           policy_.num_ternary());
  allocate(out);
  out.scalers = shared_scalers;
  encode_ternary(grads, all(), shared_scalers.data(), step, worker, out.packed.data(), out.zero_codes.data());
  const std::vector<const std::vector<Tensor>*> one = {&grads};
  encode_f16(one, all(), out.f16.data());
  encode_f32(one, all(), out.f32.data());
}

}  // namespace tg

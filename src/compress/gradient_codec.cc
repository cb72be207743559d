// GradientCodec: fused encode/decode of a worker's gradient per the CompressionPolicy (host tensors).
#include "terngrad/compress/gradient_codec.h"

#include <functional>

#include <cmath>

#include "terngrad/compress/ternary_codec.h"
#include "terngrad/core/error.h"
#include "terngrad/core/philox.h"
#include "terngrad/math/ternary_math.h"

namespace tg {

GradientCodec::GradientCodec(CompressionPolicy policy, uint64_t seed, ThreadPool* pool)
    : policy_(std::move(policy)), seed_(seed), pool_(pool) {}

void GradientCodec::allocate(EncodedGradient& e) const {
  e.scalers.assign(policy_.num_ternary(), 0.f);
  e.packed.assign(policy_.packed_bytes(), 0);
  e.f16.assign(policy_.f16_elements(), half_bits{0});
  e.f32.assign(policy_.f32_elements(), 0.f);
  e.zero_codes.assign(policy_.num_ternary(), 0);
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
    TG_CHECK(g.device().is_cpu(),
             "gradient codec: gradient of '{}' is on {}; the codec runs on host tensors (the CUDA kernels in "
             "kernels/ternary_kernels.cu are not wired into it yet)",
             t.name, g.device().str());
    TG_CHECK(t.numel == 0 || g.raw() != nullptr, "gradient codec: gradient of '{}' has no data", t.name);
  }
}

std::vector<float> GradientCodec::local_scalers(const std::vector<Tensor>& grads) const {
  check_grads(grads);
  std::vector<float> s(policy_.num_ternary(), 0.f);
  for (size_t i = 0; i < grads.size(); ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding != GradCoding::Ternary) continue;
    s[t.scaler_index] = ternary_scaler_cpu(grads[i].data<float>(), t.numel, policy_.flags().clip_factor);
  }
  return s;
}

void GradientCodec::check_scalers(const std::vector<float>& scalers, uint32_t step) const {
  TG_CHECK(static_cast<int>(scalers.size()) == policy_.num_ternary(),
           "gradient codec: got {} scalers, the policy has {} ternary tensors", scalers.size(), policy_.num_ternary());
  for (const TensorCodingPlan& t : policy_.tensors()) {
    if (t.coding != GradCoding::Ternary) continue;
    float s = scalers[t.scaler_index];
    if (!std::isfinite(s))
      TG_THROW(
          "non-finite gradient scaler {} for tensor '{}' at step {} (its gradient holds NaN or Inf on at "
          "least one worker)",
          s, t.name, step);
  }
}

void GradientCodec::encode(const std::vector<Tensor>& grads, const std::vector<float>& shared_scalers, uint32_t step,
                           uint32_t worker, EncodedGradient& out) const {
  check_grads(grads);
  check_scalers(shared_scalers, step);
  if (out.packed.size() != static_cast<size_t>(policy_.packed_bytes()) ||
      out.f16.size() != static_cast<size_t>(policy_.f16_elements()) ||
      out.f32.size() != static_cast<size_t>(policy_.f32_elements()) ||
      out.zero_codes.size() != static_cast<size_t>(policy_.num_ternary()))
    allocate(out);
  out.scalers = shared_scalers;
  const PhiloxKey key = philox_key(seed_, worker);
  for (size_t i = 0; i < grads.size(); ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    const float* g = grads[i].data<float>();
    switch (t.coding) {
      case GradCoding::Ternary:
        out.zero_codes[t.scaler_index] =
            ternary_encode_cpu(g, t.numel, shared_scalers[t.scaler_index], key, step, static_cast<uint32_t>(i),
                               out.packed.data() + t.offset);
        break;
      case GradCoding::F16:
        for (int64_t k = 0; k < t.numel; ++k) out.f16[t.offset + k] = float_to_half(g[k]);
        break;
      case GradCoding::F32:
        for (int64_t k = 0; k < t.numel; ++k) out.f32[t.offset + k] = g[k];
        break;
    }
  }
}

void GradientCodec::unpack_codes(const uint8_t* packed, int8_t* codes) const {
  ternary_unpack_cpu(packed, 4 * policy_.packed_bytes(), codes);
}

void GradientCodec::for_each_ternary(const std::vector<float>& scalers, int num_workers,
                                     const std::vector<Tensor>& grads,
                                     const std::function<void(const TensorCodingPlan&, float, float*)>& decode) const {
  check_grads(grads);
  TG_CHECK(num_workers >= 1, "gradient codec: {} workers", num_workers);
  TG_CHECK(static_cast<int>(scalers.size()) == policy_.num_ternary(), "gradient codec: got {} scalers, expected {}",
           scalers.size(), policy_.num_ternary());
  for (size_t i = 0; i < grads.size(); ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding == GradCoding::Ternary) decode(t, scalers[t.scaler_index], grads[i].data<float>());
  }
}

void GradientCodec::decode_ternary_sums(const int8_t* code_sums, const std::vector<float>& scalers, int num_workers,
                                        const std::vector<Tensor>& grads) const {
  for_each_ternary(scalers, num_workers, grads, [&](const TensorCodingPlan& t, float s, float* g) {
    ternary_decode_sums_cpu(code_sums + 4 * t.offset, t.numel, s, num_workers, g);
  });
}

void GradientCodec::decode_ternary_gathered(const uint8_t* gathered, const std::vector<float>& scalers, int num_workers,
                                            const std::vector<Tensor>& grads) const {
  for_each_ternary(scalers, num_workers, grads, [&](const TensorCodingPlan& t, float s, float* g) {
    ternary_decode_gathered_cpu(gathered + t.offset, policy_.packed_bytes(), num_workers, t.numel, s, g);
  });
}

void GradientCodec::decode_f16_sum(const half_bits* sum, int num_workers, const std::vector<Tensor>& grads) const {
  check_grads(grads);
  TG_CHECK(num_workers >= 1, "gradient codec: {} workers", num_workers);
  const float n = static_cast<float>(num_workers);
  for (size_t i = 0; i < grads.size(); ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding != GradCoding::F16) continue;
    float* g = grads[i].data<float>();
    for (int64_t k = 0; k < t.numel; ++k) g[k] = half_to_float(sum[t.offset + k]) / n;
  }
}

void GradientCodec::decode_f32_sum(const float* sum, int num_workers, const std::vector<Tensor>& grads) const {
  check_grads(grads);
  TG_CHECK(num_workers >= 1, "gradient codec: {} workers", num_workers);
  const float n = static_cast<float>(num_workers);
  for (size_t i = 0; i < grads.size(); ++i) {
    const TensorCodingPlan& t = policy_.tensors()[i];
    if (t.coding != GradCoding::F32) continue;
    float* g = grads[i].data<float>();
    for (int64_t k = 0; k < t.numel; ++k) g[k] = sum[t.offset + k] / n;
  }
}

}  // namespace tg

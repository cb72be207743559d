// CompressionPolicy: per-tensor coding decisions and fused-buffer layout (see the header).
#include "terngrad/compress/compression_policy.h"

#include <fmt/format.h>

#include <cmath>

#include "terngrad/core/error.h"

namespace tg {

const std::vector<Flag<CompressionFlags>>& compression_flags() {
  using C = CompressionFlags;
  static const std::vector<Flag<C>> table = {
      {"grad_bits", &C::grad_bits, "1 = TernGrad, 16 = fp16, 32 = fp32",
       one_of_numbers({1, 16, 32}, "1 (TernGrad), 16 (fp16), 32 (fp32)"), kFlagRun},
      {"clip_factor", &C::clip_factor, "c in s = min(c·σ, max|g|); 0: no clipping", at_least(0).note("0: no clipping"),
       kFlagRun},
      {"size_to_binarize", &C::size_to_binarize,
       "tensors with fewer elements stay fp32 (AlexNet: 9217 keeps biases/BN in fp32)", at_least(1), kFlagRun},
      {"quantize_logits", &C::quantize_logits, "also ternarize the logits layer (`--quantize_logits=true`)", no_check(),
       kFlagSwitch | kFlagRun},
      {"scaler_bucket", &C::scaler_bucket,
       "TernGrad: one scaler per this many consecutive elements of a tensor (a multiple of 256; 0: one per tensor, "
       "the paper's rule); clipping stays per tensor (c·σ of the whole tensor), each bucket's scaler is "
       "min(c·σ, its max|g|), shared over workers as the tensor's is",
       at_least(0).max(double(kMaxScalerBucket)).note("0: one scaler per tensor"), kFlagContinue},
  };
  return table;
}

void CompressionFlags::validate() const {
  check_flags(compression_flags(), *this);
  // User-facing: one line naming the flag and its value, no internal check text.
  if (scaler_bucket % kScalerBucketAlign != 0)
    TG_THROW("--scaler_bucket {} is not a multiple of {} (0: one scaler per tensor)", scaler_bucket,
             kScalerBucketAlign);
  if (scaler_bucket != 0 && grad_bits != 1)
    TG_THROW("--scaler_bucket {} needs ternary gradients (--grad_bits 1), not --grad_bits {}", scaler_bucket,
             grad_bits);
}

CompressionPolicy::CompressionPolicy(const CompressionFlags& flags, const std::vector<ParamInfo>& params)
    : flags_(flags) {
  flags_.validate();
  const int n = static_cast<int>(params.size());
  tensors_.reserve(params.size());
  for (int i = 0; i < n; ++i) {
    const ParamInfo& p = params[i];
    TG_CHECK(p.numel >= 0, "parameter '{}' has a negative element count {}", p.name, p.numel);
    TensorCodingPlan t;
    t.name = p.name;
    t.numel = p.numel;
    const bool is_logits = !flags_.quantize_logits && i >= n - 2;
    const bool compressed = flags_.grad_bits != 32 && !is_logits && p.numel >= flags_.size_to_binarize;
    if (compressed && flags_.grad_bits == 1) {
      t.coding = GradCoding::kTernary;
      t.offset = packed_bytes_;
      t.ternary_index = num_ternary_++;
      const int64_t scalers = ternary_num_scalers(p.numel, flags_.scaler_bucket);
      TG_CHECK(num_scalers_ + scalers <= INT32_MAX, "--scaler_bucket {}: more than 2^31 scalers", flags_.scaler_bucket);
      t.scaler_index = num_scalers_;
      t.num_scalers = static_cast<int>(scalers);
      num_scalers_ += t.num_scalers;
      packed_bytes_ += ternary_packed_bytes(p.numel);
    } else if (compressed && flags_.grad_bits == 16) {
      t.coding = GradCoding::kF16;
      t.offset = f16_elements_;
      f16_elements_ += p.numel;
    } else {
      t.coding = GradCoding::kF32;
      t.offset = f32_elements_;
      f32_elements_ += p.numel;
    }
    total_elements_ += p.numel;
    tensors_.push_back(std::move(t));
  }
}

std::string CompressionPolicy::summary() const {
  int64_t ternary_elems = 0, f16_count = 0, f32_count = 0;
  for (const auto& t : tensors_) {
    if (t.coding == GradCoding::kTernary) ternary_elems += t.numel;
    if (t.coding == GradCoding::kF16) ++f16_count;
    if (t.coding == GradCoding::kF32) ++f32_count;
  }
  const std::string scalers =
      flags_.scaler_bucket > 0 ? fmt::format(", {} scalers of {} elements", num_scalers_, flags_.scaler_bucket) : "";
  return fmt::format(
      "ternary: {} tensors ({} elements, {} bytes{}); fp16: {} tensors ({} elements); fp32: {} "
      "tensors ({} elements)",
      num_ternary_, ternary_elems, packed_bytes_, scalers, f16_count, f16_elements_, f32_count, f32_elements_);
}

void CompressionPolicy::check_range(TensorRange r) const {
  TG_CHECK(0 <= r.begin && r.begin <= r.end && r.end <= num_tensors(),
           "compression policy: tensor range [{}, {}) outside its {} tensors", r.begin, r.end, num_tensors());
}

RangeLayout CompressionPolicy::layout(TensorRange r) const {
  check_range(r);
  // Each coding's tensors are laid out back to back in policy order, so a range of tensors occupies one
  // contiguous piece of each fused buffer: it starts where the first tensor of that coding at or after
  // r.begin starts (or where the buffer's part after r.begin would start).
  RangeLayout l;
  l.packed_begin = l.packed_end = packed_bytes();
  l.f16_begin = l.f16_end = f16_elements();
  l.f32_begin = l.f32_end = f32_elements();
  l.scaler_begin = l.scaler_end = num_scalers();
  l.ternary_begin = l.ternary_end = num_ternary();
  int64_t packed = 0, f16 = 0, f32 = 0;
  int scaler = 0, ternary = 0;
  for (int i = 0; i <= num_tensors(); ++i) {
    if (i == r.begin) {
      l.packed_begin = packed, l.f16_begin = f16, l.f32_begin = f32, l.scaler_begin = scaler;
      l.ternary_begin = ternary;
    }
    if (i == r.end) {
      l.packed_end = packed, l.f16_end = f16, l.f32_end = f32, l.scaler_end = scaler, l.ternary_end = ternary;
      break;
    }
    const TensorCodingPlan& t = tensors()[i];
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

void CompressionPolicy::check_grads(const std::vector<Tensor>& grads, Device device) const {
  TG_CHECK(static_cast<int>(grads.size()) == num_tensors(),
           "compression policy: got {} gradient tensors, the policy has {}", grads.size(), num_tensors());
  for (size_t i = 0; i < grads.size(); ++i) {
    const TensorCodingPlan& t = tensors()[i];
    const Tensor& g = grads[i];
    TG_CHECK(g.dtype() == DType::kF32, "compression policy: gradient of '{}' is {}, expected f32", t.name,
             dtype_name(g.dtype()));
    TG_CHECK(g.numel() == t.numel, "compression policy: gradient of '{}' has {} elements, the policy expects {}",
             t.name, g.numel(), t.numel);
    TG_CHECK(g.device() == device, "compression policy: gradient of '{}' is on {}; the exchange runs on {}", t.name,
             g.device().str(), device.str());
    TG_CHECK(t.numel == 0 || g.raw() != nullptr, "compression policy: gradient of '{}' has no data", t.name);
  }
}

}  // namespace tg

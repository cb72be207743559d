// CompressionPolicy: which coding each parameter tensor's gradient travels in, from the reference's flags
// (--grad_bits, --clip_factor, --size_to_binarize, --quantize_logits), and the layout of the fused buffers.
//
// A tensor is "compressed" unless numel < size_to_binarize, or quantize_logits is false and it is one of
// the last two parameter tensors (the logits weights and biases). Compressed tensors travel as ternary
// codes (grad_bits 1) or fp16 (grad_bits 16); everything else, and everything under grad_bits 32, as fp32.
// Layout: ternary tensors back to back in one packed byte buffer (each starting at a byte boundary,
// ceil(numel/4) bytes) with one scaler each, or with --scaler_bucket B one per B elements
// (ternary_num_scalers(numel, B), ternary_math.h), back to back in one scaler vector in the same order; fp16 and
// fp32 tensors back to back in one fused buffer each. A range of tensors (a bucket) occupies one contiguous piece of
// each fused buffer (layout()).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "terngrad/core/device.h"
#include "terngrad/core/enum_names.h"
#include "terngrad/core/flag_table.h"
#include "terngrad/core/tensor.h"
#include "terngrad/math/ternary_math.h"

namespace tg {

enum class GradCoding : uint8_t { kF32, kF16, kTernary };
template <>
struct EnumNames<GradCoding> : EnumNamesBase {
  static constexpr const char* kFlag = "gradient coding";
  static constexpr EnumName<GradCoding> kList[] = {
      {GradCoding::kF32, "fp32"}, {GradCoding::kF16, "fp16"}, {GradCoding::kTernary, "ternary"}};
};

// The reference's compression flags, owned here with their flag sub-table (compression_flags()); TrainConfig
// derives from this struct and embeds the table.
struct CompressionFlags {
  int grad_bits = 32;            // 1 (ternary), 16 (fp16) or 32 (fp32)
  float clip_factor = 0.f;       // c in s = min(c*sigma, max|g|); 0: s = max|g|
  int64_t size_to_binarize = 1;  // tensors with fewer elements stay fp32
  bool quantize_logits = false;  // false: the last two parameter tensors stay fp32
  int64_t scaler_bucket = 0;     // elements per ternary scaler (0: one per tensor); a multiple of 256
  // The table's checks and the ones between these flags: throws tg::Error naming the flag and its value.
  void validate() const;
};
const std::vector<Flag<CompressionFlags>>& compression_flags();

struct ParamInfo {
  std::string name;  // "conv1/weights"
  int64_t numel = 0;
};

struct TensorCodingPlan {
  std::string name;
  int64_t numel = 0;
  GradCoding coding = GradCoding::kF32;
  int64_t offset = 0;      // ternary: byte offset in the packed buffer; fp16/fp32: element offset in its buffer
  int ternary_index = -1;  // ternary: index among the ternary tensors (zero counts, summaries); -1 otherwise
  int scaler_index = -1;   // ternary: its first scaler in the scaler vector; -1 otherwise
  int num_scalers = 0;     // ternary: its scalers (ternary_num_scalers(numel, scaler_bucket)); 0 otherwise
};

// Tensors [begin, end) of the policy (a bucket).
struct TensorRange {
  int begin = 0, end = 0;
};

// Where a range of tensors lives in the fused buffers.
struct RangeLayout {
  int64_t packed_begin = 0, packed_end = 0;  // bytes of the fused ternary buffer
  int64_t f16_begin = 0, f16_end = 0;        // elements of the fused fp16 buffer
  int64_t f32_begin = 0, f32_end = 0;        // elements of the fused fp32 buffer
  int scaler_begin = 0, scaler_end = 0;      // scaler indices (several per tensor with --scaler_bucket)
  int ternary_begin = 0, ternary_end = 0;    // ternary tensor indices (zero counts)
  int64_t elements = 0;                      // gradient elements of the range
  int64_t packed_bytes() const { return packed_end - packed_begin; }
  int64_t f16_elements() const { return f16_end - f16_begin; }
  int64_t f32_elements() const { return f32_end - f32_begin; }
  int num_scalers() const { return scaler_end - scaler_begin; }
};

class CompressionPolicy {
 public:
  CompressionPolicy() = default;
  // params in the trainer's parameter order (creation order; the logits tensors last).
  CompressionPolicy(const CompressionFlags& flags, const std::vector<ParamInfo>& params);

  const CompressionFlags& flags() const { return flags_; }
  const std::vector<TensorCodingPlan>& tensors() const { return tensors_; }
  int num_tensors() const { return static_cast<int>(tensors_.size()); }
  int num_ternary() const { return num_ternary_; }  // ternary tensors
  int num_scalers() const { return num_scalers_; }  // scalers of all ternary tensors (num_ternary without buckets)
  int64_t scaler_bucket() const { return flags_.scaler_bucket; }
  int64_t packed_bytes() const { return packed_bytes_; }  // fused ternary buffer
  int64_t f16_elements() const { return f16_elements_; }  // fused fp16 buffer
  int64_t f32_elements() const { return f32_elements_; }  // fused fp32 buffer
  int64_t total_elements() const { return total_elements_; }
  std::string summary() const;  // "ternary: 4 tensors (431080 elements, 107772 bytes); fp32: 4 tensors (...)"
  TensorRange all() const { return {0, num_tensors()}; }
  // Throws unless 0 <= r.begin <= r.end <= num_tensors().
  void check_range(TensorRange r) const;
  RangeLayout layout(TensorRange r) const;
  // grads: one f32 tensor per policy tensor with the policy's element counts, on `device`; throws naming the tensor.
  void check_grads(const std::vector<Tensor>& grads, Device device) const;

 private:
  CompressionFlags flags_;
  std::vector<TensorCodingPlan> tensors_;
  int num_ternary_ = 0, num_scalers_ = 0;
  int64_t packed_bytes_ = 0, f16_elements_ = 0, f32_elements_ = 0, total_elements_ = 0;
};

}  // namespace tg

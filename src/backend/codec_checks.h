// Argument checks shared by the backends' gradient codec ops (cpu/cpu_codec.cc, cuda/cuda_codec.cc): dtypes,
// element counts and the extent of the workers' packed codes. Device checks are each backend's own.
#pragma once

#include <cstdint>

#include "terngrad/backend/backend.h"
#include "terngrad/core/error.h"

namespace tg::codec_checks {

inline void dtype(const Tensor& t, DType want, const char* op, const char* what) {
  TG_CHECK(t.dtype() == want, "{}: {} {} is not {}", op, what, t.str(), dtype_name(want));
}

inline void numel(const Tensor& t, int64_t n, const char* op, const char* what) {
  TG_CHECK(t.numel() == n, "{}: {} {} has {} elements, expected {}", op, what, t.str(), t.numel(), n);
}

// A scaler: f32 (1).
inline void scaler(const Tensor& s, const char* op) {
  dtype(s, DType::kF32, op, "scaler");
  numel(s, 1, op, "scaler");
}

// The scalers of a tensor of n elements with buckets of `bucket` elements (ternary_math.h): f32
// (ternary_num_scalers(n, bucket)); a bucket is 0 or a positive multiple of kScalerBucketAlign.
inline void scalers(const Tensor& s, int64_t n, int64_t bucket, const char* op) {
  TG_CHECK(bucket == 0 || (bucket > 0 && bucket % kScalerBucketAlign == 0 && bucket <= kMaxScalerBucket),
           "{}: a scaler bucket of {} elements is not 0 or a positive multiple of {} up to {}", op, bucket,
           kScalerBucketAlign, kMaxScalerBucket);
  dtype(s, DType::kF32, op, "scalers");
  numel(s, ternary_num_scalers(n, bucket), op, "scalers");
}

// The workers' packed codes of n elements: ceil(n/4) bytes each, worker w's at byte w * stride of `packed`.
inline void workers_packed(const Tensor& packed, int64_t stride, int num_workers, int64_t n, const char* op) {
  dtype(packed, DType::kU8, op, "packed codes");
  TG_CHECK(num_workers >= 1 && stride >= 0, "{}: {} workers, stride {}", op, num_workers, stride);
  const int64_t need = n > 0 ? (num_workers - 1) * stride + ternary_packed_bytes(n) : 0;
  TG_CHECK(packed.numel() >= need, "{}: {} holds {} bytes, {} workers at stride {} of {} elements need {}", op,
           packed.str(), packed.numel(), num_workers, stride, n, need);
}

// The workers' inputs of the fp16/fp32 sums: 1..kMaxCodecInputs f32 tensors of n elements.
inline void inputs(const Tensor* xs, int count, int64_t n, const char* op) {
  TG_CHECK(xs != nullptr && count >= 1 && count <= Backend::kMaxCodecInputs, "{}: {} inputs (1 to {})", op, count,
           Backend::kMaxCodecInputs);
  for (int w = 0; w < count; ++w) {
    dtype(xs[w], DType::kF32, op, "input");
    numel(xs[w], n, op, "input");
  }
}

// encode_f32_sum's out may be input 0 only (the sum starts by copying it).
inline void not_a_later_input(const Tensor* xs, int count, const Tensor& out, const char* op) {
  for (int w = 1; w < count; ++w)
    TG_CHECK(xs[w].raw() != out.raw() || out.numel() == 0, "{}: out is input {} (only input 0 may be)", op, w);
}

}  // namespace tg::codec_checks

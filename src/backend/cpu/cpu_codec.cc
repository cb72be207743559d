// CpuBackend's gradient codec ops: the vectorized loops of ternary_codec.cc (terngrad/backend/ternary_codec.h) on
// the backend's compute team. The front (backend_front.cc) has checked every argument. The scalers are f32 (1)
// (or, with per-bucket scalers, f32 (buckets)) host tensors read here; nothing allocates (the workers' inputs go
// through a pointer array on the stack).
#include <cstdint>

#include "src/backend/cpu/cpu_backend.h"
#include "terngrad/backend/ternary_codec.h"

namespace tg {

namespace {
// The workers' inputs as a pointer array on the caller's stack.
void input_pointers(const Tensor* xs, int count, const float* (&ptrs)[Backend::kMaxCodecInputs]) {
  for (int w = 0; w < count; ++w) ptrs[w] = xs[w].data<float>();
}
}  // namespace

void CpuBackend::ternary_scaler_impl(const Tensor& g, float clip_factor, const Tensor& scaler, const Tensor& residual,
                                     const Tensor& decayed, float decay, int64_t bucket) {
  // g is written only when there is something to add (the loops read it otherwise).
  ternary_bucket_scalers_cpu(g.data<float>(), decayed ? decayed.data<float>() : nullptr, decay,
                             residual ? residual.data<float>() : nullptr, g.numel(), clip_factor, bucket,
                             scaler.data<float>());
}

void CpuBackend::ternary_encode_impl(const Tensor& g, const Tensor& scaler, PhiloxKey key, uint32_t step,
                                     uint32_t tensor, const Tensor& packed, const Tensor& zero_count, int64_t bucket) {
  encode_one(g, scaler, key, step, tensor, packed, zero_count, Tensor(), bucket);
}

void CpuBackend::encode_one(const Tensor& g, const Tensor& scaler, PhiloxKey key, uint32_t step, uint32_t tensor,
                            const Tensor& packed, const Tensor& zero_count, const Tensor& residual, int64_t bucket) {
  const int64_t zeros =
      ternary_encode_buckets_cpu(g.data<float>(), g.numel(), scaler.data<float>(), bucket, key, step, tensor,
                                 packed.data<uint8_t>(), residual ? residual.data<float>() : nullptr);
  if (zero_count) *zero_count.data<int32_t>() = static_cast<int32_t>(zeros);
}

void CpuBackend::ternary_encode_many_impl(const TernaryEncodeItem* items, int count, PhiloxKey key, uint32_t step) {
  for (int k = 0; k < count; ++k) {
    const TernaryEncodeItem& it = items[k];
    encode_one(it.g, it.scaler, key, step, it.tensor, it.packed, it.zero_count, it.residual, it.bucket);
  }
}

void CpuBackend::ternary_sum_codes_impl(const Tensor& packed, int64_t stride, int num_workers,
                                        const Tensor& code_sums) {
  ternary_sum_codes_cpu(packed.data<uint8_t>(), stride, num_workers, code_sums.numel(), code_sums.data<int8_t>());
}

void CpuBackend::max_scalers_impl(const Tensor* xs, int count, const Tensor& out) {
  const float* ptrs[kMaxCodecInputs];
  input_pointers(xs, count, ptrs);
  max_scalers_cpu(ptrs, count, out.numel(), out.data<float>());
}

void CpuBackend::ternary_decode_sums_impl(const Tensor& code_sums, const Tensor& scaler, int num_workers,
                                          const Tensor& g, int64_t bucket) {
  ternary_decode_sums_buckets_cpu(code_sums.data<int8_t>(), g.numel(), scaler.data<float>(), bucket, num_workers,
                                  g.data<float>());
}

void CpuBackend::ternary_decode_gathered_impl(const Tensor& gathered, int64_t stride, int num_workers,
                                              const Tensor& scaler, const Tensor& g, int64_t bucket) {
  ternary_decode_gathered_buckets_cpu(gathered.data<uint8_t>(), stride, num_workers, g.numel(), scaler.data<float>(),
                                      bucket, g.data<float>());
}

void CpuBackend::encode_f16_sum_impl(const Tensor* xs, int count, const Tensor& out) {
  const float* ptrs[kMaxCodecInputs];
  input_pointers(xs, count, ptrs);
  encode_f16_sum_cpu(ptrs, count, out.numel(), out.data<half_bits>());
}

void CpuBackend::encode_f32_sum_impl(const Tensor* xs, int count, const Tensor& out) {
  const float* ptrs[kMaxCodecInputs];
  input_pointers(xs, count, ptrs);
  encode_f32_sum_cpu(ptrs, count, out.numel(), out.data<float>());
}

void CpuBackend::average_f16_impl(const Tensor* xs, int count, const Tensor& out) {
  const float* ptrs[kMaxCodecInputs];
  input_pointers(xs, count, ptrs);
  average_f16_cpu(ptrs, count, out.numel(), out.data<float>());
}

void CpuBackend::average_f32_impl(const Tensor* xs, int count, const Tensor& out) {
  const float* ptrs[kMaxCodecInputs];
  input_pointers(xs, count, ptrs);
  average_f32_cpu(ptrs, count, out.numel(), out.data<float>());
}

void CpuBackend::decode_f16_sum_impl(const Tensor& sum, int num_workers, const Tensor& g) {
  decode_f16_sum_cpu(sum.data<half_bits>(), g.numel(), num_workers, g.data<float>());
}

void CpuBackend::decode_f32_sum_impl(const Tensor& sum, int num_workers, const Tensor& g) {
  decode_f32_sum_cpu(sum.data<float>(), g.numel(), num_workers, g.data<float>());
}

}  // namespace tg

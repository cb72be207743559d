// CpuBackend's gradient codec ops: argument checks (src/backend/codec_checks.h), then the vectorized loops of
// ternary_codec.cc (terngrad/backend/ternary_codec.h) on the backend's compute team. The scalers are f32 (1)
// (or, with per-bucket scalers, f32 (buckets)) host tensors read here; nothing allocates (the workers' inputs go
// through a pointer array on the stack).
#include <cstdint>

#include "src/backend/codec_checks.h"
#include "src/backend/cpu/cpu_backend.h"
#include "terngrad/backend/ternary_codec.h"

namespace tg {

namespace {
namespace cc = codec_checks;

void on_host(const Tensor& t, const char* op, const char* what) {
  TG_CHECK(t.device().is_cpu(), "{} on the cpu: {} {} is on another device", op, what, t.str());
  TG_CHECK(t.numel() == 0 || t.raw() != nullptr, "{}: {} is undefined", op, what);
}

// The scalers of a tensor of n elements (checked) as a host pointer.
const float* scaler_values(const Tensor& scaler, int64_t n, int64_t bucket, const char* op) {
  cc::scalers(scaler, n, bucket, op);
  on_host(scaler, op, "scaler");
  return scaler.data<float>();
}

// The workers' inputs, checked, as a pointer array on the caller's stack.
void input_pointers(const Tensor* xs, int count, const Tensor& out, DType out_dtype, const char* op,
                    const float* (&ptrs)[Backend::kMaxCodecInputs]) {
  cc::dtype(out, out_dtype, op, "out");
  on_host(out, op, "out");
  cc::inputs(xs, count, out.numel(), op);
  for (int w = 0; w < count; ++w) {
    on_host(xs[w], op, "input");
    ptrs[w] = xs[w].data<float>();
  }
}
}  // namespace

void CpuBackend::ternary_scaler_impl(const Tensor& g, float clip_factor, const Tensor& scaler, const Tensor& residual,
                                     const Tensor& decayed, float decay, int64_t bucket) {
  cc::dtype(g, DType::kF32, "ternary_scaler", "g");
  on_host(g, "ternary_scaler", "g");
  float* out = const_cast<float*>(scaler_values(scaler, g.numel(), bucket, "ternary_scaler"));
  if (decayed) on_host(decayed, "ternary_scaler", "decayed");
  if (residual) on_host(residual, "ternary_scaler", "residual");
  // g is written only when there is something to add (the loops read it otherwise).
  ternary_bucket_scalers_cpu(g.data<float>(), decayed ? decayed.data<float>() : nullptr, decay,
                             residual ? residual.data<float>() : nullptr, g.numel(), clip_factor, bucket, out);
}

void CpuBackend::ternary_encode_impl(const Tensor& g, const Tensor& scaler, PhiloxKey key, uint32_t step,
                                     uint32_t tensor, const Tensor& packed, const Tensor& zero_count, int64_t bucket) {
  encode_one(g, scaler, key, step, tensor, packed, zero_count, Tensor(), bucket);
}

void CpuBackend::encode_one(const Tensor& g, const Tensor& scaler, PhiloxKey key, uint32_t step, uint32_t tensor,
                            const Tensor& packed, const Tensor& zero_count, const Tensor& residual, int64_t bucket) {
  const char* op = "ternary_encode";
  const int64_t n = g.numel();
  cc::dtype(g, DType::kF32, op, "g"), cc::dtype(packed, DType::kU8, op, "packed codes");
  cc::numel(packed, ternary_packed_bytes(n), op, "packed codes");
  on_host(g, op, "g"), on_host(packed, op, "packed codes");
  const float* s = scaler_values(scaler, n, bucket, op);
  if (zero_count) {
    cc::dtype(zero_count, DType::kI32, op, "zero count"), cc::numel(zero_count, 1, op, "zero count");
    on_host(zero_count, op, "zero count");
    TG_CHECK(n <= INT32_MAX, "{}: {} elements overflow an i32 zero count", op, n);
  }
  if (residual) on_host(residual, op, "residual");
  const int64_t zeros = ternary_encode_buckets_cpu(g.data<float>(), n, s, bucket, key, step, tensor,
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
  const char* op = "ternary_sum_codes";
  cc::dtype(code_sums, DType::kI8, op, "code sums");
  cc::workers_packed(packed, stride, num_workers, code_sums.numel(), op);
  on_host(code_sums, op, "code sums"), on_host(packed, op, "packed codes");
  ternary_sum_codes_cpu(packed.data<uint8_t>(), stride, num_workers, code_sums.numel(), code_sums.data<int8_t>());
}

void CpuBackend::max_scalers_impl(const Tensor* xs, int count, const Tensor& out) {
  const float* ptrs[kMaxCodecInputs];
  input_pointers(xs, count, out, DType::kF32, "max_scalers", ptrs);
  max_scalers_cpu(ptrs, count, out.numel(), out.data<float>());
}

void CpuBackend::ternary_decode_sums_impl(const Tensor& code_sums, const Tensor& scaler, int num_workers,
                                          const Tensor& g, int64_t bucket) {
  const char* op = "ternary_decode_sums";
  cc::dtype(g, DType::kF32, op, "g"), cc::dtype(code_sums, DType::kI8, op, "code sums");
  cc::numel(code_sums, g.numel(), op, "code sums");
  on_host(g, op, "g"), on_host(code_sums, op, "code sums");
  ternary_decode_sums_buckets_cpu(code_sums.data<int8_t>(), g.numel(), scaler_values(scaler, g.numel(), bucket, op),
                                  bucket, num_workers, g.data<float>());
}

void CpuBackend::ternary_decode_gathered_impl(const Tensor& gathered, int64_t stride, int num_workers,
                                              const Tensor& scaler, const Tensor& g, int64_t bucket) {
  const char* op = "ternary_decode_gathered";
  cc::dtype(g, DType::kF32, op, "g");
  cc::workers_packed(gathered, stride, num_workers, g.numel(), op);
  on_host(g, op, "g"), on_host(gathered, op, "packed codes");
  ternary_decode_gathered_buckets_cpu(gathered.data<uint8_t>(), stride, num_workers, g.numel(),
                                      scaler_values(scaler, g.numel(), bucket, op), bucket, g.data<float>());
}

void CpuBackend::encode_f16_sum_impl(const Tensor* xs, int count, const Tensor& out) {
  const float* ptrs[kMaxCodecInputs];
  input_pointers(xs, count, out, DType::kF16, "encode_f16_sum", ptrs);
  encode_f16_sum_cpu(ptrs, count, out.numel(), out.data<half_bits>());
}

void CpuBackend::encode_f32_sum_impl(const Tensor* xs, int count, const Tensor& out) {
  const float* ptrs[kMaxCodecInputs];
  input_pointers(xs, count, out, DType::kF32, "encode_f32_sum", ptrs);
  cc::not_a_later_input(xs, count, out, "encode_f32_sum");
  encode_f32_sum_cpu(ptrs, count, out.numel(), out.data<float>());
}

void CpuBackend::average_f16_impl(const Tensor* xs, int count, const Tensor& out) {
  const float* ptrs[kMaxCodecInputs];
  input_pointers(xs, count, out, DType::kF32, "average_f16", ptrs);
  average_f16_cpu(ptrs, count, out.numel(), out.data<float>());
}

void CpuBackend::average_f32_impl(const Tensor* xs, int count, const Tensor& out) {
  const float* ptrs[kMaxCodecInputs];
  input_pointers(xs, count, out, DType::kF32, "average_f32", ptrs);
  average_f32_cpu(ptrs, count, out.numel(), out.data<float>());
}

void CpuBackend::decode_f16_sum_impl(const Tensor& sum, int num_workers, const Tensor& g) {
  const char* op = "decode_f16_sum";
  cc::dtype(g, DType::kF32, op, "g"), cc::dtype(sum, DType::kF16, op, "sum"), cc::numel(sum, g.numel(), op, "sum");
  on_host(g, op, "g"), on_host(sum, op, "sum");
  decode_f16_sum_cpu(sum.data<half_bits>(), g.numel(), num_workers, g.data<float>());
}

void CpuBackend::decode_f32_sum_impl(const Tensor& sum, int num_workers, const Tensor& g) {
  const char* op = "decode_f32_sum";
  cc::dtype(g, DType::kF32, op, "g"), cc::dtype(sum, DType::kF32, op, "sum"), cc::numel(sum, g.numel(), op, "sum");
  on_host(g, op, "g"), on_host(sum, op, "sum");
  decode_f32_sum_cpu(sum.data<float>(), g.numel(), num_workers, g.data<float>());
}

}  // namespace tg

// CudaBackend's gradient codec ops: argument checks (src/backend/codec_checks.h), then the kernels of
// kernels/ternary_kernels.cu (terngrad/backend/ternary_cuda.h) on the backend's stream. Scalers stay on the
// device (the kernels read them there); nothing synchronizes. The scaler's per-chunk partial sums use the
// workspace arena (a few KiB, reserved on first use).
#include <cstdint>

#include "src/backend/codec_checks.h"
#include "src/backend/cuda/cuda_backend.h"
#include "terngrad/backend/cuda_check.h"
#include "terngrad/backend/ternary_cuda.h"

namespace tg {

static_assert(Backend::kMaxCodecInputs <= kCodecMaxInputsCuda, "the kernels' input array holds every input");

namespace {
namespace cc = codec_checks;
}  // namespace

namespace {
// The workers' inputs, checked, as a host array of device pointers (the launcher copies it into the kernel's
// parameters).
void input_pointers(const CudaBackend& be, const Tensor* xs, int count, const Tensor& out, DType out_dtype,
                    const char* op, const float* (&ptrs)[Backend::kMaxCodecInputs]) {
  cc::dtype(out, out_dtype, op, "out");
  be.check_on_device(out, op, "out");
  cc::inputs(xs, count, out.numel(), op);
  for (int w = 0; w < count; ++w) {
    be.check_on_device(xs[w], op, "input");
    ptrs[w] = xs[w].data<float>();
  }
}
}  // namespace

void CudaBackend::ternary_scaler_impl(const Tensor& g, float clip_factor, const Tensor& scaler, const Tensor& residual,
                                      const Tensor& decayed, float decay, int64_t bucket) {
  const char* op = "ternary_scaler";
  cc::dtype(g, DType::kF32, op, "g"), cc::scalers(scaler, g.numel(), bucket, op);
  check_on_device(g, op, "g"), check_on_device(scaler, op, "scaler");
  CudaDeviceGuard guard(index_);
  void* ws = g.numel() > 0 ? workspace(ternary_scaler_workspace_bytes_cuda()) : nullptr;
  if (decayed || residual) {
    if (decayed) check_on_device(decayed, op, "decayed");
    if (residual) check_on_device(residual, op, "residual");
    ternary_scaler_with_adds_cuda(g.data<float>(), decayed ? decayed.data<float>() : nullptr, decay,
                                  residual ? residual.data<float>() : nullptr, g.numel(), clip_factor,
                                  scaler.data<float>(), ws, stream_, bucket);
  } else {
    ternary_scaler_cuda(g.data<float>(), g.numel(), clip_factor, scaler.data<float>(), ws, stream_, bucket);
  }
}

namespace {
// One encode's tensors, checked, as the kernels take them.
TernaryEncodeCuda encode_args(const CudaBackend& be, const Tensor& g, const Tensor& scaler, uint32_t tensor,
                              const Tensor& packed, const Tensor& zero_count, int64_t bucket, const char* op) {
  const int64_t n = g.numel();
  cc::dtype(g, DType::kF32, op, "g"), cc::dtype(packed, DType::kU8, op, "packed codes");
  cc::scalers(scaler, n, bucket, op);
  cc::numel(packed, ternary_packed_bytes(n), op, "packed codes");
  be.check_on_device(g, op, "g"), be.check_on_device(packed, op, "packed codes"),
      be.check_on_device(scaler, op, "scaler");
  int32_t* zeros = nullptr;
  if (zero_count) {
    cc::dtype(zero_count, DType::kI32, op, "zero count"), cc::numel(zero_count, 1, op, "zero count");
    be.check_on_device(zero_count, op, "zero count");
    zeros = zero_count.data<int32_t>();
  }
  return {g.data<float>(), n, scaler.data<float>(), tensor, packed.data<uint8_t>(), zeros, nullptr, bucket};
}
}  // namespace

void CudaBackend::ternary_encode_impl(const Tensor& g, const Tensor& scaler, PhiloxKey key, uint32_t step,
                                      uint32_t tensor, const Tensor& packed, const Tensor& zero_count, int64_t bucket) {
  const TernaryEncodeCuda a = encode_args(*this, g, scaler, tensor, packed, zero_count, bucket, "ternary_encode");
  CudaDeviceGuard guard(index_);
  ternary_encode_cuda(a.g, a.n, a.scaler, key, step, a.tensor, a.packed, a.zero_count, stream_, bucket);
}

// Tables of up to kEncodeTableCuda tensors: one launch each (and one for the zero counts).
void CudaBackend::ternary_encode_many_impl(const TernaryEncodeItem* items, int count, PhiloxKey key, uint32_t step) {
  static_assert(Backend::kEncodeTable <= kEncodeTableCuda, "a table holds Backend::kEncodeTable tensors");
  TernaryEncodeCuda table[kEncodeTableCuda];
  CudaDeviceGuard guard(index_);
  for (int first = 0; first < count; first += kEncodeTableCuda) {
    const int m = count - first < kEncodeTableCuda ? count - first : kEncodeTableCuda;
    for (int k = 0; k < m; ++k) {
      const TernaryEncodeItem& it = items[first + k];
      table[k] =
          encode_args(*this, it.g, it.scaler, it.tensor, it.packed, it.zero_count, it.bucket, "ternary_encode_many");
      if (it.residual) {
        check_on_device(it.residual, "ternary_encode_many", "residual");
        table[k].residual = it.residual.data<float>();
      }
    }
    ternary_encode_table_cuda(table, m, key, step, stream_);
  }
}

void CudaBackend::ternary_sum_codes_impl(const Tensor& packed, int64_t stride, int num_workers,
                                         const Tensor& code_sums) {
  const char* op = "ternary_sum_codes";
  cc::dtype(code_sums, DType::kI8, op, "code sums");
  cc::workers_packed(packed, stride, num_workers, code_sums.numel(), op);
  check_on_device(packed, op, "packed codes"), check_on_device(code_sums, op, "code sums");
  CudaDeviceGuard guard(index_);
  ternary_sum_codes_cuda(packed.data<uint8_t>(), stride, num_workers, code_sums.numel(), code_sums.data<int8_t>(),
                         stream_);
}

void CudaBackend::max_scalers_impl(const Tensor* xs, int count, const Tensor& out) {
  const float* ptrs[kMaxCodecInputs];
  input_pointers(*this, xs, count, out, DType::kF32, "max_scalers", ptrs);
  CudaDeviceGuard guard(index_);
  max_scalers_cuda(ptrs, count, out.numel(), out.data<float>(), stream_);
}

void CudaBackend::ternary_decode_sums_impl(const Tensor& code_sums, const Tensor& scaler, int num_workers,
                                           const Tensor& g, int64_t bucket) {
  const char* op = "ternary_decode_sums";
  cc::dtype(g, DType::kF32, op, "g"), cc::dtype(code_sums, DType::kI8, op, "code sums");
  cc::scalers(scaler, g.numel(), bucket, op);
  cc::numel(code_sums, g.numel(), op, "code sums");
  TG_CHECK(num_workers >= 1, "{}: {} workers", op, num_workers);
  check_on_device(g, op, "g"), check_on_device(code_sums, op, "code sums"), check_on_device(scaler, op, "scaler");
  CudaDeviceGuard guard(index_);
  ternary_decode_sums_cuda(code_sums.data<int8_t>(), g.numel(), scaler.data<float>(), num_workers, g.data<float>(),
                           stream_, bucket);
}

void CudaBackend::ternary_decode_gathered_impl(const Tensor& gathered, int64_t stride, int num_workers,
                                               const Tensor& scaler, const Tensor& g, int64_t bucket) {
  const char* op = "ternary_decode_gathered";
  cc::dtype(g, DType::kF32, op, "g"), cc::scalers(scaler, g.numel(), bucket, op);
  cc::workers_packed(gathered, stride, num_workers, g.numel(), op);
  check_on_device(g, op, "g"), check_on_device(gathered, op, "packed codes"), check_on_device(scaler, op, "scaler");
  CudaDeviceGuard guard(index_);
  ternary_decode_gathered_cuda(gathered.data<uint8_t>(), stride, num_workers, g.numel(), scaler.data<float>(),
                               g.data<float>(), stream_, bucket);
}

void CudaBackend::encode_f16_sum_impl(const Tensor* xs, int count, const Tensor& out) {
  const float* ptrs[kMaxCodecInputs];
  input_pointers(*this, xs, count, out, DType::kF16, "encode_f16_sum", ptrs);
  CudaDeviceGuard guard(index_);
  encode_f16_sum_cuda(ptrs, count, out.numel(), out.data<half_bits>(), stream_);
}

void CudaBackend::encode_f32_sum_impl(const Tensor* xs, int count, const Tensor& out) {
  const float* ptrs[kMaxCodecInputs];
  input_pointers(*this, xs, count, out, DType::kF32, "encode_f32_sum", ptrs);
  cc::not_a_later_input(xs, count, out, "encode_f32_sum");
  CudaDeviceGuard guard(index_);
  encode_f32_sum_cuda(ptrs, count, out.numel(), out.data<float>(), stream_);
}

void CudaBackend::average_f16_impl(const Tensor* xs, int count, const Tensor& out) {
  const float* ptrs[kMaxCodecInputs];
  input_pointers(*this, xs, count, out, DType::kF32, "average_f16", ptrs);
  CudaDeviceGuard guard(index_);
  average_f16_cuda(ptrs, count, out.numel(), out.data<float>(), stream_);
}

void CudaBackend::average_f32_impl(const Tensor* xs, int count, const Tensor& out) {
  const float* ptrs[kMaxCodecInputs];
  input_pointers(*this, xs, count, out, DType::kF32, "average_f32", ptrs);
  CudaDeviceGuard guard(index_);
  average_f32_cuda(ptrs, count, out.numel(), out.data<float>(), stream_);
}

void CudaBackend::decode_f16_sum_impl(const Tensor& sum, int num_workers, const Tensor& g) {
  const char* op = "decode_f16_sum";
  cc::dtype(g, DType::kF32, op, "g"), cc::dtype(sum, DType::kF16, op, "sum"), cc::numel(sum, g.numel(), op, "sum");
  check_on_device(g, op, "g"), check_on_device(sum, op, "sum");
  CudaDeviceGuard guard(index_);
  decode_f16_sum_cuda(sum.data<half_bits>(), g.numel(), num_workers, g.data<float>(), stream_);
}

void CudaBackend::decode_f32_sum_impl(const Tensor& sum, int num_workers, const Tensor& g) {
  const char* op = "decode_f32_sum";
  cc::dtype(g, DType::kF32, op, "g"), cc::dtype(sum, DType::kF32, op, "sum"), cc::numel(sum, g.numel(), op, "sum");
  check_on_device(g, op, "g"), check_on_device(sum, op, "sum");
  CudaDeviceGuard guard(index_);
  decode_f32_sum_cuda(sum.data<float>(), g.numel(), num_workers, g.data<float>(), stream_);
}

}  // namespace tg

// CudaBackend's gradient codec ops: the kernels of kernels/ternary_kernels.cu (terngrad/backend/ternary_cuda.h) on
// the backend's stream. The front (backend_front.cc) has checked every argument. Scalers stay on the
// device (the kernels read them there); nothing synchronizes. The scalers' per-chunk partial sums use the
// workspace arena (2.6 MB for a table of 64 tensors, reserved on first use).
#include <cstdint>

#include "src/backend/cuda/cuda_backend.h"
#include "terngrad/backend/cuda_check.h"
#include "terngrad/backend/ternary_cuda.h"

namespace tg {

static_assert(Backend::kMaxCodecInputs <= kCodecMaxInputsCuda, "the kernels' input array holds every input");

namespace {
// The workers' inputs as a host array of device pointers (the launcher copies it into the kernel's parameters).
void input_pointers(const Tensor* xs, int count, const float* (&ptrs)[Backend::kMaxCodecInputs]) {
  for (int w = 0; w < count; ++w) ptrs[w] = xs[w].data<float>();
}
}  // namespace

namespace {
// One scaler's tensors as the kernels take them (g is written only with a residual or a decayed parameter).
TernaryScalerCuda scaler_args(const Tensor& g, const Tensor& scaler, const Tensor& residual, const Tensor& decayed,
                              float decay, int64_t bucket) {
  return {const_cast<float*>(g.data<float>()),
          decayed ? decayed.data<float>() : nullptr,
          decay,
          residual ? residual.data<float>() : nullptr,
          g.numel(),
          scaler.data<float>(),
          bucket};
}
}  // namespace

void CudaBackend::ternary_scaler_impl(const Tensor& g, float clip_factor, const Tensor& scaler, const Tensor& residual,
                                      const Tensor& decayed, float decay, int64_t bucket) {
  const TernaryScalerCuda item = scaler_args(g, scaler, residual, decayed, decay, bucket);
  CudaDeviceGuard guard(index_);
  ternary_scaler_table_cuda(&item, 1, clip_factor, workspace(ternary_scaler_workspace_bytes_cuda()), stream());
}

// Tables of up to kScalerTableCuda tensors: 2 or 3 launches each.
void CudaBackend::ternary_scaler_many_impl(const TernaryScalerItem* items, int count, float clip_factor) {
  static_assert(Backend::kScalerTable <= kScalerTableCuda, "a table holds Backend::kScalerTable tensors");
  TernaryScalerCuda table[kScalerTableCuda];
  CudaDeviceGuard guard(index_);
  for (int first = 0; first < count; first += kScalerTableCuda) {
    const int m = count - first < kScalerTableCuda ? count - first : kScalerTableCuda;
    for (int k = 0; k < m; ++k) {
      const TernaryScalerItem& it = items[first + k];
      table[k] = scaler_args(it.g, it.scaler, it.residual, it.decayed, it.decay, it.bucket);
    }
    ternary_scaler_table_cuda(table, m, clip_factor, workspace(ternary_scaler_workspace_bytes_cuda()), stream());
  }
}

namespace {
// One encode's tensors as the kernels take them.
TernaryEncodeCuda encode_args(const Tensor& g, const Tensor& scaler, uint32_t tensor, const Tensor& packed,
                              const Tensor& zero_count, const Tensor& residual, int64_t bucket) {
  return {g.data<float>(),
          g.numel(),
          scaler.data<float>(),
          tensor,
          packed.data<uint8_t>(),
          zero_count ? zero_count.data<int32_t>() : nullptr,
          residual ? residual.data<float>() : nullptr,
          bucket};
}
}  // namespace

void CudaBackend::ternary_encode_impl(const Tensor& g, const Tensor& scaler, PhiloxKey key, uint32_t step,
                                      uint32_t tensor, const Tensor& packed, const Tensor& zero_count, int64_t bucket) {
  const TernaryEncodeCuda a = encode_args(g, scaler, tensor, packed, zero_count, Tensor(), bucket);
  CudaDeviceGuard guard(index_);
  ternary_encode_cuda(a.g, a.n, a.scaler, key, step, a.tensor, a.packed, a.zero_count, stream(), bucket);
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
      table[k] = encode_args(it.g, it.scaler, it.tensor, it.packed, it.zero_count, it.residual, it.bucket);
    }
    ternary_encode_table_cuda(table, m, key, step, stream());
  }
}

void CudaBackend::ternary_sum_codes_impl(const Tensor& packed, int64_t stride, int num_workers,
                                         const Tensor& code_sums) {
  CudaDeviceGuard guard(index_);
  ternary_sum_codes_cuda(packed.data<uint8_t>(), stride, num_workers, code_sums.numel(), code_sums.data<int8_t>(),
                         stream());
}

void CudaBackend::max_scalers_impl(const Tensor* xs, int count, const Tensor& out) {
  const float* ptrs[kMaxCodecInputs];
  input_pointers(xs, count, ptrs);
  CudaDeviceGuard guard(index_);
  max_scalers_cuda(ptrs, count, out.numel(), out.data<float>(), stream());
}

void CudaBackend::ternary_decode_sums_impl(const Tensor& code_sums, const Tensor& scaler, int num_workers,
                                           const Tensor& g, int64_t bucket) {
  CudaDeviceGuard guard(index_);
  ternary_decode_sums_cuda(code_sums.data<int8_t>(), g.numel(), scaler.data<float>(), num_workers, g.data<float>(),
                           stream(), bucket);
}

void CudaBackend::ternary_decode_gathered_impl(const Tensor& gathered, int64_t stride, int num_workers,
                                               const Tensor& scaler, const Tensor& g, int64_t bucket) {
  CudaDeviceGuard guard(index_);
  ternary_decode_gathered_cuda(gathered.data<uint8_t>(), stride, num_workers, g.numel(), scaler.data<float>(),
                               g.data<float>(), stream(), bucket);
}

void CudaBackend::encode_f16_sum_impl(const Tensor* xs, int count, const Tensor& out) {
  const float* ptrs[kMaxCodecInputs];
  input_pointers(xs, count, ptrs);
  CudaDeviceGuard guard(index_);
  encode_f16_sum_cuda(ptrs, count, out.numel(), out.data<half_bits>(), stream());
}

void CudaBackend::encode_f32_sum_impl(const Tensor* xs, int count, const Tensor& out) {
  const float* ptrs[kMaxCodecInputs];
  input_pointers(xs, count, ptrs);
  CudaDeviceGuard guard(index_);
  encode_f32_sum_cuda(ptrs, count, out.numel(), out.data<float>(), stream());
}

void CudaBackend::average_f16_impl(const Tensor* xs, int count, const Tensor& out) {
  const float* ptrs[kMaxCodecInputs];
  input_pointers(xs, count, ptrs);
  CudaDeviceGuard guard(index_);
  average_f16_cuda(ptrs, count, out.numel(), out.data<float>(), stream());
}

void CudaBackend::average_f32_impl(const Tensor* xs, int count, const Tensor& out) {
  const float* ptrs[kMaxCodecInputs];
  input_pointers(xs, count, ptrs);
  CudaDeviceGuard guard(index_);
  average_f32_cuda(ptrs, count, out.numel(), out.data<float>(), stream());
}

void CudaBackend::decode_f16_sum_impl(const Tensor& sum, int num_workers, const Tensor& g) {
  CudaDeviceGuard guard(index_);
  decode_f16_sum_cuda(sum.data<half_bits>(), g.numel(), num_workers, g.data<float>(), stream());
}

void CudaBackend::decode_f32_sum_impl(const Tensor& sum, int num_workers, const Tensor& g) {
  CudaDeviceGuard guard(index_);
  decode_f32_sum_cuda(sum.data<float>(), g.numel(), num_workers, g.data<float>(), stream());
}

}  // namespace tg

// CudaBackend's compute dtypes (mixed precision): which ones the device runs (supports_compute / why_not),
// cast between F32/F16/BF16 and unscale_and_check (kernels/cast_kernels.cu), and compute_dtype, the
// dtype check every op with activations makes before dispatching its kernels on that dtype.
#include <cuda_runtime.h>

#include <string>

#include "src/backend/cuda/cuda_backend.h"
#include "src/backend/cuda/cuda_kernels.h"
#include "terngrad/core/error.h"

namespace tg {

namespace {
bool is_float_dtype(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBf16; }
}  // namespace

DType compute_dtype(const char* op, const Tensor& x, std::initializer_list<const Tensor*> others) {
  const DType t = x.dtype();
  TG_CHECK(is_float_dtype(t), "{}: {} has dtype {}; the compute dtypes are f32, f16 and bf16", op, x.str(),
           dtype_name(t));
  for (const Tensor* o : others)
    TG_CHECK(!o->defined() || o->dtype() == t, "{}: {} and {} differ in dtype (one compute dtype per call)", op,
             x.str(), o->str());
  return t;
}

// fp16 tensor cores arrived with Volta (sm_70), bf16 with Ampere (sm_80); older devices would run the
// conversions but no fast math, so they are refused rather than run slowly.
bool CudaBackend::supports_compute(DType t) const {
  switch (t) {
    case DType::kF32:
      return true;
    case DType::kF16:
      return sm_ >= 70;
    case DType::kBf16:
      return sm_ >= 80;
    default:
      return false;
  }
}

std::string CudaBackend::why_not(DType t) const {
  if (supports_compute(t)) return "";
  switch (t) {
    case DType::kF16:
      return fmt::format("fp16 compute needs sm_70 or newer (tensor cores); {}", device_text_);
    case DType::kBf16:
      return fmt::format("bf16 compute needs sm_80 or newer (Ampere); {}", device_text_);
    default:
      return fmt::format("{} is not a compute dtype (f32, f16, bf16)", dtype_name(t));
  }
}

void CudaBackend::cast_impl(const Tensor& dst, const Tensor& src) {
  TG_CHECK(dst.numel() == src.numel(), "cast: {} and {} differ in element count", dst.str(), src.str());
  check_on_device(dst, "cast", "dst"), check_on_device(src, "cast", "src");
  compute_dtype("cast", dst, {}), compute_dtype("cast", src, {});
  if (dst.raw() == src.raw() && dst.dtype() == src.dtype()) return;
  CudaDeviceGuard guard(index_);
  cuda_kernels::cast(dst.dtype(), dst.raw(), src.dtype(), src.raw(), src.numel(), stream());
}

// Runs of pairs of one dtype pair (not the same dtype untransposed: those are copies) go out as tables of kCastTable
// pairs, one launch each; anything else one cast each.
void CudaBackend::cast_many_impl(const Tensor* dst, const Tensor* src, int count, const int64_t* transpose_rows) {
  static_assert(Backend::kCastTable == cuda_kernels::kCastTable, "one table size");
  CudaDeviceGuard guard(index_);
  cuda_kernels::CastTable table{};
  DType dt = DType::kF32, st = DType::kF32;
  auto flush = [&] {
    cuda_kernels::cast_table(dt, st, table, stream());
    table.count = 0;
  };
  for (int k = 0; k < count; ++k) {
    const int64_t rows = transpose_rows ? transpose_rows[k] : 0;
    const bool tabled = (dst[k].dtype() != src[k].dtype() || rows > 0) && dst[k].numel() > 0;
    if (table.count > 0 && (!tabled || dst[k].dtype() != dt || src[k].dtype() != st || table.count == kCastTable))
      flush();
    if (!tabled) {
      cast_impl(dst[k], src[k]);
      continue;
    }
    dt = dst[k].dtype(), st = src[k].dtype();
    table.src[table.count] = src[k].raw();
    table.dst[table.count] = dst[k].raw();
    table.n[table.count] = src[k].numel();
    table.rows[table.count] = rows;
    ++table.count;
  }
  if (table.count > 0) flush();
}

void CudaBackend::unscale_and_check_impl(const Tensor& src, float scale, const Tensor& dst, const Tensor& found) {
  TG_CHECK(dst.dtype() == DType::kF32 && dst.numel() == src.numel(),
           "unscale_and_check: dst {} must be f32 with the {} elements of src {}", dst.str(), src.numel(), src.str());
  TG_CHECK(found.dtype() == DType::kI32 && found.numel() == 1, "unscale_and_check: found {} must be i32 (1)",
           found.str());
  check_on_device(src, "unscale_and_check", "src"), check_on_device(dst, "unscale_and_check", "dst");
  check_on_device(found, "unscale_and_check", "found");
  compute_dtype("unscale_and_check", src, {});
  CudaDeviceGuard guard(index_);
  cuda_kernels::unscale_and_check(src.dtype(), src.raw(), scale, dst.data<float>(), found.data<int32_t>(), src.numel(),
                                  stream());
}

// Runs of items of one src dtype go out as tables of kUnscaleTable items, one launch each (decays included).
void CudaBackend::unscale_and_check_many_impl(const UnscaleItem* items, int count, float scale, const Tensor& found) {
  static_assert(Backend::kUnscaleTable == cuda_kernels::kUnscaleTable, "one table size");
  CudaDeviceGuard guard(index_);
  cuda_kernels::UnscaleTable table{};
  DType st = DType::kF32;
  auto flush = [&] {
    cuda_kernels::unscale_and_check_table(st, table, scale, found.data<int32_t>(), stream());
    table.count = 0;
  };
  for (int k = 0; k < count; ++k) {
    const UnscaleItem& it = items[k];
    if (it.src.numel() == 0) continue;
    compute_dtype("unscale_and_check_many", it.src, {});
    if (table.count > 0 && (it.src.dtype() != st || table.count == cuda_kernels::kUnscaleTable)) flush();
    st = it.src.dtype();
    table.src[table.count] = it.src.raw();
    table.dst[table.count] = it.dst.data<float>();
    table.decayed[table.count] = it.decayed ? it.decayed.data<float>() : nullptr;
    table.decay[table.count] = it.decayed ? it.decay : 0.f;
    table.n[table.count] = it.src.numel();
    table.rows[table.count] = it.transpose_rows;
    ++table.count;
  }
  if (table.count > 0) flush();
}

}  // namespace tg

// CpuBackend's compute dtypes: which ones this CPU runs (bf16 through oneDNN needs AVX512_BF16 or AMX, as
// dnnl::get_effective_cpu_isa reports it, so DNNL_MAX_CPU_ISA lowers it as it lowers oneDNN's kernels; fp16
// compute needs a GPU), and the two conversion ops of the mixed-precision step: cast and unscale_and_check.
#include <cmath>
#include <cstring>
#include <vector>

#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/cpu_dtype.h"
#include "src/backend/cpu/cpu_transpose.h"
#include "terngrad/core/half_convert.h"

namespace tg {

namespace {
bool isa_has(dnnl::cpu_isa have, dnnl::cpu_isa want) {
  const auto h = static_cast<unsigned>(have), w = static_cast<unsigned>(want);
  return (h & w) == w;
}

const char* isa_name(dnnl::cpu_isa isa) {
  using I = dnnl::cpu_isa;
  for (auto [i, name] : {std::pair{I::avx512_core_amx, "avx512_core_amx"},
                         {I::avx512_core_bf16, "avx512_core_bf16"},
                         {I::avx512_core_vnni, "avx512_core_vnni"},
                         {I::avx512_core, "avx512_core"},
                         {I::avx2_vnni, "avx2_vnni"},
                         {I::avx2, "avx2"},
                         {I::avx, "avx"},
                         {I::sse41, "sse41"}})
    if (isa_has(isa, i)) return name;
  return "no vector extension oneDNN uses";
}

constexpr int64_t kGrain = 16384;
}  // namespace

bool CpuBackend::supports_compute(DType t) const { return why_not(t).empty(); }

std::string CpuBackend::why_not(DType t) const {
  switch (t) {
    case DType::kF32:
      return "";
    case DType::kF16:
      return "fp16 compute needs a GPU (--device cuda); the CPU backend runs fp32 and bf16";
    case DType::kBf16: {
      const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
      if (isa_has(isa, dnnl::cpu_isa::avx512_core_bf16) || isa_has(isa, dnnl::cpu_isa::avx512_core_amx)) return "";
      return fmt::format("bf16 needs AVX512_BF16 or AMX; this CPU has {}", isa_name(isa));
    }
    default:
      return fmt::format("{} is not a compute dtype (fp32, fp16, bf16)", dtype_name(t));
  }
}

void CpuBackend::require_compute(DType t, const char* op) const {
  if (t == DType::kF32) return;
  const std::string why = why_not(t);
  TG_CHECK(why.empty(), "{}: {}", op, why);
}

void CpuBackend::cast_impl(const Tensor& dst, const Tensor& src) {
  if (dst.dtype() == src.dtype()) return copy_impl(dst, src);
  // fp32 <-> fp16: the bulk conversions (F16C, eight values an instruction; the element loop below converts one
  // at a time in software, ~30x slower: 1.4 s a step for the hierarchical exchange's --local_bits 16 on AlexNet).
  auto bulk = [&](auto* in, auto* out, auto convert) {
    parallel_for(
        src.numel(), [&](int64_t s, int64_t e) { convert(in + s, out + s, e - s); }, kGrain);
  };
  if (src.dtype() == DType::kF32 && dst.dtype() == DType::kF16)
    return bulk(src.data<float>(), dst.data<half_bits>(), floats_to_halves);
  if (src.dtype() == DType::kF16 && dst.dtype() == DType::kF32)
    return bulk(src.data<half_bits>(), dst.data<float>(), halves_to_floats);
  cpu::dispatch_compute(src.dtype(), "cast", [&](auto* src_type) {
    using S = std::remove_pointer_t<decltype(src_type)>;
    cpu::dispatch_compute(dst.dtype(), "cast", [&](auto* dst_type) {
      using D = std::remove_pointer_t<decltype(dst_type)>;
      const S* ps = static_cast<const S*>(src.raw());
      D* pd = static_cast<D*>(dst.raw());
      parallel_for(
          src.numel(),
          [&](int64_t s, int64_t e) {
            for (int64_t i = s; i < e; ++i) pd[i] = cpu::from_f32<D>(cpu::to_f32(ps[i]));
          },
          kGrain);
    });
  });
}

void CpuBackend::cast_many_impl(const Tensor* dst, const Tensor* src, int count, const int64_t* transpose_rows) {
  for (int k = 0; k < count; ++k) {
    const int64_t rows = transpose_rows ? transpose_rows[k] : 0;
    if (rows == 0) {
      cast_impl(dst[k], src[k]);
      continue;
    }
    // The converted values in src's order (src itself when the dtypes agree), then each element's bytes to its
    // transposed place.
    const int64_t n = src[k].numel(), cols = n / rows;
    const size_t es = dtype_size(dst[k].dtype());
    std::vector<unsigned char> converted;
    const unsigned char* in = static_cast<const unsigned char*>(src[k].raw());
    if (dst[k].dtype() != src[k].dtype()) {
      converted.resize(static_cast<size_t>(n) * es);
      cast_impl(Tensor(converted.data(), src[k].shape(), dst[k].dtype(), Device::cpu()), src[k]);
      in = converted.data();
    }
    cpu::transpose_elements(in, dst[k].raw(), rows, cols, es);
  }
}

void CpuBackend::unscale_and_check_many_impl(const UnscaleItem* items, int count, float scale, const Tensor& found) {
  for (int k = 0; k < count; ++k) {
    const UnscaleItem& it = items[k];
    if (it.transpose_rows == 0) {
      unscale_and_check_impl(it.src, scale, it.dst, found);
    } else {  // unscaled in src's order, then moved to the transposed places
      std::vector<float> unscaled(static_cast<size_t>(it.src.numel()));
      unscale_and_check_impl(it.src, scale, Tensor(unscaled.data(), it.src.shape(), DType::kF32, Device::cpu()), found);
      cpu::transpose_elements(unscaled.data(), it.dst.raw(), it.transpose_rows, it.src.numel() / it.transpose_rows,
                              sizeof(float));
    }
    if (it.decayed) axpy_impl(it.decay, it.decayed, it.dst);
  }
}

void CpuBackend::unscale_and_check_impl(const Tensor& src, float scale, const Tensor& dst, const Tensor& found) {
  float* pd = dst.data<float>();
  int32_t* flag = found.data<int32_t>();
  cpu::dispatch_compute(src.dtype(), "unscale_and_check", [&](auto* src_type) {
    using S = std::remove_pointer_t<decltype(src_type)>;
    const S* ps = static_cast<const S*>(src.raw());
    parallel_for(
        src.numel(),
        [&](int64_t s, int64_t e) {
          bool bad = false;
          for (int64_t i = s; i < e; ++i) {
            const float v = cpu::to_f32(ps[i]) * scale;
            pd[i] = v;
            bad |= !std::isfinite(v);
          }
          if (bad) __atomic_store_n(flag, 1, __ATOMIC_RELAXED);
        },
        kGrain);
  });
}

}  // namespace tg

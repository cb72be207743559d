// Temporary definitions of the compute-dtype part of the Backend contract on CUDA (backend.h, "Compute
// dtypes"): the backend runs F32 only and says so, and cast / unscale_and_check throw. The fp16/bf16 CUDA
// implementations replace this file.
#include <string>

#include "src/backend/cuda/cuda_backend.h"
#include "terngrad/core/error.h"

namespace tg {

bool CudaBackend::supports_compute(DType t) const { return t == DType::F32; }

std::string CudaBackend::why_not(DType t) const {
  if (supports_compute(t)) return "";
  return fmt::format("{} compute is not implemented on CUDA yet", dtype_name(t));
}

void CudaBackend::cast_impl(const Tensor& dst, const Tensor& src) {
  TG_THROW("cast {} -> {}: not implemented on CUDA yet", src.str(), dst.str());
}

void CudaBackend::unscale_and_check_impl(const Tensor& src, float, const Tensor&, const Tensor&) {
  TG_THROW("unscale_and_check of {}: not implemented on CUDA yet", src.str());
}

}  // namespace tg

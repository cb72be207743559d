// build_version(), build_libraries(): the --version text of the programs.
#include "terngrad/backend/build_info.h"

#include <fmt/format.h>

#include <dnnl.hpp>

#include "terngrad/core/gpu_status.h"
#include "tg_build_commit.h"  // TG_GIT_COMMIT, written at build time (cmake/build_commit.cmake)

#ifdef TG_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <cudnn_version.h>
#if __has_include(<nccl.h>)
#include <nccl.h>
#endif
#endif

#ifndef TG_VERSION
#define TG_VERSION "unknown"
#endif
#ifndef TG_BUILD_TYPE
#define TG_BUILD_TYPE "unknown"
#endif

namespace tg {

std::string build_version() {
#if defined(__clang__)
  const std::string compiler = fmt::format("Clang {}.{}.{}", __clang_major__, __clang_minor__, __clang_patchlevel__);
#elif defined(__GNUC__)
  const std::string compiler = fmt::format("GCC {}.{}.{}", __GNUC__, __GNUC_MINOR__, __GNUC_PATCHLEVEL__);
#else
  const std::string compiler = "an unknown compiler";
#endif
  return fmt::format("{} (commit {}, {} build, {})", TG_VERSION, TG_GIT_COMMIT, TG_BUILD_TYPE, compiler);
}

std::string build_libraries() {
  const dnnl_version_t* v = dnnl_version();
  std::string s = fmt::format("oneDNN {}.{}.{} (CPU)", v->major, v->minor, v->patch);
#ifdef TG_HAVE_CUDA
  s += fmt::format("; CUDA {}.{}, cuDNN {}.{}.{}", CUDART_VERSION / 1000, (CUDART_VERSION % 1000) / 10, CUDNN_MAJOR,
                   CUDNN_MINOR, CUDNN_PATCHLEVEL);
#ifdef NCCL_MAJOR
  s += fmt::format(", NCCL {}.{}.{}", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
#endif
  s += kGpuPathRunOnDevice
           ? std::string(" (compiled against; the GPU path has passed the device check)")
           : std::string(" (compiled against; the GPU path is unit-tested against the CPU but ") + kGpuNotYetRun + ")";
#else
  s += "; the CUDA backend is not built";
#endif
  return s;
}

}  // namespace tg

// Whether the GPU path has run on a GPU: the one switch behind every sentence the programs say about CUDA
// behaviour (the help of the flags marked kFlagGpu, `--version`, the notice a `--device cuda` run logs at start,
// and through `--version` the launchers' default device, scripts/lib/common.sh tg_default_device).
//
// It flips to true in one change when scripts/gpu_check.sh's correctness sections (not its speed ratios) pass on a
// device and their record is committed under bench/results/ (docs/gpu-check.md says how).
#pragma once

#include <string>

namespace tg {

inline constexpr bool kGpuPathRunOnDevice = false;
inline constexpr const char* kGpuNotYetRun = "not yet run on a GPU";

// " (GPU: not yet run on a GPU)" appended to what is said about CUDA behaviour; empty once the path has run.
inline std::string gpu_caveat() {
  return kGpuPathRunOnDevice ? std::string() : std::string(" (GPU: ") + kGpuNotYetRun + ")";
}

}  // namespace tg

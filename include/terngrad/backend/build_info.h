// What a binary was built from and with (--version of every program): the version, the commit, the build type,
// the compiler, and the libraries of the compute paths (oneDNN as loaded; CUDA, cuDNN and NCCL as compiled
// against, or that the CUDA backend is not built).
#pragma once

#include <string>

namespace tg {

// "0.1.0 (commit 06697e0a1b2c, Release, GCC 12.2.0)"
std::string build_version();
// "oneDNN 2.6.3; CUDA 13.0, cuDNN 9.12.0, NCCL 2.28.3 (compiled against; ...)" or "...; CUDA backend not built"
std::string build_libraries();

}  // namespace tg

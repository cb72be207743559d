// cuda_ops_check --versions: the CUDA stack this process actually loaded, for the first lines of a GPU run
// (scripts/gpu_check.sh) and for the bundle's check on a machine without a GPU (gpu_check.sh --verify): the CUDA
// runtime it was linked with (static), the driver (libcuda, loaded by the runtime when present), and cuDNN,
// cuBLAS/cuBLASLt and NCCL with their versions (and the CUDA each was built for, where it says) and the files they were
// loaded from (the loader's map of this process, /proc/self/maps: what LD_LIBRARY_PATH and the wheels' search really
// gave, not what a search expected). Needs no GPU; a missing driver is reported, not an error.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#ifdef TG_HAVE_NCCL
#include <nccl.h>
#endif

#include <cctype>
#include <cstdio>
#include <fstream>
#include <set>
#include <string>

#include "tools/cuda_ops_check.h"

namespace tg::ops_check {
namespace {

// The files of this process's mappings whose name starts with `prefix` (e.g. "libcudnn"), unique, in map order.
std::string loaded_files(const std::string& prefix) {
  std::ifstream maps("/proc/self/maps");
  std::string line, out;
  std::set<std::string> seen;
  while (std::getline(maps, line)) {
    const size_t slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    const std::string base = path.substr(path.rfind('/') + 1);
    if (base.compare(0, prefix.size(), prefix) != 0 || !seen.insert(path).second) continue;
    out += (out.empty() ? "" : ", ") + path;
  }
  return out.empty() ? "(not loaded)" : out;
}

// The CUDA version a libnccl file was built for, from the banner it carries ("NCCL version 2.28.9+cuda13.0"): NCCL's
// API gives its own version only. "" when the file has no such banner (or cannot be read).
std::string nccl_built_for_cuda(const std::string& files) {
  const std::string path = files.substr(0, files.find(", "));
  std::ifstream in(path, std::ios::binary);
  const std::string mark = "NCCL version ";
  std::string window, chunk(1 << 20, '\0');
  while (in.read(&chunk[0], static_cast<std::streamsize>(chunk.size())) || in.gcount() > 0) {
    window.append(chunk, 0, static_cast<size_t>(in.gcount()));
    for (size_t at = window.find(mark); at != std::string::npos; at = window.find(mark, at + 1)) {
      const size_t plus = window.find("+cuda", at);
      if (plus == std::string::npos || plus - at > 40) continue;
      size_t end = plus + 5;
      while (end < window.size() && (std::isdigit(static_cast<unsigned char>(window[end])) || window[end] == '.'))
        ++end;
      if (end < window.size()) return window.substr(plus + 5, end - plus - 5);
    }
    window.erase(0, window.size() > 64 ? window.size() - 64 : 0);  // a banner cut by the chunk's end stays whole
  }
  return "";
}

std::string dotted(int v, int major_div, int minor_div, int minor_mod) {
  return fmt::format("{}.{}.{}", v / major_div, (v / minor_div) % minor_mod, v % minor_div);
}

}  // namespace

int print_versions() {
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  const cudaError_t ds = cudaDriverGetVersion(&driver);
  std::printf("CUDA runtime %d.%d (linked statically, built with %d.%d)\n", runtime / 1000, (runtime % 1000) / 10,
              CUDART_VERSION / 1000, (CUDART_VERSION % 1000) / 10);
  if (ds != cudaSuccess || driver == 0)
    std::printf("CUDA driver: none loaded (%s)\n", ds != cudaSuccess ? cudaGetErrorString(ds) : "no libcuda.so.1");
  else
    std::printf("CUDA driver API %d.%d: %s\n", driver / 1000, (driver % 1000) / 10, loaded_files("libcuda.so").c_str());
  int devices = 0;
  const cudaError_t cs = cudaGetDeviceCount(&devices);
  if (cs != cudaSuccess) cudaGetLastError();
  std::printf("CUDA devices: %d%s\n", cs == cudaSuccess ? devices : 0,
              cs == cudaSuccess ? "" : (std::string(" (") + cudaGetErrorString(cs) + ")").c_str());
  const size_t cudnn = cudnnGetVersion();
  std::printf("cuDNN %s (built with %d.%d.%d, for CUDA runtime %zu): %s\n",
              dotted(static_cast<int>(cudnn), 10000, 100, 100).c_str(), CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL,
              cudnnGetCudartVersion(), loaded_files("libcudnn").c_str());
  int major = 0, minor = 0, patch = 0;
  cublasGetProperty(MAJOR_VERSION, &major);
  cublasGetProperty(MINOR_VERSION, &minor);
  cublasGetProperty(PATCH_LEVEL, &patch);
  std::printf("cuBLAS %d.%d.%d (built with %d.%d.%d): %s\n", major, minor, patch, CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR,
              CUBLAS_VER_PATCH, loaded_files("libcublas").c_str());
#ifdef TG_HAVE_NCCL
  int nccl = 0;
  ncclGetVersion(&nccl);
  const std::string nccl_files = loaded_files("libnccl");
  const std::string nccl_cuda = nccl_built_for_cuda(nccl_files);
  std::printf("NCCL %s (built with %d.%d.%d, for CUDA %s): %s\n", dotted(nccl, 10000, 100, 100).c_str(), NCCL_MAJOR,
              NCCL_MINOR, NCCL_PATCH, nccl_cuda.empty() ? "unknown" : nccl_cuda.c_str(), nccl_files.c_str());
#else
  std::printf("NCCL: not linked (this build found no NCCL)\n");
#endif
  return 0;
}

}  // namespace tg::ops_check

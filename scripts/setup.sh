#!/usr/bin/env bash
# Installs the Debian packages terngrad needs to build, test and run its demo: idempotent, no prompts,
# run as root on a fresh machine. Installs nothing else (the CUDA toolkit is expected in /usr/local/cuda;
# its absence only disables the CUDA backend). Benchmark peers (PyTorch) are installed by
# bench/setup_peers.sh, not here.
set -euo pipefail

packages=(
  build-essential cmake pkg-config git python3
  libdnnl-dev            # oneDNN 2.6: CPU convolution, pooling, LRN, batch norm, inner product
  libcli11-dev           # command-line parsing
  libspdlog-dev libfmt-dev
  libprotobuf-dev protobuf-compiler
  libturbojpeg0-dev      # JPEG decode/encode (TurboJPEG API)
  libpng-dev zlib1g-dev  # PNG, idx.gz
  libopenmpi-dev openmpi-bin
  libgtest-dev libgmock-dev libbenchmark-dev
  dataset-fashion-mnist  # real data for the accuracy tests and the demo
  clang libclang-rt-dev libomp-dev  # scripts/fuzz.sh: libFuzzer + sanitizer runtimes, OpenMP for clang
  llvm                   # llvm-symbolizer: file:line in sanitizer and fuzzer reports
  clang-format-14        # scripts/check_format.sh (ctest clang_format)
  shellcheck             # scripts/check_scripts.sh (ctest scripts)
  xz-utils               # scripts/gpu_check.sh --prepare: the GPU bundle (ctest gpu_bundle)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "setup: missing packages (${missing[*]}); run this script as root" >&2
  exit 1
fi

echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "setup: done"

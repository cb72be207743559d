#!/usr/bin/env bash
# Installs the Debian packages terngrad needs to build, test and run its demo, the Python package its tests
# read results with (tensorboard, from PyPI: tests/event_writer_test.cc opens our event files with TensorBoard's
# own reader), matplotlib (scripts/plot_runs.py, the demo's figure) and the Python venv of the ONNX export test
# (TG_ONNX_VENV, default /opt/terngrad-venv: numpy, onnx, onnxruntime from PyPI, pinned): idempotent, no prompts,
# run as root on a fresh machine. Installs nothing else (the CUDA toolkit is expected in /usr/local/cuda; its
# absence only disables the CUDA backend). Benchmark peers (PyTorch) are installed by bench/setup_peers.sh, not
# here.
set -euo pipefail

packages=(
  build-essential cmake pkg-config git python3 python3-pip
  python3-venv           # the venv of the ONNX export test (below)
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
  iproute2 iputils-ping  # scripts/fault_test.sh elastic: emulated machines (ip netns) and the launcher's probe
  python3-torch python3-torchvision  # PyTorch for /usr/bin/python3: terngrad-import's logit test (ctest torch_import)
)

# The ONNX export test's packages (tests/onnx_export_test.py, ctest onnx_export), in their own venv. Without
# them that test reports SKIPPED (and fails under CI=true): a failed install is a warning here, not an error.
venv=${TG_ONNX_VENV:-/opt/terngrad-venv}
python_packages=(numpy==2.4.6 protobuf==7.36.2 onnx==1.23.2 onnxruntime==1.31.1)
setup_venv() {
  local have
  have=$("$venv/bin/python3" -c 'import numpy, google.protobuf, onnx, onnxruntime as o
print(" ".join(["numpy==" + numpy.__version__, "protobuf==" + google.protobuf.__version__,
                "onnx==" + onnx.__version__, "onnxruntime==" + o.__version__]))' 2>/dev/null || true)
  if [ "$have" = "${python_packages[*]}" ]; then
    echo "setup: $venv has ${python_packages[*]}"
    return 0
  fi
  if [ "$(id -u)" -ne 0 ] && [ ! -w "$(dirname "$venv")" ]; then
    echo "setup: warning: $venv lacks ${python_packages[*]}; run this script as root" >&2
    return 0
  fi
  echo "setup: installing ${python_packages[*]} into $venv"
  if ! { python3 -m venv "$venv" && "$venv/bin/pip" install --quiet --disable-pip-version-check \
    "${python_packages[@]}"; }; then
    echo "setup: warning: could not install ${python_packages[*]} into $venv (the ctest onnx_export will" \
      "report SKIPPED, or fail under CI=true)" >&2
  fi
}

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
else
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing packages (${missing[*]}); run this script as root" >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# The python3 on PATH is the one the tests run.
if python3 -c 'import tensorboard' 2>/dev/null; then
  echo "setup: python3 tensorboard present"
else
  echo "setup: installing python3 tensorboard (PyPI)"
  python3 -m pip install --quiet --disable-pip-version-check tensorboard ||
    python3 -m pip install --quiet --disable-pip-version-check --break-system-packages tensorboard
fi
# matplotlib for scripts/plot_runs.py (the demo's figure, ctest plot_runs): Debian's package when that python3 is
# Debian's, else from PyPI as tensorboard.
if python3 -c 'import matplotlib' 2>/dev/null; then
  echo "setup: python3 matplotlib present"
elif [ "$(python3 -c 'import sys; print(sys.prefix)')" = /usr ] && [ "$(id -u)" -eq 0 ]; then
  echo "setup: installing python3-matplotlib"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends python3-matplotlib ||
    { apt-get update -q && apt-get install -y -q --no-install-recommends python3-matplotlib; }
else
  echo "setup: installing python3 matplotlib (PyPI)"
  python3 -m pip install --quiet --disable-pip-version-check matplotlib ||
    python3 -m pip install --quiet --disable-pip-version-check --break-system-packages matplotlib
fi
setup_venv
echo "setup: done"

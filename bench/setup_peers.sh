#!/usr/bin/env bash
# Installs the peer the CPU benchmarks compare against: PyTorch 1.13 and torchvision from Debian
# (python3-torch, python3-torchvision), with OpenBLAS (libopenblas0-pthread) as the system BLAS: without it
# Debian's PyTorch falls back to the reference BLAS for its fully connected layers and small 1x1 convolutions,
# which would make it an unfairly weak peer. Needs root (or sudo). Idempotent. The packages install into
# Debian's interpreter (/usr/bin/python3), which bench/run_benchmarks.sh uses; override with PYTHON=...
set -euo pipefail
PYTHON=${PYTHON:-/usr/bin/python3}
check='import torch, torchvision; print("torch", torch.__version__, "torchvision", torchvision.__version__)'
if "$PYTHON" -c "$check" 2>/dev/null && dpkg -s libopenblas0-pthread >/dev/null 2>&1; then exit 0; fi
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends python3-torch python3-torchvision libopenblas0-pthread
"$PYTHON" -c "$check"

#!/usr/bin/env bash
# Installs the peer the CPU benchmarks compare against. By default (--pypi) the PyTorch a user installs today:
# torch from PyPI (version TORCH_VERSION, default 2.15.0; the PyPI wheel brings its CUDA libraries, several GB)
# in a virtual environment outside the repository, VENV (default /opt/terngrad-peers-venv), made with Debian's
# python3 -m venv; every benchmark's peer runs there (bench/lib/peer_python.sh).
#
# --debian: instead (or with --pypi as well), PyTorch 1.13 and torchvision from Debian (python3-torch,
# python3-torchvision), with OpenBLAS (libopenblas0-pthread) as the system BLAS: without it Debian's PyTorch
# falls back to the reference BLAS for its fully connected layers and small 1x1 convolutions, which would make it
# an unfairly weak peer. They install into Debian's interpreter (/usr/bin/python3), which the benchmarks use with
# TG_PEER=debian (bench/tta_bench.sh: --debian-torch). Needs root (or sudo). Idempotent.
#   bench/setup_peers.sh                    the PyPI venv
#   bench/setup_peers.sh --debian           Debian's PyTorch 1.13 only
#   bench/setup_peers.sh --pypi --debian    both
set -euo pipefail
DEBIAN=0
PYPI=1
[ $# -gt 0 ] && PYPI=0
for arg in "$@"; do
  case "$arg" in
    --pypi) PYPI=1 ;;
    --debian) DEBIAN=1 ;;
    -h | --help)
      sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    *)
      echo "setup_peers.sh: unknown option $arg (--pypi, --debian)" >&2
      exit 2
      ;;
  esac
done
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive

if [ "$DEBIAN" = 1 ]; then
  PYTHON=${PYTHON:-/usr/bin/python3}
  check='import torch, torchvision; print("torch", torch.__version__, "torchvision", torchvision.__version__)'
  if ! { "$PYTHON" -c "$check" 2>/dev/null && dpkg -s libopenblas0-pthread >/dev/null 2>&1; }; then
    $SUDO apt-get update
    $SUDO apt-get install -y --no-install-recommends python3-torch python3-torchvision libopenblas0-pthread
    "$PYTHON" -c "$check"
  fi
fi

if [ "$PYPI" = 1 ]; then
  VENV=${VENV:-/opt/terngrad-peers-venv}
  TORCH_VERSION=${TORCH_VERSION:-2.15.0}
  check='import torch, torchvision, torch.distributed as d; assert d.is_gloo_available(); print("torch", torch.__version__, "torchvision", torchvision.__version__, "in", torch.__file__)'
  if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import numpy, torch, torchvision, sys; sys.exit(torch.__version__.split('+')[0] != '$TORCH_VERSION')" 2>/dev/null; then
    "$VENV/bin/python" -c "$check"
    exit 0
  fi
  if ! /usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null; then
    $SUDO apt-get update
    $SUDO apt-get install -y --no-install-recommends python3-venv
  fi
  $SUDO /usr/bin/python3 -m venv "$VENV"
  $SUDO "$VENV/bin/python" -m pip install --upgrade pip
  # numpy: torch imports without it but warns at every start; torchvision: the peers' AlexNet and ResNet-50 (pip
  # picks the release built for this torch).
  $SUDO "$VENV/bin/python" -m pip install "torch==$TORCH_VERSION" torchvision numpy
  "$VENV/bin/python" -c "$check"
fi

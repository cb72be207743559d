#!/usr/bin/env bash
# The test command (what .ci/run calls): install missing packages, configure, build everything (the CUDA
# backend too when nvcc is present), run every test with ctest. Tests that need a GPU or an MPI launcher
# report SKIPPED without one. Usage: scripts/test.sh [build-dir]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
jobs=${TG_JOBS:-$(nproc)}

if [ "$(id -u)" -eq 0 ]; then
  bash scripts/setup.sh
fi

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTG_CUDA=AUTO
cmake --build "$build" -j "$jobs"
cd "$build"
ctest --output-on-failure -j "$jobs" --timeout 900

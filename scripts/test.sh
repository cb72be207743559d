#!/usr/bin/env bash
# The test command (what .ci/run calls): install missing packages, configure, build everything (the CUDA
# backend too when nvcc is present), run every test with ctest, then list every skipped test with its reason
# (scripts/skipped_tests.py). Tests that need a GPU or an MPI launcher report SKIPPED without one; under
# CI=true only a hardware reason (no GPU, no AVX512_BF16/AMX) may skip, any other skip fails this command.
# Usage: scripts/test.sh [build-dir]              (default: build)
#        scripts/test.sh --sanitize [build-dir]   (default: build-sanitize) ASan + UBSan, no recovery, CUDA
#        off; the tests labelled "heavy" (tests/CMakeLists.txt TG_HEAVY_TESTS says which and why) are left out
#        unless TG_SANITIZE_HEAVY=1. Suppressions of third-party code: tests/sanitizers/ (each with its reason).
set -euo pipefail
cd "$(dirname "$0")/.."
sanitize=0
if [ "${1:-}" = "--sanitize" ]; then
  sanitize=1
  shift
fi
jobs=${TG_JOBS:-$(nproc)}

if [ "$(id -u)" -eq 0 ]; then
  bash scripts/setup.sh
fi

if [ "$sanitize" -eq 0 ]; then
  build=${1:-build}
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTG_CUDA=AUTO
  cmake --build "$build" -j "$jobs"
  status=0
  (cd "$build" && ctest --output-on-failure -j "$jobs" --timeout 900 --output-log ctest.log) || status=$?
  python3 scripts/skipped_tests.py "$build" || status=$((status ? status : 1))
  exit "$status"
fi

build=${1:-build-sanitize}
supp=$(pwd)/tests/sanitizers
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTG_SANITIZE=ON -DTG_CUDA=OFF -DTG_BUILD_BENCH=OFF
cmake --build "$build" -j "$jobs"
# ASan: leaks checked at exit (LeakSanitizer) with the suppressions of tests/sanitizers/lsan.supp (Open MPI);
#   fast_unwind_on_malloc=0: Open MPI's libraries have no frame pointers, so only the slow unwinder gives
#   leak stacks that reach the library frames the suppressions name.
# UBSan: every report is fatal (the build has -fno-sanitize-recover=all), with its stack.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:fast_unwind_on_malloc=0:check_initialization_order=1:strict_init_order=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$supp/lsan.supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
exclude=() heavy=""
if [ "${TG_SANITIZE_HEAVY:-0}" != 1 ]; then
  exclude=(-LE heavy)
  # Listed before the run: `ctest -N` rewrites Testing/Temporary/LastTest.log, which skipped_tests.py reads.
  heavy=$(cd "$build" && ctest -N -L heavy | sed -n 's/^ *Test *#[0-9]*: //p' | tr '\n' ' ')
fi
status=0
(cd "$build" && ctest --output-on-failure -j "$jobs" --timeout 900 --output-log ctest.log "${exclude[@]}") || status=$?
python3 scripts/skipped_tests.py "$build" || status=$((status ? status : 1))
[ -z "$heavy" ] || echo "left out (label heavy; TG_SANITIZE_HEAVY=1 runs them): $heavy"
exit "$status"

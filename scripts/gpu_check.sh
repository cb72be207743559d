#!/usr/bin/env bash
# The one prepared check for a lent GPU machine: configure a Release build for sm_90 (H100/H200), build the
# CUDA test programs, run them, and print a summary. Logs and GoogleTest XML go to $OUT (if set, else
# build-gpu/gpu_check). Usage: scripts/gpu_check.sh [extra gtest args, e.g. --gtest_filter=CudaBackendTest.*]
# Environment: BUILD_DIR (build-gpu), JOBS (nproc), TEST_TIMEOUT (seconds per test program, 240),
#              BUILD_TIMEOUT (seconds, 420), GPU_TESTS (test targets; default: every tests/*cuda*_test.cc).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build-gpu}"
JOBS="${JOBS:-$(nproc)}"
TEST_TIMEOUT="${TEST_TIMEOUT:-240}"
BUILD_TIMEOUT="${BUILD_TIMEOUT:-420}"
LOG_DIR="${OUT:-$BUILD_DIR/gpu_check}"
mkdir -p "$LOG_DIR"

if [[ -z "${GPU_TESTS:-}" ]]; then
  GPU_TESTS="$(cd "$ROOT/tests" && ls *cuda*_test.cc 2>/dev/null | sed 's/\.cc$//' | tr '\n' ' ')"
fi
[[ -n "$GPU_TESTS" ]] || { echo "gpu_check: no tests/*cuda*_test.cc found" >&2; exit 2; }

echo "== device"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee "$LOG_DIR/device.txt" || true

echo "== configure ($BUILD_DIR)"
cmake -S "$ROOT" -B "$BUILD_DIR" -DTG_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release \
  -DTG_BUILD_BENCH=OFF >"$LOG_DIR/configure.log" 2>&1 || { tail -30 "$LOG_DIR/configure.log"; exit 1; }

echo "== build: $GPU_TESTS (-j$JOBS, limit ${BUILD_TIMEOUT}s)"
# shellcheck disable=SC2086
if ! timeout "$BUILD_TIMEOUT" cmake --build "$BUILD_DIR" -j"$JOBS" --target $GPU_TESTS >"$LOG_DIR/build.log" 2>&1; then
  grep -E "error|Error" "$LOG_DIR/build.log" | head -40 || tail -40 "$LOG_DIR/build.log"
  echo "gpu_check: BUILD FAILED (log: $LOG_DIR/build.log)"
  exit 1
fi

status=0
summary=()
for t in $GPU_TESTS; do
  echo "== run $t (limit ${TEST_TIMEOUT}s)"
  rc=0
  timeout "$TEST_TIMEOUT" "$BUILD_DIR/tests/$t" --gtest_output="xml:$LOG_DIR/$t.xml" "$@" \
    >"$LOG_DIR/$t.log" 2>&1 || rc=$?
  grep -E "^\[  (FAILED|SKIPPED) |^\[  PASSED|^\[==========\]" "$LOG_DIR/$t.log" | sed 's/^/   /' || true
  passed=$(grep -oP '^\[  PASSED  \] \K[0-9]+' "$LOG_DIR/$t.log" || echo 0)
  skipped=$(grep -oP '^\[  SKIPPED \] \K[0-9]+(?= test)' "$LOG_DIR/$t.log" || echo 0)
  failed=$(grep -oP '^\[  FAILED  \] \K[0-9]+(?= test)' "$LOG_DIR/$t.log" || echo 0)
  if [[ $rc -eq 124 ]]; then
    summary+=("$t: TIMED OUT after ${TEST_TIMEOUT}s"); status=1
  elif [[ $rc -ne 0 ]]; then
    summary+=("$t: FAILED (exit $rc): $passed passed, $failed failed, $skipped skipped"); status=1
    grep -B2 -A8 "Failure" "$LOG_DIR/$t.log" | head -60 || true
  else
    summary+=("$t: ok: $passed passed, $skipped skipped")
  fi
done

echo "== summary (logs in $LOG_DIR)"
printf '  %s\n' "${summary[@]}"
exit $status

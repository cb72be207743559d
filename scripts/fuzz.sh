#!/usr/bin/env bash
# Builds (if needed) and runs every libFuzzer target of tests/fuzz for SECONDS each (default 30), one after
# another: first a replay of tests/fuzz/regressions/<target>/ (inputs that once failed), then fuzzing from
# tests/fuzz/corpus/<target>/ plus a work corpus build-fuzz/corpus/<target>/ (kept between runs). libFuzzer
# runs in fork mode with crashes, timeouts and OOMs counted and ignored, so one finding does not hide the next;
# every failing input is copied to build-fuzz/crashes/<target>/. Prints executions, crashes, timeouts and OOMs
# per target and in total; exits 1 when there was any finding.
# Usage: scripts/fuzz.sh [SECONDS]     env: TG_FUZZ_BUILD (build-fuzz), TG_FUZZ_TARGETS ("tfrecord image ..."),
#        TG_JOBS (build jobs, default nproc), TG_FUZZ_ARGS (extra libFuzzer flags)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
build=${TG_FUZZ_BUILD:-build-fuzz}
jobs=${TG_JOBS:-$(nproc)}
limits=(-rss_limit_mb=2048 -timeout=10)

if [ ! -f "$build/CMakeCache.txt" ]; then
  CC=${TG_FUZZ_CC:-clang} CXX=${TG_FUZZ_CXX:-clang++} cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DTG_FUZZ=ON -DTG_CUDA=OFF -DTG_BUILD_TESTS=OFF -DTG_BUILD_BENCH=OFF >/dev/null
fi
cmake --build "$build" --target fuzz_targets -j "$jobs" >"$build/fuzz-build.log" 2>&1 ||
  { tail -40 "$build/fuzz-build.log"; echo "fuzz: build failed ($build/fuzz-build.log)" >&2; exit 2; }

targets=${TG_FUZZ_TARGETS:-$(cd tests/fuzz && ls ./*_fuzz.cc | sed 's|^\./||; s|_fuzz\.cc$||')}
# Leaks are findings too; a symbolized stack names the faulting line.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
command -v llvm-symbolizer >/dev/null || export ASAN_SYMBOLIZER_PATH=/usr/lib/llvm-14/bin/llvm-symbolizer

printf '%-12s %8s %12s %10s %8s %9s %6s\n' target seconds executions exec/s crashes timeouts ooms
total_exec=0 total_find=0
for t in $targets; do
  bin="$build/fuzz/${t}_fuzz"
  work="$build/corpus/$t" crashes="$build/crashes/$t" logs="$build/logs/$t"
  mkdir -p "$work" "$crashes" "$logs"
  crash=0 timeout=0 oom=0
  # 1. replay the saved regressions: each must now pass
  for f in tests/fuzz/regressions/"$t"/*; do
    [ -f "$f" ] || continue
    if ! "$bin" "${limits[@]}" "$f" >"$logs/replay.log" 2>&1; then
      cp "$f" "$crashes/"
      if grep -q "out-of-memory\|malloc(.*) exceeds" "$logs/replay.log"; then oom=$((oom + 1));
      elif grep -q "ERROR: libFuzzer: timeout" "$logs/replay.log"; then timeout=$((timeout + 1));
      else crash=$((crash + 1)); fi
      echo "fuzz: $t: regression $f fails:" >&2
      grep -m3 "ERROR: \|SUMMARY: \|terminate called\|what()" "$logs/replay.log" >&2 || tail -3 "$logs/replay.log" >&2
    fi
  done
  # 2. fuzz: fork mode with one job, findings counted and ignored
  seeds=()
  [ -d "tests/fuzz/corpus/$t" ] && seeds+=("tests/fuzz/corpus/$t")
  start=$(date +%s)
  "$bin" "${limits[@]}" -max_total_time="$seconds" -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
    -artifact_prefix="$crashes/" ${TG_FUZZ_ARGS:-} "$work" "${seeds[@]}" >"$logs/fuzz.log" 2>&1 || true
  elapsed=$(($(date +%s) - start))
  # Fork mode shows only the first line of a finding: replay each new input for its stack and summary.
  for f in "$crashes"/crash-* "$crashes"/timeout-* "$crashes"/oom-* "$crashes"/leak-*; do
    [ -f "$f" ] && [ ! -f "$logs/$(basename "$f").log" ] || continue
    "$bin" "${limits[@]}" "$f" >"$logs/$(basename "$f").log" 2>&1 || true
    echo "fuzz: $t: $f: $(grep -m1 -E 'SUMMARY: |ERROR: libFuzzer|terminate called|what\(\)' \
      "$logs/$(basename "$f").log" || echo 'no report on replay')" >&2
  done
  # The fork-mode parent's status lines: "#<execs>: cov: .. oom/timeout/crash: O/T/C time: ..".
  last=$(grep -E '^#[0-9]+: cov:' "$logs/fuzz.log" | tail -1 || true)
  execs=$(sed -nE 's/^#([0-9]+):.*/\1/p' <<<"$last")
  read -r o tmo c < <(sed -nE 's|.*oom/timeout/crash: ([0-9]+)/([0-9]+)/([0-9]+).*|\1 \2 \3|p' <<<"$last") || true
  execs=${execs:-0}
  oom=$((oom + ${o:-0})) timeout=$((timeout + ${tmo:-0})) crash=$((crash + ${c:-0}))
  if [ "$execs" -eq 0 ]; then  # the target did not even start fuzzing
    echo "fuzz: $t: no executions; log $logs/fuzz.log:" >&2
    tail -20 "$logs/fuzz.log" >&2
    crash=$((crash + 1))
  fi
  printf '%-12s %8d %12d %10d %8d %9d %6d\n' "$t" "$elapsed" "$execs" $((execs / (elapsed > 0 ? elapsed : 1))) \
    "$crash" "$timeout" "$oom"
  total_exec=$((total_exec + execs)) total_find=$((total_find + crash + timeout + oom))
done
printf '%-12s %8s %12d %10s findings %d\n' total "" "$total_exec" "" "$total_find"
if [ "$total_find" -gt 0 ]; then
  echo "fuzz: findings: inputs in $build/crashes/, logs in $build/logs/" >&2
  exit 1
fi

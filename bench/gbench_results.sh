#!/usr/bin/env bash
# Runs one Google Benchmark executable of bench/ (codec_bench, data_pipeline_bench, train_step_bench) and writes
# its raw results as a results file (bench/lib/results.sh, kind gbench): one row per benchmark run or aggregate,
# with its name, real and CPU time and every user counter (images/s, allocs/step, GB/s, ...), after the
# provenance lines; then prints the table scripts/check_readme_results.py renders from it.
#
#   bench/gbench_results.sh -o FILE [-b BUILD_DIR] [-r REPETITIONS] BENCHMARK [BENCHMARK FLAGS...]
#
# BENCHMARK is the executable's name under BUILD_DIR/bench (default BUILD_DIR: build); -r (default 3) becomes
# --benchmark_repetitions, randomly interleaved, with the aggregates reported (the README quotes medians of at
# least 3). Build the
# executable first: cmake -S . -B build -DTG_BUILD_BENCH=ON && cmake --build build --target BENCHMARK.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib/results.sh
source "$HERE/lib/results.sh"
ARGS=("$@")
BUILD=build
REPS=3
OUT=""
usage() {
  sed -n '7,11p' "$0" >&2
  exit 2
}
while getopts "b:r:o:h" opt; do
  case $opt in
    b) BUILD=$OPTARG ;;
    r) REPS=$OPTARG ;;
    o) OUT=$OPTARG ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
if [ $# -lt 1 ] || [ -z "$OUT" ]; then usage; fi
[[ "$REPS" =~ ^[1-9][0-9]*$ ]] || { echo "gbench_results.sh: -r takes a positive integer" >&2; exit 2; }
BIN=$BUILD/bench/$1
shift
[ -x "$BIN" ] || { echo "gbench_results.sh: no $BIN (cmake --build $BUILD --target $(basename "$BIN"))" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results_header gbench "$BUILD" "$0" "${ARGS[@]}" >"$work/header"
echo "# repetitions: $REPS" >>"$work/header"
echo "# interleaved: random" >>"$work/header"
# Random interleaving: each repetition of each benchmark runs at a random point among the others', so a drift of
# the machine spreads over all of them instead of landing on one benchmark's back-to-back repetitions.
"$BIN" "$@" --benchmark_repetitions="$REPS" --benchmark_enable_random_interleaving=true \
  --benchmark_report_aggregates_only=false \
  --benchmark_out="$work/out.json" --benchmark_out_format=json >&2
python3 - "$work/out.json" >"$work/table" <<'PY'
import json, sys
runs = json.load(open(sys.argv[1]))["benchmarks"]
fixed = {"name", "family_index", "per_family_instance_index", "run_name", "run_type", "repetitions",
         "repetition_index", "threads", "iterations", "real_time", "cpu_time", "time_unit", "aggregate_name",
         "aggregate_unit", "label", "error_occurred", "error_message"}
counters = []
for r in runs:
    for k, v in r.items():
        if k not in fixed and isinstance(v, (int, float)) and k not in counters:
            counters.append(k)
print("\t".join(["name", "run_type", "aggregate", "repetition", "iterations", "real_time", "cpu_time", "time_unit"]
                + ["counter:" + c for c in counters]))
for r in runs:
    cells = [r["name"], r.get("run_type", ""), r.get("aggregate_name", "-") or "-", str(r.get("repetition_index", "-")),
             str(r.get("iterations", "")), repr(r.get("real_time", "")), repr(r.get("cpu_time", "")),
             r.get("time_unit", "")]
    cells += [repr(r[c]) if c in r else "-" for c in counters]
    print("\t".join(x.replace("\t", " ") for x in cells))
PY
results_commit "$work/header" "$work/table" "$OUT"
python3 "$HERE/../scripts/check_readme_results.py" --render "$OUT"

#!/usr/bin/env bash
# Runs the CPU training-step benchmarks of terngrad (bench/train_step_bench.cc) and of PyTorch
# (bench/pytorch_peers.py) on the same networks, batches and thread counts, interleaved (ours, then
# PyTorch's, for each network and thread count, repetition after repetition) so that load from other
# processes hits both alike. Writes every run to a results file (bench/lib/results.sh) and prints the table
# of median images/sec and the ratio ours / PyTorch rendered from it (scripts/check_readme_results.py).
#
#   bench/run_benchmarks.sh [-b BUILD_DIR] [-r REPS] [-n "lenet cifarnet ..."] [-t "1 2"] [-m MIN_SECONDS]
#                           [-o FILE]
#
# Defaults: -b build-bench, -r 3, -n "lenet cifarnet alexnet resnet50 inception_v3", -t "1 2", -m 3,
# -o bench/results/train_step.tsv (one line per run: repetition, net, threads, framework, images/sec, status).
# Needs the train_step_bench target built (cmake --build BUILD_DIR --target train_step_bench); without PyTorch
# (bench/setup_peers.sh) its rows say so. Environment is passed through unchanged to both (e.g. OMP_WAIT_POLICY).
set -euo pipefail
SCRIPT=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
ARGS=("$@")
cd "$(dirname "$0")/.."
# shellcheck source=lib/results.sh
source bench/lib/results.sh

BUILD="build-bench"
REPS=3
NETS="lenet cifarnet alexnet resnet50 inception_v3"
THREADS="1 2"
MIN=3
OUT=bench/results/train_step.tsv
# shellcheck source=lib/peer_python.sh
source bench/lib/peer_python.sh
PYTHON=$(peer_python)  # PyPI's PyTorch by default; TG_PEER=debian: Debian's 1.13
while getopts "b:r:n:t:m:o:h" opt; do
  case $opt in
    b) BUILD=$OPTARG ;;
    r) REPS=$OPTARG ;;
    n) NETS=$OPTARG ;;
    t) THREADS=$OPTARG ;;
    m) MIN=$OPTARG ;;
    o) OUT=$OPTARG ;;
    *) sed -n '2,15p' "$0"; exit 2 ;;
  esac
done

BENCH=$BUILD/bench/train_step_bench
[ -x "$BENCH" ] || { echo "run_benchmarks: $BENCH not built (cmake --build $BUILD --target train_step_bench)" >&2; exit 1; }
have_torch=1
"$PYTHON" -c 'import torch, torchvision' 2>/dev/null || {
  have_torch=0
  echo "run_benchmarks: PyTorch missing for $PYTHON (bench/setup_peers.sh): its rows will say so" >&2
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results_header train_step "$BUILD" "$SCRIPT" "${ARGS[@]}" > "$work/header"
peer_header_line "$PYTHON" >>"$work/header"
echo "# min_time: $MIN s per run; torch: $( ((have_torch)) && "$PYTHON" -c 'import torch; print(torch.__version__)' || echo missing)" >> "$work/header"
printf "rep\tnet\tthreads\tframework\timages_per_sec\tstatus\n" > "$work/table"
row() {  # rep net threads framework rate
  local status=ok rate=$5
  if [ "$rate" = error ]; then status=failed rate=-; fi
  if [ "$rate" = missing ]; then status=missing rate=-; fi
  printf "%s\t%s\t%s\t%s\t%s\t%s\n" "$1" "$2" "$3" "$4" "$rate" "$status" >> "$work/table"
}

ours() {  # net threads -> images/sec (or "error")
  local json
  json=$("$BENCH" --net="$1" --threads="$2" --benchmark_min_time="$MIN" --benchmark_format=json 2>/dev/null) ||
    { echo error; return; }
  "$PYTHON" -c '
import json, sys
b = json.loads(sys.stdin.read())["benchmarks"][0]
print("error" if b.get("error_occurred") else b["images/s"])' <<< "$json"
}

theirs() {  # net threads -> images/sec (or "error", or "missing")
  ((have_torch)) || { echo missing; return; }
  "$PYTHON" bench/pytorch_peers.py --net "$1" --threads "$2" --min_time "$MIN" --json 2>/dev/null |
    "$PYTHON" -c 'import json, sys; print(json.loads(sys.stdin.read())["images_per_sec"])' 2>/dev/null || echo error
}

for rep in $(seq 1 "$REPS"); do
  for net in $NETS; do
    for t in $THREADS; do
      a=$(ours "$net" "$t")
      row "$rep" "$net" "$t" terngrad "$a"
      b=$(theirs "$net" "$t")
      row "$rep" "$net" "$t" pytorch "$b"
      echo "rep $rep $net threads=$t: terngrad $a, pytorch $b images/s" >&2
    done
  done
done

results_commit "$work/header" "$work/table" "$OUT"
python3 scripts/check_readme_results.py --render "$OUT"

#!/usr/bin/env bash
# Runs the CPU training-step benchmarks of terngrad (bench/train_step_bench.cc) and of PyTorch
# (bench/pytorch_peers.py) on the same networks, batches and thread counts, interleaved (ours, then
# PyTorch's, for each network and thread count, repetition after repetition) so that load from other
# processes hits both alike; prints a markdown table of median images/sec and the ratio ours / PyTorch.
#
#   bench/run_benchmarks.sh [-b BUILD_DIR] [-r REPS] [-n "lenet cifarnet ..."] [-t "1 2"] [-m MIN_SECONDS]
#                           [-o RAW_TSV]
#
# Defaults: -b build-bench, -r 3, -n "lenet cifarnet alexnet resnet50 inception_v3", -t "1 2", -m 3,
# -o bench/results-<date>.tsv (one line per run: net, threads, framework, repetition, images/sec).
# Needs: the train_step_bench target built (cmake --build BUILD_DIR --target train_step_bench) and PyTorch
# (bench/setup_peers.sh). Environment is passed through unchanged to both (e.g. OMP_WAIT_POLICY).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=build-bench
REPS=3
NETS="lenet cifarnet alexnet resnet50 inception_v3"
THREADS="1 2"
MIN=3
OUT=bench/results-$(date +%Y%m%d-%H%M%S).tsv
PYTHON=${PYTHON:-/usr/bin/python3}
while getopts "b:r:n:t:m:o:h" opt; do
  case $opt in
    b) BUILD=$OPTARG ;;
    r) REPS=$OPTARG ;;
    n) NETS=$OPTARG ;;
    t) THREADS=$OPTARG ;;
    m) MIN=$OPTARG ;;
    o) OUT=$OPTARG ;;
    *) sed -n '2,14p' "$0"; exit 2 ;;
  esac
done

BENCH=$BUILD/bench/train_step_bench
[ -x "$BENCH" ] || { echo "run_benchmarks: $BENCH not built (cmake --build $BUILD --target train_step_bench)" >&2; exit 1; }
"$PYTHON" -c 'import torch, torchvision' 2>/dev/null ||
  { echo "run_benchmarks: PyTorch missing for $PYTHON (run bench/setup_peers.sh)" >&2; exit 1; }

echo "# $(date -Is) $(nproc) cpus, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')" >&2
printf "net\tthreads\tframework\trep\timages_per_sec\n" > "$OUT"

ours() {  # net threads -> images/sec (or "error")
  local json
  json=$("$BENCH" --net="$1" --threads="$2" --benchmark_min_time="$MIN" --benchmark_format=json 2>/dev/null) ||
    { echo error; return; }
  "$PYTHON" -c '
import json, sys
b = json.loads(sys.stdin.read())["benchmarks"][0]
print("error" if b.get("error_occurred") else b["images/s"])' <<< "$json"
}

theirs() {  # net threads -> images/sec (or "error")
  "$PYTHON" bench/pytorch_peers.py --net "$1" --threads "$2" --min_time "$MIN" --json 2>/dev/null |
    "$PYTHON" -c 'import json, sys; print(json.loads(sys.stdin.read())["images_per_sec"])' 2>/dev/null || echo error
}

for rep in $(seq 1 "$REPS"); do
  for net in $NETS; do
    for t in $THREADS; do
      a=$(ours "$net" "$t")
      printf "%s\t%s\tterngrad\t%s\t%s\n" "$net" "$t" "$rep" "$a" >> "$OUT"
      b=$(theirs "$net" "$t")
      printf "%s\t%s\tpytorch\t%s\t%s\n" "$net" "$t" "$rep" "$b" >> "$OUT"
      echo "rep $rep $net threads=$t: terngrad $a, pytorch $b images/s" >&2
    done
  done
done

"$PYTHON" - "$OUT" <<'EOF'
import statistics, sys
from collections import defaultdict
runs = defaultdict(list)
order = []
with open(sys.argv[1]) as f:
    next(f)
    for line in f:
        net, threads, fw, rep, rate = line.rstrip("\n").split("\t")
        if (net, threads) not in order:
            order.append((net, threads))
        if rate != "error":
            runs[(net, threads, fw)].append(float(rate))

def med(key):
    v = runs.get(key)
    return statistics.median(v) if v else None

def fmt(x):
    return "n/a" if x is None else (f"{x:.1f}" if x >= 10 else f"{x:.2f}")

print("| network | threads | terngrad images/s | PyTorch images/s | terngrad / PyTorch | runs |")
print("|---|---|---|---|---|---|")
for net, threads in order:
    a, b = med((net, threads, "terngrad")), med((net, threads, "pytorch"))
    ratio = f"{a / b:.2f}x" if a and b else "n/a"
    n = f"{len(runs.get((net, threads, 'terngrad'), []))}/{len(runs.get((net, threads, 'pytorch'), []))}"
    print(f"| {net} | {threads} | {fmt(a)} | {fmt(b)} | {ratio} | {n} |")
EOF
echo "raw results: $OUT" >&2

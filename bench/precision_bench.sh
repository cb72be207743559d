#!/usr/bin/env bash
# CPU mixed precision: terngrad-train --precision fp32 vs bf16 (whole training steps in benchmark mode: synthetic
# input, exchange, optimizer + EMA) next to PyTorch's CPU autocast bf16 (bench/pytorch_peers.py --precision), the
# same networks, batches and thread count, runs interleaved, medians of R repeats.
#   bench/precision_bench.sh [-b BUILD_DIR] [-n lenet,cifarnet,resnet50] [-r 3] [-t THREADS] [-s STEPS]
#                            [-o FILE]
# Writes every run to the results file (bench/lib/results.sh; default bench/results/precision.tsv) and prints
# one row per network: examples/s of ours fp32 / bf16, torch fp32 / bf16, and the ratios (medians). bf16 needs
# AVX512_BF16 or AMX (terngrad-train refuses it otherwise, naming the CPU's ISA; its rows say so). Without
# PyTorch the torch rows say so. -s overrides every net's steps (a smoke test). Run on a quiet machine.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib/bench.sh
source "$HERE/lib/bench.sh" # tg_die, results_*, tg_binary, bench_getopts
nets=lenet,cifarnet,resnet50
reps=3
threads=$(nproc)
steps_override=""
out=bench/results/precision.tsv
build_dir() { export BUILD_DIR; BUILD_DIR=$(cd "$1" && pwd); }
bench_getopts "b:n:r:t:s:o:" "usage: bench/precision_bench.sh [-b BUILD_DIR] [-n nets] [-r repeats] [-t threads] [-s steps] [-o FILE]" \
  "b=build_dir()" n=nets r=reps t=threads s=steps_override o=out -- "$@"
train=$(tg_binary terngrad-train)
# shellcheck source=lib/peer_python.sh
source "$HERE/lib/peer_python.sh"
PYTHON=$(peer_python)  # PyPI's PyTorch by default; TG_PEER=debian: Debian's 1.13
have_torch=1
"$PYTHON" -c "import torch" 2>/dev/null || have_torch=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# net -> "batch steps log_every" (steps after the first log window are the measured ones)
declare -A plan=([lenet]="64 300 50" [cifarnet]="128 60 10" [alexnet]="8 12 3" [resnet50]="8 12 3"
  [inception_v3]="8 9 3")

ours() {  # ours NET PRECISION -> examples/s (median of the trainer's log windows after the first), or nothing
  local net=$1 p=$2 b s l
  read -r b s l <<<"${plan[$net]}"
  if [ -n "$steps_override" ]; then s=$steps_override l=$(((s + 2) / 3)); fi
  rm -rf "$work/run"
  "$train" --benchmark_mode --net "$net" --dataset "$(dataset_of "$net")" --precision "$p" --threads "$threads" \
    --batch_size "$b" --max_steps "$s" --log_every "$l" --save_iter 100000000 --train_dir "$work/run" \
    >"$work/log" 2>&1 || { echo "terngrad-train --net $net --precision $p failed: $(tail -n 1 "$work/log")" >&2; return 0; }
  grep -oE 'median [0-9.]+ examples/sec' "$work/log" | awk '{print $2}'
}
dataset_of() { case $1 in lenet) echo mnist ;; cifarnet) echo cifar10 ;; *) echo imagenet ;; esac; }
torch_rate() {  # torch_rate NET PRECISION
  local b
  read -r b _ <<<"${plan[$1]}"
  "$PYTHON" "$HERE/pytorch_peers.py" --net "$1" --threads "$threads" --batch "$b" --precision "$2" --min_time 4 |
    grep -oE 'images/s=[0-9.]+' | cut -d= -f2
}
# row REP NET BATCH IMPL PRECISION RATE: one run into the results table ("" rate: the run failed or is missing)
row() {
  local status=ok
  if [ -z "$6" ]; then
    status=failed
    [ "$4" = torch ] && ((!have_torch)) && status=missing
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "${6:--}" "$status" >>"$work/table"
}
results_header precision "$BUILD_DIR" "$0" "${ARGS[@]}" >"$work/header"
peer_header_line "$PYTHON" >>"$work/header"
echo "# threads: $threads; torch: $( ((have_torch)) && "$PYTHON" -c 'import torch; print(torch.__version__)' || echo "missing ($PYTHON)")" >>"$work/header"
printf 'rep\tnet\tbatch\timpl\tprecision\timages_per_sec\tstatus\n' >"$work/table"

IFS=, read -ra list <<<"$nets"
for net in "${list[@]}"; do
  [[ -n "${plan[$net]:-}" ]] || tg_die "unknown network '$net' (lenet, cifarnet, alexnet, resnet50, inception_v3)"
  read -r b _ <<<"${plan[$net]}"
  for ((i = 1; i <= reps; i++)); do
    for p in fp32 bf16; do
      r=$(ours "$net" "$p")
      row "$i" "$net" "$b" ours "$p" "$r"
    done
    for p in fp32 bf16; do
      r=""
      ((have_torch)) && r=$(torch_rate "$net" "$p" || true)
      row "$i" "$net" "$b" torch "$p" "$r"
    done
  done
done
results_commit "$work/header" "$work/table" "$out"
python3 "$HERE/../scripts/check_readme_results.py" --render "$out"

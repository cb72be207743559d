#!/usr/bin/env bash
# CPU mixed precision: terngrad-train --precision fp32 vs bf16 (whole training steps in benchmark mode: synthetic
# input, exchange, optimizer + EMA) next to PyTorch's CPU autocast bf16 (bench/pytorch_peers.py --precision), the
# same networks, batches and thread count, runs interleaved, medians of R repeats.
#   bench/precision_bench.sh [-b BUILD_DIR] [-n lenet,cifarnet,resnet50] [-r 3] [-t THREADS]
# Prints one row per network: examples/s of ours fp32 / bf16, torch fp32 / bf16, and the ratios. bf16 needs
# AVX512_BF16 or AMX (terngrad-train refuses it otherwise, naming the CPU's ISA). Run on a quiet machine.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../scripts/lib/common.sh
source "$HERE/../scripts/lib/common.sh"
nets=lenet,cifarnet,resnet50
reps=3
threads=$(nproc)
while getopts "b:n:r:t:" o; do
  case $o in
    b) export BUILD_DIR; BUILD_DIR=$(cd "$OPTARG" && pwd) ;;
    n) nets=$OPTARG ;;
    r) reps=$OPTARG ;;
    t) threads=$OPTARG ;;
    *) tg_die "usage: bench/precision_bench.sh [-b BUILD_DIR] [-n nets] [-r repeats] [-t threads]" ;;
  esac
done
train=$(tg_binary terngrad-train)
PYTHON=${PYTHON:-/usr/bin/python3}
have_torch=1
"$PYTHON" -c "import torch" 2>/dev/null || have_torch=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# net -> "batch steps log_every" (steps after the first log window are the measured ones)
declare -A plan=([lenet]="64 300 50" [cifarnet]="128 60 10" [alexnet]="8 12 3" [resnet50]="8 12 3"
  [inception_v3]="8 9 3")

ours() {  # ours NET PRECISION -> examples/s (median of the trainer's log windows after the first)
  local net=$1 p=$2 b s l
  read -r b s l <<<"${plan[$net]}"
  rm -rf "$work/run"
  "$train" --benchmark_mode --net "$net" --dataset "$(dataset_of "$net")" --precision "$p" --threads "$threads" \
    --batch_size "$b" --max_steps "$s" --log_every "$l" --save_iter 100000000 --train_dir "$work/run" \
    >"$work/log" 2>&1 || { cat "$work/log" >&2; tg_die "terngrad-train --net $net --precision $p failed"; }
  grep -oE 'median [0-9.]+ examples/sec' "$work/log" | awk '{print $2}'
}
dataset_of() { case $1 in lenet) echo mnist ;; cifarnet) echo cifar10 ;; *) echo imagenet ;; esac; }
torch_rate() {  # torch_rate NET PRECISION
  local b
  read -r b _ <<<"${plan[$1]}"
  "$PYTHON" "$HERE/pytorch_peers.py" --net "$1" --threads "$threads" --batch "$b" --precision "$2" --min_time 4 |
    grep -oE 'images/s=[0-9.]+' | cut -d= -f2
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

echo "# $(lscpu | sed -n 's/^Model name: *//p'), $threads threads; ISA: $(grep -o 'avx512_bf16\|amx_bf16\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')"
printf "%-12s %6s %12s %12s %8s %12s %12s %8s %10s\n" net batch ours_fp32 ours_bf16 bf16/fp32 torch_fp32 torch_bf16 \
  bf16/fp32 ours/torch
IFS=, read -ra list <<<"$nets"
for net in "${list[@]}"; do
  [[ -n "${plan[$net]:-}" ]] || tg_die "unknown network '$net' (lenet, cifarnet, alexnet, resnet50, inception_v3)"
  : >"$work/of32"; : >"$work/obf"; : >"$work/tf32"; : >"$work/tbf"
  for ((i = 0; i < reps; i++)); do
    ours "$net" fp32 >>"$work/of32"
    ours "$net" bf16 >>"$work/obf"
    if ((have_torch)); then
      torch_rate "$net" fp32 >>"$work/tf32"
      torch_rate "$net" bf16 >>"$work/tbf"
    fi
  done
  of32=$(median <"$work/of32"); obf=$(median <"$work/obf")
  tf32=NA; tbf=NA
  if ((have_torch)); then tf32=$(median <"$work/tf32"); tbf=$(median <"$work/tbf"); fi
  read -r b _ <<<"${plan[$net]}"
  awk -v n="$net" -v b="$b" -v a="$of32" -v c="$obf" -v d="$tf32" -v e="$tbf" 'BEGIN {
    r2 = (d == "NA") ? "NA" : sprintf("%.2f", e / d); r3 = (d == "NA") ? "NA" : sprintf("%.2f", c / e);
    printf "%-12s %6d %12.1f %12.1f %8.2f %12s %12s %8s %10s\n", n, b, a, c, c / a, d, e, r2, r3 }'
done

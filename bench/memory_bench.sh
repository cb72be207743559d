#!/usr/bin/env bash
# Memory of a training step, ours against PyTorch: the peak resident memory (/usr/bin/time's maximum RSS) of whole
# CPU training runs at two batch sizes per network, their per-image slope ((peak at b2 - peak at b1) / (b2 - b1)),
# and the median step time of the same runs, so a memory win that costs speed shows.
#   ours    terngrad-train --benchmark_mode, one worker, --threads T, momentum SGD, the moving average of the weights
#           and batch-norm statistics it always keeps; --memory_plan none (every tensor its own buffer),
#           liveness (the default), liveness --recompute bn_relu and --recompute blocks (networks with batch norm);
#   base    (-B BASE_BUILD) the same runs of another build of terngrad-train (the code before a change): its default;
#   torch   bench/pytorch_peers.py --steps K --ema 0.9999: the same networks (torchvision's resnet50 and inception_v3
#           with the aux head), batches, threads, momentum SGD with weight decay and an AveragedModel EMA of the
#           weights and buffers, fixed random inputs.
# Runs are interleaved: repetition after repetition, every setting of every batch of a network in turn.
#   bench/memory_bench.sh [-b BUILD_DIR] [-B BASE_BUILD] [-n resnet50,inception_v3,alexnet,cifarnet,lenet]
#                         [-p NET=B1,B2 ...] [-S none,liveness,bn_relu,blocks,base,torch] [-r 3] [-t THREADS] [-s STEPS]
#                         [-o FILE]
# -p sets a network's two batches (default: resnet50 16,32; inception_v3 8,16; alexnet 32,64; cifarnet 128,256;
# lenet 256,1024); -S runs only these settings (e.g. "liveness,base" with -B: the step time against the build before).
# Writes bench/results/memory.tsv (bench/lib/results.sh) and prints the table (check_readme_results.py --render).
# Also prints ours' planned bytes (`--plan_memory`) per run. Run on a quiet machine.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib/bench.sh
source "$HERE/lib/bench.sh" # tg_die, results_*, tg_binary, bench_getopts
nets=resnet50,inception_v3,alexnet,cifarnet,lenet
reps=3
threads=$(nproc)
steps_override=""
base=""
settings=none,liveness,bn_relu,blocks,base,torch
batches=()
out=bench/results/memory.tsv
build_dir() { export BUILD_DIR; BUILD_DIR=$(cd "$1" && pwd); }
base_build() { base=$(cd "$1" && pwd)/terngrad-train; }
bench_getopts "b:B:n:p:S:r:t:s:o:" "usage: bench/memory_bench.sh [-b BUILD_DIR] [-B BASE_BUILD] [-n nets] [-p NET=B1,B2] [-S settings] [-r repeats] [-t threads] [-s steps] [-o FILE]" \
  "b=build_dir()" "B=base_build()" n=nets p+=batches S=settings r=reps t=threads s=steps_override o=out -- "$@"
[ -z "$base" ] || [ -x "$base" ] || tg_die "-B: no terngrad-train in $(dirname "$base")"
train=$(tg_binary terngrad-train)
[ -x /usr/bin/time ] || tg_die "needs /usr/bin/time (apt-get install time)"
# shellcheck source=lib/peer_python.sh
source "$HERE/lib/peer_python.sh"
PYTHON=$(peer_python)
"$PYTHON" -c "import torch, torchvision" 2>/dev/null || tg_die "no PyTorch/torchvision in $PYTHON (bench/setup_peers.sh)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# net -> "batch1 batch2 steps": two batches for the slope; the first step of a run is its warm-up
declare -A plan=([resnet50]="16 32 4" [inception_v3]="8 16 4" [alexnet]="32 64 4" [cifarnet]="128 256 8"
  [lenet]="256 1024 8")
declare -A has_bn=([resnet50]=1 [inception_v3]=1 [alexnet]=1 [cifarnet]=0 [lenet]=0)
for spec in "${batches[@]}"; do
  net=${spec%%=*} pair=${spec#*=}
  [[ -n "${plan[$net]:-}" && $pair =~ ^[0-9]+,[0-9]+$ ]] || tg_die "-p $spec: expected NET=B1,B2 of a known network"
  read -r _ _ steps <<<"${plan[$net]}"
  plan[$net]="${pair%,*} ${pair#*,} $steps"
done
wants() { [[ ",$settings," == *",$1,"* ]]; }
dataset_of() { case $1 in lenet) echo mnist ;; cifarnet) echo cifar10 ;; *) echo imagenet ;; esac; }

# ours BINARY NET BATCH STEPS [FLAGS...] -> "peak_kib step_s planned_bytes" (planned: the activations' arena; "-"
# for another build)
ours() {
  local bin=$1 net=$2 b=$3 s=$4 planned=-
  shift 4
  rm -rf "$work/run" "$work/metrics"
  if ! /usr/bin/time -f '%M' -o "$work/rss" "$bin" --benchmark_mode --net "$net" --dataset "$(dataset_of "$net")" \
    --threads "$threads" --num_nodes 1 --batch_size "$b" --max_steps "$s" --log_every 1 --save_iter 100000000 \
    --train_dir "$work/run" --metrics_jsonl "$work/metrics" "$@" >"$work/log" 2>&1; then
    echo "terngrad-train --net $net --batch_size $b $* failed: $(tail -n 1 "$work/log")" >&2
    return 0
  fi
  if [ "$bin" = "$train" ]; then
    planned=$("$bin" --plan_memory --net "$net" --dataset "$(dataset_of "$net")" --num_nodes 1 --batch_size "$b" "$@" |
      awk '$1 == "activations" && $NF == "bytes" {print $(NF - 1)}')
  fi
  echo "$(tail -n 1 "$work/rss") $(python3 - "$work/metrics" <<'EOF'
import json, statistics, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if l.strip() and not json.loads(l).get("summary")]
print(statistics.median(r["sec_per_batch"] for r in steps[1:]))
EOF
) $planned"
}
torch_run() {  # torch_run NET BATCH STEPS -> "peak_kib step_s -"
  local net=$1 b=$2 s=$3 line
  if ! /usr/bin/time -f '%M' -o "$work/rss" "$PYTHON" "$HERE/pytorch_peers.py" --net "$net" --threads "$threads" \
    --batch "$b" --warmup 1 --steps $((s - 1)) --ema 0.9999 >"$work/log" 2>&1; then
    echo "pytorch_peers.py --net $net --batch $b failed: $(tail -n 1 "$work/log")" >&2
    return 0
  fi
  line=$(grep -oE 'step_s_median=[0-9.]+' "$work/log" | cut -d= -f2)
  echo "$(tail -n 1 "$work/rss") $line -"
}
row() {  # row REP NET BATCH IMPL SETTING "peak_kib step_s planned"
  local peak step planned status=ok
  read -r peak step planned <<<"$6"
  [ -n "${peak:-}" ] || status=failed
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "$(( ${peak:-0} * 1024 ))" "${step:--}" \
    "${planned:--}" "$status" >>"$work/table"
  echo "rep $1 $2 batch $3 $4 $5: peak $(( ${peak:-0} / 1024 )) MiB, step ${step:--} s, planned activations ${planned:--} B" >&2
}

results_header memory "$BUILD_DIR" "$0" "${ARGS[@]}" >"$work/header"
peer_header_line "$PYTHON" >>"$work/header"
echo "# threads: $threads; torch: $("$PYTHON" -c 'import torch; print(torch.__version__)'); base: ${base:-none}" >>"$work/header"
printf 'rep\tnet\tbatch\timpl\tsetting\tpeak_rss_bytes\tstep_s\tplanned_activations_bytes\tstatus\n' >"$work/table"

IFS=, read -ra list <<<"$nets"
for net in "${list[@]}"; do
  [[ -n "${plan[$net]:-}" ]] || tg_die "unknown network '$net' (resnet50, inception_v3, alexnet, cifarnet, lenet)"
done
for ((i = 1; i <= reps; i++)); do
  for net in "${list[@]}"; do
    read -r b1 b2 steps <<<"${plan[$net]}"
    [ -z "$steps_override" ] || steps=$steps_override
    for b in $b1 $b2; do
      if wants none; then row "$i" "$net" "$b" ours none "$(ours "$train" "$net" "$b" "$steps" --memory_plan none)"; fi
      if wants liveness; then row "$i" "$net" "$b" ours liveness "$(ours "$train" "$net" "$b" "$steps")"; fi
      if wants bn_relu && [ "${has_bn[$net]}" = 1 ]; then
        row "$i" "$net" "$b" ours bn_relu "$(ours "$train" "$net" "$b" "$steps" --recompute bn_relu)"
      fi
      if wants blocks && [ "${has_bn[$net]}" = 1 ]; then
        row "$i" "$net" "$b" ours blocks "$(ours "$train" "$net" "$b" "$steps" --recompute blocks)"
      fi
      if wants base && [ -n "$base" ]; then row "$i" "$net" "$b" base default "$(ours "$base" "$net" "$b" "$steps")"; fi
      if wants torch; then row "$i" "$net" "$b" torch fp32 "$(torch_run "$net" "$b" "$steps")"; fi
    done
  done
done
results_commit "$work/header" "$work/table" "$out"
python3 "$HERE/../scripts/check_readme_results.py" --render "$out"

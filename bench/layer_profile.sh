#!/usr/bin/env bash
# layer_profile.sh: where one CPU training step goes, ours against PyTorch's, layer by layer and pass by pass, at
# each vector ISA (this CPU's own, and AVX2 by restriction). See bench/README.md, "Layer profile".
#
# Every run is one process, one thread, pinned to core CORE (-c), the compute-only step of the link benchmark's
# networks (no exchange): ours `terngrad-train --benchmark_mode --grad_bits 32 --num_nodes 1` with
# `--timeline_layers` (each layer's forward and backward span) and ONEDNN_VERBOSE=1 (each oneDNN primitive's
# execution: forward, backward-data and backward-weights apart, with the implementation oneDNN chose); PyTorch's
# bench/torch_layer_profile.py (ddp_peer.py's network, input and optimizer) with ONEDNN_VERBOSE=1 and
# torch.profiler (each operator's self time). Rows: bench/layer_profile.py. Repetitions are interleaved (ours,
# PyTorch, then the next ISA, batch and net).
#
# The AVX2 restriction on an AVX-512 machine (results_restrict_isa, as link_bench.sh -I avx2): ONEDNN_MAX_CPU_ISA=AVX2
# for both (it also lowers our own vector loops: the codec's and the LRN backward's), ATEN_CPU_CAPABILITY=avx2 and
# MKL_ENABLE_INSTRUCTIONS=AVX2 for PyTorch. What it does not change: the caches, memory bandwidth and clock of the machine, and code that picks
# its path from the CPU's features without asking these variables (none of ours).
set -euo pipefail

usage() {
  cat <<'EOF'
usage: bench/layer_profile.sh [options]
  -b BUILD_DIR   build folder with terngrad-train (default: build)
  -n NETS        comma-separated: alexnet, resnet50, lenet (default: alexnet,resnet50)
  -B BATCHES     comma-separated per-process batches (default: 8,40)
  -i ISAS        comma-separated: native (this CPU's), avx2 (restricted) (default: native,avx2)
  -s STEPS       steps per run (default 6), the first -w (default 2) untimed
  -r REPEATS     interleaved repetitions (default 3)
  -c CORE        the core every run is pinned to (default 1)
  -o FILE        results file (default bench/results/layer-profile.tsv)
  --no-peer      leave PyTorch out
EOF
}

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib/bench.sh
source "$HERE/lib/bench.sh" # tg_die, results_*, bench_options
# shellcheck source=lib/scratch.sh
source "$HERE/lib/scratch.sh"
# shellcheck source=lib/peer_python.sh
source "$HERE/lib/peer_python.sh"

BUILD_DIR=build NETS=alexnet,resnet50 BATCHES=8,40 ISAS=native,avx2 STEPS=6 WARMUP=2 REPEATS=3 CORE=1 OUT="" PEER=1
BENCH_VALUE_HINT="" bench_options -b=BUILD_DIR -n=NETS -B=BATCHES -i=ISAS -s=STEPS -w=WARMUP -r=REPEATS -c=CORE \
  -o=OUT --no-peer:PEER=0 -- "$@"

IFS=, read -r -a NET_LIST <<<"$NETS"
IFS=, read -r -a BATCH_LIST <<<"$BATCHES"
IFS=, read -r -a ISA_LIST <<<"$ISAS"
for n in "${NET_LIST[@]}"; do
  case "$n" in lenet | alexnet | resnet50) ;; *) tg_die "-n: unknown net '$n' (lenet, alexnet, resnet50)" ;; esac
done
for b in "${BATCH_LIST[@]}"; do [[ "$b" =~ ^[1-9][0-9]*$ ]] || tg_die "-B: '$b' is not a positive batch"; done
for i in "${ISA_LIST[@]}"; do
  case "$i" in native | avx2) ;; *) tg_die "-i: unknown ISA '$i' (native, avx2)" ;; esac
done
[[ "$STEPS" =~ ^[0-9]+$ && "$WARMUP" =~ ^[1-9][0-9]*$ && "$REPEATS" =~ ^[1-9][0-9]*$ && "$CORE" =~ ^[0-9]+$ ]] ||
  tg_die "-s, -w, -r and -c take non-negative integers (-w, -r at least 1)"
[ "$STEPS" -ge $((WARMUP + 2)) ] || tg_die "-s $STEPS: need at least 2 timed steps after -w $WARMUP"
[ "$CORE" -lt "$(nproc --all)" ] || tg_die "-c $CORE: this machine has cores 0..$(($(nproc --all) - 1))"
command -v taskset >/dev/null || tg_die "needs taskset (util-linux)"
TRAIN=$BUILD_DIR/terngrad-train
[ -x "$TRAIN" ] || tg_die "no $TRAIN (build it, or pass -b)"
[ -n "$OUT" ] || OUT=$HERE/results/layer-profile.tsv
PYTHON=$(peer_python)
PEER_MISSING=""
if [ "$PEER" = 1 ] && ! "$PYTHON" -c 'import torch, torchvision' 2>/dev/null; then
  PEER_MISSING="no PyTorch with torchvision in $PYTHON (bench/setup_peers.sh)"
fi

bench_scratch layer_profile
HEADER=$TMP/header
TABLE=$TMP/table
results_header layer_profile "$BUILD_DIR" "$0" "${ARGS[@]}" >"$HEADER"
[ "$PEER" = 1 ] && peer_header_line "$PYTHON" >>"$HEADER"
echo "# options: nets $NETS, batches $BATCHES, ISAs $ISAS, steps $STEPS, warm-up $WARMUP, repeats $REPEATS," \
  "1 thread, pinned to core $CORE, one process at a time" >>"$HEADER"
printf 'rep\tisa\tnet\tbatch\tsystem\tkind\tname\tpass\timpl\tms_per_step\tcalls_per_step\tstatus\n' >"$TABLE"

# A failed run's row: prefix system status note.
failed_row() {
  printf '%s\t%s\tstep\t-\t-\t-\t-\t-\t%s\n' "$1" "$2" "$3" >>"$TABLE"
}

run_ours() {
  local net=$1 b=$2 prefix=$3 dir=$TMP/ours dataset=imagenet
  [ "$net" = lenet ] && dataset=fashion_mnist
  rm -rf "$dir" && mkdir -p "$dir"
  if run taskset -c "$CORE" "$TRAIN" --benchmark_mode --net "$net" --dataset "$dataset" \
    --threads 1 --batch_size "$b" --num_nodes 1 --grad_bits 32 --max_steps "$STEPS" --log_every 1 \
    --save_iter 100000000 --log_level warn --train_dir "$dir/train" --metrics_jsonl "$dir/metrics.jsonl" \
    --timeline "$dir/trace.json" --timeline_steps "$((WARMUP + 1))-$STEPS" --timeline_layers >"$dir/log" 2>&1; then
    python3 "$HERE/layer_profile.py" ours "$dir/log" "$dir/metrics.jsonl" "$dir/trace.json" "$WARMUP" "$prefix" \
      >>"$TABLE"
  else
    failed_row "$prefix" ours "failed: $(tail -1 "$dir/log" | tr '\t' ' ')"
  fi
}

run_peer() {
  local net=$1 b=$2 prefix=$3 dir=$TMP/peer
  if [ -n "$PEER_MISSING" ]; then
    failed_row "$prefix" pytorch "missing: $PEER_MISSING"
    return
  fi
  rm -rf "$dir" && mkdir -p "$dir"
  if run taskset -c "$CORE" timeout 3600 "$PYTHON" "$HERE/torch_layer_profile.py" --net "$net" \
    --batch "$b" --steps $((STEPS - WARMUP)) --warmup "$WARMUP" --json_out "$dir/out.json" >"$dir/log" 2>&1; then
    python3 "$HERE/layer_profile.py" pytorch "$dir/log" "$dir/out.json" "$WARMUP" "$prefix" >>"$TABLE"
  else
    failed_row "$prefix" pytorch "failed: $(grep -v '^onednn_verbose' "$dir/log" | tail -1 | tr '\t' ' ')"
  fi
}

for rep in $(seq "$REPEATS"); do
  for net in "${NET_LIST[@]}"; do
    for b in "${BATCH_LIST[@]}"; do
      for isa in "${ISA_LIST[@]}"; do
        prefix=$(printf '%s\t%s\t%s\t%s' "$rep" "$isa" "$net" "$b")
        t0=$(now)
        (  # this ISA's restriction (bench/lib/results.sh) and oneDNN's per-primitive lines, for both systems
          results_restrict_isa "$isa"
          export ONEDNN_VERBOSE=1
          run_ours "$net" "$b" "$prefix"
          if [ "$PEER" = 1 ]; then run_peer "$net" "$b" "$prefix"; fi
        )
        echo "layer_profile: rep $rep $net batch $b $isa: $(elapsed "$t0" "$(now)") s" >&2
      done
    done
  done
done
results_commit "$HEADER" "$TABLE" "$OUT"
python3 "$HERE/../scripts/check_readme_results.py" --render "$OUT"

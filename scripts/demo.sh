#!/usr/bin/env bash
# The main job on a fresh machine, on the CPU: install what is missing, build, convert Fashion-MNIST (Debian
# package) to TFRecord, train LeNet with TernGrad on 2 workers for 2 epochs, evaluate, and print the accuracy and
# the gradient bytes the workers really sent each other; then TernGrad with the lever that won accuracy back in the
# accuracy benchmark (DEMO_LEVER_FLAGS, README "Accuracy"), and the same run with fp32 gradients as the baseline.
# The 2 workers are 2 processes (mpirun -np 2 on this machine, one worker and half the cores each), so the bytes
# are those the MPI communicator counted crossing between them, not a model of them. Every run is one seed (the
# recipe's, 1): one run's accuracy differs from the next seed's by a few tenths of a point (README "Accuracy" has
# means over seeds). The TernGrad runs also measure how far their averaged gradient is from fp32's
# (--quantization_error_every 375). Each run evaluates its moving averages on the test set 15 times while it trains
# (--eval_every STEPS/15: its learning curve, in its train_dir). Last, scripts/plot_runs.py draws the runs side by
# side into WORK_DIR/terngrad_vs_fp32.png (cross-entropy, test accuracy, examples/sec, gradient bytes, against steps
# and training time).
# Usage: scripts/demo.sh [--results FILE] [WORK_DIR]      (default /tmp/terngrad_demo)
#   --results FILE   also write the figures as a results file (bench/lib/results.sh; the README's demo table
#                    is rendered from bench/results/demo.tsv)
#   DEMO_BASELINE=0  skip the fp32 baseline run      DEMO_STEPS=N  override the 1875 steps (2 epochs)
#   DEMO_LEVER=0     skip the TernGrad run with the lever (DEMO_LEVER_FLAGS, default: the accuracy bench's winner)
#   TG_JOBS=N        build parallelism               BUILD_DIR=dir  build folder (default: build)
# A relative WORK_DIR or BUILD_DIR is taken from the folder the script was started in. Each run is one run:
# its examples/sec is printed as measured, not compared (bench/README.md has medians of repeated runs).
set -euo pipefail
# shellcheck source=lib/common.sh
source "$(dirname "$0")/lib/common.sh"
# shellcheck source=../bench/lib/results.sh
source "$TG_ROOT/bench/lib/results.sh"
SCRIPT=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
ARGS=("$@")
RESULTS=""
if [ "${1:-}" = --results ]; then
  [ $# -ge 2 ] || tg_die "--results needs a file"
  RESULTS=$2
  case "$RESULTS" in /*) ;; *) RESULTS=$(pwd)/$RESULTS ;; esac
  shift 2
fi
WORK=${1:-/tmp/terngrad_demo}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
cd "$TG_ROOT"
STEPS=${DEMO_STEPS:-1875}
EVAL_EVERY=$((STEPS / 15 > 0 ? STEPS / 15 : 1))
CORES=$(nproc)
THREADS=$((CORES >= 2 ? CORES / 2 : 1))  # per process

if [ "$(id -u)" -eq 0 ]; then bash scripts/setup.sh; fi
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release > "$WORK/cmake.log" 2>&1 || { cat "$WORK/cmake.log"; exit 1; }
cmake --build "$BUILD_DIR" -j "${TG_JOBS:-$CORES}" --target terngrad-train terngrad-eval terngrad-data
TRAIN=$(tg_binary terngrad-train)
EVAL=$(tg_binary terngrad-eval)
command -v mpirun > /dev/null || tg_die "mpirun not found (scripts/setup.sh installs openmpi-bin)"

if [ ! -f "$WORK/data/test-00000-of-00001" ]; then
  BUILD_DIR=$BUILD_DIR scripts/prepare_fashion_mnist.sh "$WORK/data" 4
fi

train_and_eval() {  # name config [flags...]
  local name=$1 config=$2
  shift 2
  rm -rf "${WORK:?}/$name" "$WORK/$name.jsonl"
  echo "== training $name ($config${*:+ $*}, $STEPS steps): 2 processes (mpirun -np 2), 1 worker and $THREADS threads each"
  # --bind-to none: each process uses $THREADS cores, not the one core Open MPI would bind it to.
  mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 \
    "$TRAIN" --config "$config" --num_nodes 1 --data_dir "$WORK/data" --train_dir "$WORK/$name" \
    --max_steps "$STEPS" --threads "$THREADS" --metrics_jsonl "$WORK/$name.jsonl" --eval_every "$EVAL_EVERY" "$@" 2>&1 |
    tee "$WORK/$name.log"
  echo "== evaluating $name"
  # The final checkpoint again, by the evaluation program (the curve's last point is the same evaluation).
  "$EVAL" --checkpoint_dir "$WORK/$name" --data_dir "$WORK/data" --subset test --run_once \
    --threads "$CORES" | tee "$WORK/$name.eval"
}

# A field of the metrics summary (the last line), or of the last logged step's line.
summary() { python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if l.strip()][-1][sys.argv[2]])' "$1" "$2"; }
last_step() { python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print([r for r in rows if "summary" not in r and "quantization" not in r][-1][sys.argv[2]])' "$1" "$2"; }
accuracy() { grep -o 'precision @ 1 = [0-9.]*' "$1" | tail -1 | awk '{print $5}'; }
# The gradient bytes the communicator counted into this process, per step (the same every step), times the steps.
wire_total() { python3 -c 'import sys; print(int(sys.argv[1]) * int(sys.argv[2]))' "$(last_step "$1" wire_bytes)" "$STEPS"; }

PROBE=(--quantization_error_every $((STEPS / 5 > 0 ? STEPS / 5 : 1)))
# The lever: the accuracy bench's best TernGrad variant on LeNet (README "Accuracy", bench/results/accuracy.tsv).
LEVER_FLAGS=${DEMO_LEVER_FLAGS:---error_feedback}
read -r -a LEVER <<< "$LEVER_FLAGS"
train_and_eval terngrad configs/fashion_mnist_lenet_terngrad.ini "${PROBE[@]}"
lever=0
if [ "${DEMO_LEVER:-1}" != "0" ]; then
  train_and_eval terngrad_lever configs/fashion_mnist_lenet_terngrad.ini "${LEVER[@]}" "${PROBE[@]}"
  lever=1
fi
baseline=0
if [ "${DEMO_BASELINE:-1}" != "0" ]; then
  train_and_eval fp32 configs/fashion_mnist_lenet_fp32.ini
  baseline=1
fi

# The mean relative error of the averaged gradient against fp32's over the run's probes.
probe_error() { python3 "$TG_ROOT/bench/lib/tg_metrics.py" quantization "$1" | cut -f1; }
tw=$(wire_total "$WORK/terngrad.jsonl")
fw=$(python3 -c 'import sys; print(int(sys.argv[1]) * int(sys.argv[2]))' "$(last_step "$WORK/terngrad.jsonl" fp32_bytes)" "$STEPS")
((baseline)) && fw=$(wire_total "$WORK/fp32.jsonl")
echo
echo "== result: LeNet, Fashion-MNIST, 2 workers as 2 processes on this machine ($(grep -m1 '^model name' /proc/cpuinfo |
  sed 's/^[^:]*: *//'), $CORES cores, $(results_isa | cut -d' ' -f1)), total batch 64, $STEPS steps; one run each, seed 1"
mb() { python3 -c 'import sys; print("%.2f MB (%s bytes)" % (int(sys.argv[1]) / 1e6, sys.argv[1]))' "$1"; }
printf "TernGrad: test accuracy %s; gradient bytes received per worker over the run, as the MPI communicator counted them: %s;\n" \
  "$(accuracy "$WORK/terngrad.eval")" "$(mb "$tw")"
printf "          its averaged gradient's distance from fp32's, |ternary - fp32| / |fp32|: %s (mean of %s probes, each an\n          fp32 exchange more, not counted in the bytes)\n" \
  "$(probe_error "$WORK/terngrad.jsonl")" "$(python3 "$TG_ROOT/bench/lib/tg_metrics.py" quantization "$WORK/terngrad.jsonl" | cut -f3)"
if ((lever)); then
  printf "TernGrad %s: test accuracy %s; gradient bytes received per worker: %s\n" "$LEVER_FLAGS" \
    "$(accuracy "$WORK/terngrad_lever.eval")" "$(mb "$(wire_total "$WORK/terngrad_lever.jsonl")")"
fi
if ((baseline)); then
  printf "fp32:     test accuracy %s; gradient bytes received per worker: %s (TernGrad: %.1fx less)\n" \
    "$(accuracy "$WORK/fp32.eval")" "$(mb "$fw")" "$(python3 -c 'import sys; print(int(sys.argv[1]) / max(1, int(sys.argv[2])))' "$fw" "$tw")"
else
  printf "(fp32 would receive %s per worker by the communicator's byte model)\n" "$(mb "$fw")"
fi
echo "(one seed: a run's test accuracy moves by a few tenths of a point with the seed; README \"Accuracy\" has the"
echo " means and spreads over seeds of each variant at 2-16 workers)"
printf "examples/sec of these single runs: TernGrad %s%s (one run each, not a speed comparison: see bench/README.md)\n" \
  "$(summary "$WORK/terngrad.jsonl" median_examples_per_sec)" \
  "$( ((baseline)) && echo ", fp32 $(summary "$WORK/fp32.jsonl" median_examples_per_sec)")"

if [ -n "$RESULTS" ]; then
  results_header demo "$BUILD_DIR" "$SCRIPT" "${ARGS[@]}" > "$WORK/results.header"
  echo "# layout: mpirun -np 2 on this machine, 1 worker and --threads $THREADS per process; seed 1" >> "$WORK/results.header"
  {
    printf 'run\tsteps\ttest_accuracy\twire_bytes_per_worker\tfp32_wire_bytes_per_worker\texamples_per_sec\tparameter_digest\n'
    printf 'TernGrad (--grad_bits 1 --clip_factor 2.5 --quantize_logits=true)\t%s\t%s\t%s\t%s\t%.1f\t%s\n' "$STEPS" \
      "$(accuracy "$WORK/terngrad.eval")" "$tw" "$fw" "$(summary "$WORK/terngrad.jsonl" median_examples_per_sec)" \
      "$(summary "$WORK/terngrad.jsonl" parameter_digest)"
    if ((lever)); then
      printf 'TernGrad %s\t%s\t%s\t%s\t%s\t%.1f\t%s\n' "$LEVER_FLAGS" "$STEPS" "$(accuracy "$WORK/terngrad_lever.eval")" \
        "$(wire_total "$WORK/terngrad_lever.jsonl")" "$fw" "$(summary "$WORK/terngrad_lever.jsonl" median_examples_per_sec)" \
        "$(summary "$WORK/terngrad_lever.jsonl" parameter_digest)"
    fi
    if ((baseline)); then
      printf 'fp32\t%s\t%s\t%s\t%s\t%.1f\t%s\n' "$STEPS" "$(accuracy "$WORK/fp32.eval")" "$fw" "$fw" \
        "$(summary "$WORK/fp32.jsonl" median_examples_per_sec)" "$(summary "$WORK/fp32.jsonl" parameter_digest)"
    fi
  } > "$WORK/results.table"
  results_commit "$WORK/results.header" "$WORK/results.table" "$RESULTS"
fi
# The runs side by side (loss, test accuracy, examples/sec, bytes against steps and wall time): one PNG.
plot=$WORK/terngrad_vs_fp32.png
labels=(--label=TernGrad) runs=("$WORK/terngrad")
if ((lever)); then labels+=("--label=TernGrad $LEVER_FLAGS") runs+=("$WORK/terngrad_lever"); fi
if ((baseline)); then labels+=(--label=fp32) runs+=("$WORK/fp32"); fi
echo "logs, checkpoints and metrics in $WORK"
if python3 "$TG_ROOT/scripts/plot_runs.py" -o "$plot" "${labels[@]}" "${runs[@]}" > "$WORK/plot.log" 2>&1; then
  echo "plot: $plot"
else
  echo "plot: not written: $(tail -1 "$WORK/plot.log")"
fi

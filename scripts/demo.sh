#!/usr/bin/env bash
# The main job on a fresh machine, on the CPU: install what is missing, build, convert Fashion-MNIST (Debian
# package) to TFRecord, train LeNet with TernGrad on 2 workers for 2 epochs, evaluate, and print the accuracy and
# the bytes the ternary exchange saved against fp32; then the same run with fp32 gradients as the baseline.
# Usage: scripts/demo.sh [WORK_DIR]      (default /tmp/terngrad_demo)
#   DEMO_BASELINE=0  skip the fp32 baseline run      DEMO_STEPS=N  override the 1875 steps (2 epochs)
#   TG_JOBS=N        build parallelism               BUILD_DIR=dir  build folder (default: build)
# A relative WORK_DIR or BUILD_DIR is taken from the folder the script was started in.
set -euo pipefail
# shellcheck source=lib/common.sh
source "$(dirname "$0")/lib/common.sh"
WORK=${1:-/tmp/terngrad_demo}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
cd "$TG_ROOT"
STEPS=${DEMO_STEPS:-1875}
THREADS=$(nproc)

if [ "$(id -u)" -eq 0 ]; then bash scripts/setup.sh; fi
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release > "$WORK/cmake.log" 2>&1 || { cat "$WORK/cmake.log"; exit 1; }
cmake --build "$BUILD_DIR" -j "${TG_JOBS:-$THREADS}" --target terngrad-train terngrad-eval terngrad-data
TRAIN=$(tg_binary terngrad-train)
EVAL=$(tg_binary terngrad-eval)

if [ ! -f "$WORK/data/test-00000-of-00001" ]; then
  BUILD_DIR=$BUILD_DIR scripts/prepare_fashion_mnist.sh "$WORK/data" 4
fi

train_and_eval() {  # name config
  local name=$1 config=$2
  rm -rf "${WORK:?}/$name" "$WORK/$name.jsonl"
  echo "== training $name ($config, $STEPS steps)"
  "$TRAIN" --config "$config" --data_dir "$WORK/data" --train_dir "$WORK/$name" \
    --max_steps "$STEPS" --threads "$THREADS" --metrics_jsonl "$WORK/$name.jsonl" 2>&1 | tee "$WORK/$name.log"
  echo "== evaluating $name"
  "$EVAL" --checkpoint_dir "$WORK/$name" --data_dir "$WORK/data" --subset test --run_once \
    --threads "$THREADS" | tee "$WORK/$name.eval"
}

field() { grep '"summary": true' "$1" | tail -1 | grep -o "\"$2\": [0-9.e+-]*" | awk '{print $2}'; }
accuracy() { grep -o 'precision @ 1 = [0-9.]*' "$1" | tail -1 | awk '{print $5}'; }

train_and_eval terngrad configs/fashion_mnist_lenet_terngrad.ini
if [ "${DEMO_BASELINE:-1}" != "0" ]; then
  train_and_eval fp32 configs/fashion_mnist_lenet_fp32.ini
fi

echo
echo "== result: LeNet, Fashion-MNIST, 2 workers, batch 64, $STEPS steps"
tb=$(field "$WORK/terngrad.jsonl" bytes_exchanged); fb=$(field "$WORK/terngrad.jsonl" fp32_bytes)
printf "TernGrad: test accuracy %s, %s examples/sec, gradient bytes exchanged per worker %s (fp32 would be %s: %.1fx less)\n" \
  "$(accuracy "$WORK/terngrad.eval")" "$(field "$WORK/terngrad.jsonl" median_examples_per_sec)" "$tb" "$fb" \
  "$(awk -v a="$fb" -v b="$tb" 'BEGIN { print (b > 0 ? a / b : 0) }')"
if [ -f "$WORK/fp32.eval" ] && [ "${DEMO_BASELINE:-1}" != "0" ]; then
  printf "fp32:     test accuracy %s, %s examples/sec\n" "$(accuracy "$WORK/fp32.eval")" \
    "$(field "$WORK/fp32.jsonl" median_examples_per_sec)"
fi
echo "logs, checkpoints and metrics in $WORK"

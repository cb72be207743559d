#!/usr/bin/env bash
# One process, 2 workers, no link: fp32 against TernGrad gradients, LeNet and AlexNet in benchmark mode, 3 runs
# each interleaved; prints per run the median s/step of the metrics summary and the phase times (ms/step).
# Usage: bench/inproc_bench.sh [BUILD_DIR] [THREADS]     (default: build, 2)
set -euo pipefail
B=${1:-build}
T=${2:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for rep in 1 2 3; do
  for net in lenet alexnet; do
    if [ "$net" = lenet ]; then
      args=(--net lenet --dataset fashion_mnist --batch_size 64 --max_steps 400 --log_every 50); batch=64
    else
      args=(--net alexnet --dataset imagenet --batch_size 16 --max_steps 40 --log_every 10); batch=16
    fi
    for gb in 32 1; do
      rm -rf "$work/run" "$work/m.jsonl"
      "$B/terngrad-train" --benchmark_mode "${args[@]}" --num_nodes 2 --threads "$T" --grad_bits "$gb" \
        --clip_factor 2.5 --save_iter 100000000 --train_dir "$work/run" --metrics_jsonl "$work/m.jsonl" >/dev/null 2>&1
      python3 - "$work/m.jsonl" "$rep" "$net" "$gb" "$batch" <<'PY'
import json, sys
path, rep, net, gb, batch = sys.argv[1:]
s = [json.loads(l) for l in open(path)][-1]
print(rep, net, "fp32" if gb == "32" else "terngrad", "%.4f s/step" % (int(batch) / s["median_examples_per_sec"]),
      " ".join("%s=%.1f" % (k, v * 1000) for k, v in s["time"].items()))
PY
    done
  done
done

#!/usr/bin/env bash
# The memory plan of one GPU (terngrad-train --plan_memory --device cuda: planned without a GPU, nothing allocated)
# for ResNet-50 and Inception-v3 at a per-GPU batch, in each precision and recomputation, and the largest batch that
# fits a budget (--fit_memory). Not a measurement of time: the same numbers on every machine for the same code.
#   bench/memory_plan.sh [-b BUILD_DIR] [-n resnet50,inception_v3] [-B 256] [-m 80GiB] [-o FILE]
# Writes bench/results/memory_plan.tsv (bench/lib/results.sh) and prints the table.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib/bench.sh
source "$HERE/lib/bench.sh" # tg_die, results_*, tg_binary, bench_getopts
nets=resnet50,inception_v3
batch=256
budget=80GiB
out=bench/results/memory_plan.tsv
build_dir() { export BUILD_DIR; BUILD_DIR=$(cd "$1" && pwd); }
bench_getopts "b:n:B:m:o:" "usage: bench/memory_plan.sh [-b BUILD_DIR] [-n nets] [-B batch] [-m budget] [-o FILE]" \
  "b=build_dir()" n=nets B=batch m=budget o=out -- "$@"
train=$(tg_binary terngrad-train)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results_header memory_plan "$BUILD_DIR" "$0" "${ARGS[@]}" >"$work/header"
printf 'net\tdevice\tprecision\tbatch\trecompute\tplanned_bytes\tactivations_bytes\tbudget\tlargest_batch\n' >"$work/table"
IFS=, read -ra list <<<"$nets"
for net in "${list[@]}"; do
  for precision in fp32 fp16 bf16; do
    for recompute in none bn_relu blocks; do
      "$train" --plan_memory --fit_memory "$budget" --device cuda --net "$net" --dataset imagenet \
        --batch_size "$batch" --precision "$precision" --recompute "$recompute" >"$work/plan" ||
        tg_die "terngrad-train --plan_memory --net $net --precision $precision failed: $(tail -n 1 "$work/plan")"
      total=$(awk '$1 == "total" && $NF == "bytes" {print $(NF - 1)}' "$work/plan")
      acts=$(awk '$1 == "activations" && $NF == "bytes" {print $(NF - 1)}' "$work/plan")
      largest=$(sed -n 's/.*the largest --batch_size that fits is \([0-9]*\).*/\1/p' "$work/plan")
      printf '%s\tcuda:0\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$net" "$precision" "$batch" "$recompute" "$total" "$acts" \
        "$budget" "${largest:-0}" >>"$work/table"
    done
  done
done
results_commit "$work/header" "$work/table" "$out"
python3 "$HERE/../scripts/check_readme_results.py" --render "$out"

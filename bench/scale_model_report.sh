#!/usr/bin/env bash
# scale_model_report.sh: writes bench/results/scale_model.txt, the scaling model's calibration on the AVX2 scale
# results and its predictions for GPU clusters, each after the command that printed it, under a provenance
# header (commit, tree, date, the inputs' own commits). Rerun after a scale results file or scale_model.py changes.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/results.sh
source bench/lib/results.sh
OUT=bench/results/scale_model.txt
INPUTS=(bench/results/scale-alexnet-avx2.tsv bench/results/scale-alexnet-avx2-4x2.tsv)
COMMANDS=(
  "bench/scale_model.py calibrate ${INPUTS[*]} -o bench/results/scale_model.json"
  "bench/scale_model.py predict -m bench/results/scale_model.json --net resnet50 --compute 0.25"
  "bench/scale_model.py predict -m bench/results/scale_model.json --net resnet50 --compute 0.25 --latency-us 20"
  "bench/scale_model.py predict -m bench/results/scale_model.json --net alexnet --compute 0.25 --latency-us 20"
)
tmp=$(mktemp "$OUT.tmp.XXXXXX")
trap 'rm -f "$tmp"' EXIT
{
  echo "# format: terngrad-results 1"
  echo "# kind: scale_model"
  echo "# command: bench/scale_model_report.sh"
  echo "# commit: $(results_checkout_commit)"
  echo "# tree: $(results_checkout_tree)"
  echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  for f in "${INPUTS[@]}"; do
    echo "# input: $f, measured at commit $(grep -m1 '^# commit:' "$f" | cut -d' ' -f3), $(grep -m1 '^# isa:' "$f" | cut -d' ' -f3)"
  done
  for c in "${COMMANDS[@]}"; do
    echo
    echo "\$ $c"
    # shellcheck disable=SC2086
    python3 $c
  done
} >"$tmp"
mv -f "$tmp" "$OUT"
trap - EXIT
echo "wrote $OUT"

#!/usr/bin/env bash
# One process, 2 workers, no link: fp32 against TernGrad gradients (--grad_bits 32 vs 1, clip 2.5), LeNet and
# AlexNet in benchmark mode, runs interleaved (fp32, TernGrad, per net, repetition after repetition). Each run:
# the metrics summary's median examples/sec after the first log window, as s/step, and its mean phase times.
# Writes the results file (bench/lib/results.sh; default bench/results/inproc.tsv) and prints its table.
#
#   bench/inproc_bench.sh [-b BUILD_DIR] [-t THREADS] [-r REPEATS] [-n lenet,alexnet] [-s STEPS] [-o FILE]
#
# Defaults: -b build, -t 2, -r 3, -n lenet,alexnet; LeNet total batch 64, 400 steps, a log window of 50;
# AlexNet total batch 16, 40 steps, a window of 10. -s overrides the steps of every net (a smoke test; a
# window is then a quarter of them).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib/bench.sh
source "$HERE/lib/bench.sh" # tg_die, results_*, bench_getopts
B=build
T=2
REPS=3
NETS=lenet,alexnet
STEPS=""
OUT=bench/results/inproc.tsv
bench_getopts "b:t:r:n:s:o:h" 7,11 b=B t=T r=REPS n=NETS s=STEPS o=OUT -- "$@"
[[ "$REPS" =~ ^[1-9][0-9]*$ && "$T" =~ ^[1-9][0-9]*$ ]] || { echo "inproc_bench.sh: -r and -t take positive integers" >&2; exit 2; }
[[ -z "$STEPS" || "$STEPS" =~ ^[1-9][0-9]*$ ]] || { echo "inproc_bench.sh: -s takes a positive integer" >&2; exit 2; }
bench_programs "$B" "build it, or pass -b" terngrad-train
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
IFS=, read -r -a net_list <<<"$NETS"
for net in "${net_list[@]}"; do
  case $net in lenet | alexnet) ;; *) echo "inproc_bench.sh: unknown net '$net' (lenet, alexnet)" >&2; exit 2 ;; esac
done

results_header inproc "$B" "$0" "${ARGS[@]}" >"$work/header"
echo "# threads: $T; one process, --num_nodes 2, --benchmark_mode" >>"$work/header"
printf 'rep\tnet\tbatch\tmethod\tsteps\ts_per_step\tforward_backward_ms\tscalers_ms\tencode_ms\tdecode_ms\toptimizer_ms\tstatus\n' >"$work/table"
for rep in $(seq "$REPS"); do
  for net in "${net_list[@]}"; do
    if [ "$net" = lenet ]; then
      batch=64 steps=${STEPS:-400} every=50 args=(--net lenet --dataset fashion_mnist)
    else
      batch=16 steps=${STEPS:-40} every=10 args=(--net alexnet --dataset imagenet)
    fi
    [ -z "$STEPS" ] || every=$(((steps + 3) / 4))
    for method in fp32 terngrad; do
      gb=32
      [ "$method" = terngrad ] && gb=1
      rm -rf "$work/run" "$work/m.jsonl"
      rc=0
      "$B/terngrad-train" --benchmark_mode "${args[@]}" --batch_size "$batch" --max_steps "$steps" --log_every "$every" \
        --num_nodes 2 --threads "$T" --grad_bits "$gb" --clip_factor 2.5 --save_iter 100000000 --train_dir "$work/run" \
        --metrics_jsonl "$work/m.jsonl" >"$work/log" 2>&1 || rc=$?
      if [ "$rc" = 0 ] && python3 - "$work/m.jsonl" "$rep" "$net" "$batch" "$method" "$steps" >>"$work/table" <<'PY'; then
import json, sys
path, rep, net, batch, method, steps = sys.argv[1:]
s = [json.loads(l) for l in open(path) if l.strip()][-1]
assert s.get("summary"), "no summary line"
t = s["time"]
ms = lambda k: "%.3f" % (1000 * t.get(k, 0.0))
print("\t".join([rep, net, batch, method, steps, "%.6f" % (int(batch) / s["median_examples_per_sec"]),
                 ms("forward_backward"), ms("scalers"), ms("encode"), ms("decode"), ms("optimizer_ema"), "ok"]))
PY
        echo "rep $rep $net $method: $(tail -n 1 "$work/table" | cut -f6) s/step" >&2
      else
        echo "inproc_bench.sh: $net $method (rep $rep) failed: $(tail -n 1 "$work/log")" >&2
        printf '%s\t%s\t%s\t%s\t%s\t-\t-\t-\t-\t-\t-\tfailed\n' "$rep" "$net" "$batch" "$method" "$steps" >>"$work/table"
      fi
    done
  done
done
results_commit "$work/header" "$work/table" "$OUT"
python3 "$HERE/../scripts/check_readme_results.py" --render "$OUT"

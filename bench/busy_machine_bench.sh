#!/usr/bin/env bash
# LeNet at --threads 2 on an idle machine and beside one busy process (`yes`, one core's worth of other work), in
# interleaved repetitions: what terngrad-train does by itself on a busy machine (it starts again with
# OMP_WAIT_POLICY=passive, src/apps/train_main.cc) against OpenMP's default there (TG_KEEP_WAIT_POLICY=1), and on an
# idle machine the default (nothing changes) against a forced OMP_WAIT_POLICY=passive (why it is not always set).
# Each run: TernGrad LeNet on the quick start's Fashion-MNIST shards, the metrics summary's median examples/sec
# after the first log window. Writes the results file (bench/lib/results.sh; default bench/results/busy_machine.tsv)
# and prints its table.
#
#   bench/busy_machine_bench.sh [-b BUILD_DIR] [-r REPEATS] [-d DATA_DIR] [-o FILE]
#
# Defaults: -b build, -r 3, -d /tmp/tg_quick/data (scripts/prepare_fashion_mnist.sh DATA_DIR makes it).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib/bench.sh
source "$HERE/lib/bench.sh" # tg_die, results_*, bench_getopts
B=build REPS=3 DATA=/tmp/tg_quick/data OUT=bench/results/busy_machine.tsv
bench_getopts "b:r:d:o:h" 10,12 b=B r=REPS d=DATA o=OUT -- "$@"
[[ "$REPS" =~ ^[1-9][0-9]*$ ]] || { echo "busy_machine_bench.sh: -r takes a positive integer" >&2; exit 2; }
bench_programs "$B" "build it, or pass -b" terngrad-train
[ -f "$DATA/test-00000-of-00001" ] || tg_die "no shards in $DATA (scripts/prepare_fashion_mnist.sh $DATA)"
work=$(mktemp -d)
busy=""
trap 'rm -rf "$work"; [ -n "$busy" ] && kill "$busy" 2> /dev/null' EXIT
run() {  # MACHINE POLICY ENV...: one run; prints its row
  local machine=$1 policy=$2 rate
  shift 2
  rm -rf "$work/t"
  env "$@" "$B/terngrad-train" --config configs/fashion_mnist_lenet_terngrad.ini --data_dir "$DATA" \
    --train_dir "$work/t" --max_steps 200 --log_every 50 --threads 2 --metrics_jsonl "$work/m.jsonl" > "$work/log" 2>&1
  rate=$(python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if l.strip()][-1]["median_examples_per_sec"])' "$work/m.jsonl")
  printf '%s\t%s\t%s\t%s\n' "$rep" "$machine" "$policy" "$rate" >> "$work/table"
  echo "rep $rep $machine $policy: $rate examples/sec" >&2
}
results_header busy_machine "$B" "$0" "${ARGS[@]}" > "$work/header"
echo "# net: lenet (configs/fashion_mnist_lenet_terngrad.ini: 2 workers, TernGrad), --threads 2, 200 steps; busy: one \`yes\` process" >> "$work/header"
printf 'rep\tmachine\tpolicy\texamples_per_sec\n' > "$work/table"
for ((rep = 1; rep <= REPS; rep++)); do
  run idle default X=1
  run idle passive OMP_WAIT_POLICY=passive
  yes > /dev/null &
  busy=$!
  sleep 1  # the busy process is running
  run busy default TG_KEEP_WAIT_POLICY=1
  run busy auto X=1
  kill "$busy"
  wait "$busy" 2> /dev/null || true
  busy=""
done
results_commit "$work/header" "$work/table" "$OUT"
python3 "$HERE/../scripts/check_readme_results.py" --render "$OUT"

#!/usr/bin/env bash
# placement_bench.sh: what placement does to the compute step on this machine, and why: one and two
# single-worker terngrad-train processes (no exchange: --exchange none, the compute-only step), pinned each to
# its own core, unpinned (the OS places them), and both on core 0 (what Open MPI's default binding does to the
# ranks of two emulated machines on one host). Per run: the median s/step of the timed steps, and the scheduler's
# counts for the whole process (every thread, from /proc/PID/task/*/sched, sampled while it runs): migrations
# between cores, context switches, involuntary switches. See bench/README.md, "Placement".
set -euo pipefail

usage() {
  cat <<'EOF'
usage: bench/placement_bench.sh [-b BUILD_DIR] [-n NET] [-B BATCH] [-s STEPS] [-w WARMUP] [-r REPEATS] [-o FILE]

  -b BUILD_DIR   build folder with terngrad-train (default: build)
  -n NET         lenet or alexnet (default: alexnet)
  -B BATCH       per-process batch (default 8)
  -s STEPS       steps per run (default 8), the first -w (default 2) untimed
  -r REPEATS     interleaved repetitions (default 3)
  -o FILE        results file (default bench/results/placement.tsv)
EOF
}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib/bench.sh
source "$HERE/lib/bench.sh" # tg_die, results_*, bench_options
# shellcheck source=lib/scratch.sh
source "$HERE/lib/scratch.sh"
BUILD_DIR=build NET=alexnet BATCH=8 STEPS=8 WARMUP=2 REPEATS=3 OUT=""
BENCH_VALUE_HINT="" bench_options -b=BUILD_DIR -n=NET -B=BATCH -s=STEPS -w=WARMUP -r=REPEATS -o=OUT -- "$@"
case "$NET" in lenet | alexnet) ;; *) tg_die "unknown net '$NET' (lenet, alexnet)" ;; esac
[[ "$BATCH" =~ ^[1-9][0-9]*$ && "$STEPS" =~ ^[0-9]+$ && "$WARMUP" =~ ^[1-9][0-9]*$ && "$REPEATS" =~ ^[1-9][0-9]*$ ]] ||
  tg_die "-B, -s, -w and -r take positive integers"
[ "$STEPS" -ge $((WARMUP + 2)) ] || tg_die "-s $STEPS: need at least 2 timed steps after -w $WARMUP"
command -v taskset >/dev/null || tg_die "needs taskset (util-linux)"
TRAIN=$BUILD_DIR/terngrad-train
[ -x "$TRAIN" ] || tg_die "no $TRAIN (build it, or pass -b)"
CORES=$(nproc --all)
[ "$CORES" -ge 2 ] || tg_die "needs at least 2 cores"
[ -n "$OUT" ] || OUT=$HERE/results/placement.tsv
DATASET=imagenet
[ "$NET" = lenet ] && DATASET=fashion_mnist
bench_scratch placement_bench

# The scheduler's counts of process PID, all threads summed: "migrations switches involuntary".
sched_counts() {
  local pid=$1 f
  for f in /proc/"$pid"/task/*/sched; do cat "$f" 2>/dev/null || true; done |
    awk '/^se.nr_migrations/ { m += $3 } /^nr_switches/ { s += $3 } /^nr_involuntary_switches/ { i += $3 }
         END { printf "%d %d %d\n", m, s, i }'
}

# One process: NAME CPUS(or "any") -> starts it, leaves its pid in PIDS and its sampler's file.
start() {
  local name=$1 cpus=$2 cmd=()
  [ "$cpus" = any ] || cmd=(taskset -c "$cpus")
  cmd+=("$TRAIN" --benchmark_mode --dataset "$DATASET" --net "$NET" --batch_size "$BATCH" --threads 1
    --exchange none --max_steps "$STEPS" --log_every 1 --save_iter 1000000 --train_dir "$TMP/$name"
    --metrics_jsonl "$TMP/$name.jsonl")
  rm -rf "${TMP:?}/$name" "$TMP/$name.jsonl"
  "${cmd[@]}" >"$TMP/$name.log" 2>&1 &
  local pid=$!
  PIDS+=("$pid")
  NAMES+=("$name")
  # Sample the counts while the process lives (the last sample is kept: /proc is gone at exit).
  (while kill -0 "$pid" 2>/dev/null; do
    c=$(sched_counts "$pid")
    [ -z "$c" ] || echo "$c" >"$TMP/$name.sched"
    sleep 0.2
  done) &
  SAMPLERS+=("$!")
}

HEADER=$TMP/header
TABLE=$TMP/table
results_header placement "$BUILD_DIR" "$0" "${ARGS[@]}" >"$HEADER"
echo "# options: net $NET, batch $BATCH, steps $STEPS, warm-up $WARMUP, repeats $REPEATS, 1 thread per process" >>"$HEADER"
printf 'rep\tplacement\tprocesses\tprocess\tcpus\tstep_s\tmigrations\tswitches\tinvoluntary\tstatus\tnote\n' >"$TABLE"

# placement name, then "process:cpus" pairs.
LAYOUTS=("alone-pinned 0:0" "alone-unpinned 0:any" "two-pinned 0:0 1:1" "two-unpinned 0:any 1:any"
  "two-on-core0 0:0 1:0")
for rep in $(seq "$REPEATS"); do
  for layout in "${LAYOUTS[@]}"; do
    read -r -a parts <<<"$layout"
    placement=${parts[0]}
    PIDS=() NAMES=() SAMPLERS=()
    for pc in "${parts[@]:1}"; do start "$placement-${pc%%:*}" "${pc#*:}"; done
    statuses=()
    for pid in "${PIDS[@]}"; do
      if wait "$pid"; then statuses+=(ok); else statuses+=(failed); fi
    done
    for s in "${SAMPLERS[@]}"; do wait "$s" 2>/dev/null || true; done
    for k in "${!NAMES[@]}"; do
      name=${NAMES[$k]}
      cpus=${parts[$((k + 1))]#*:}
      step=$(python3 - "$TMP/$name.jsonl" "$WARMUP" <<'EOF' || echo -
import json, statistics, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("%.4f" % statistics.median(l["sec_per_batch"] for l in lines if "step" in l and l["step"] > int(sys.argv[2])))
EOF
)
      read -r mig sw inv <<<"$(cat "$TMP/$name.sched" 2>/dev/null || echo "- - -")"
      note=""
      [ "${statuses[$k]}" = ok ] || note=$(tail -1 "$TMP/$name.log" | tr '\t' ' ')
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$rep" "$placement" $((${#parts[@]} - 1)) "$k" "$cpus" \
        "$step" "$mig" "$sw" "$inv" "${statuses[$k]}" "$note" >>"$TABLE"
      echo "placement_bench: $placement process $k on $cpus: $step s/step, $mig migrations, $sw switches" >&2
    done
  done
done
results_commit "$HEADER" "$TABLE" "$OUT"
python3 "$HERE/../scripts/check_readme_results.py" --render "$OUT"

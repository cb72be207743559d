#!/usr/bin/env bash
# The elastic launcher's cost of losing a machine: scripts/fault_elastic.sh (3 emulated machines lose one: its
# process killed, its link cut (rank 0's machine), its processes stopped; 2 gain a third) run REPEATS times. Each
# case: the seconds from the loss (or the new machine's appearance) to the first step of the next generation, the
# checkpoint it resumed from, the steps lost (logged past that checkpoint) and whether the final checkpoint equals,
# bit for bit, resuming by hand on the same layouts. The cases run with --collective_timeout 3 and the launcher's
# GRACE_S 5 (a stalled or cut-off machine is found after 3 s of no progress plus up to 2 s of the survivors' roll
# call; mpirun, which cannot reach it, is killed 5 s after the failure shows).
# Writes the results file (bench/lib/results.sh; default bench/results/elastic.tsv) and prints its table.
#
#   bench/elastic_bench.sh [-b BUILD_DIR] [-r REPEATS] [-o FILE]      (defaults: build, 5, bench/results/elastic.tsv)
#
# Needs root, ip, ping and mpirun (as the test does).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib/bench.sh
source "$HERE/lib/bench.sh" # tg_die, results_*, bench_getopts
B=build
REPS=5
OUT=bench/results/elastic.tsv
bench_getopts "b:r:o:h" 11,11 b=B r=REPS o=OUT -- "$@"
[[ "$REPS" =~ ^[1-9][0-9]*$ ]] || { echo "elastic_bench.sh: -r takes a positive integer" >&2; exit 2; }
bench_programs "$B" "build it, or pass -b" terngrad-train
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results_header elastic "$B" "$0" "${ARGS[@]}" > "$work/header"
printf 'rep\tcase\tloss_to_step_s\tfrom_step\tsteps_lost\tequal_to_by_hand\n' > "$work/table"
for ((i = 1; i <= REPS; i++)); do
  : > "$work/rows"
  if ! TG_ELASTIC_RESULTS="$work/rows" bash "$HERE/../scripts/fault_elastic.sh" "$B" > "$work/log.$i" 2>&1; then
    echo "elastic_bench.sh: repetition $i failed: $(grep -m3 FAIL "$work/log.$i")" >&2
  fi
  grep -q "SKIPPED" "$work/log.$i" && tg_die "$(cat "$work/log.$i")"
  sed "s/^/$i\t/" "$work/rows" >> "$work/table"
  echo "repetition $i: $(cut -f1,2 "$work/rows" | tr '\t\n' ' ,')" >&2
done
results_commit "$work/header" "$work/table" "$OUT"
python3 "$HERE/../scripts/check_readme_results.py" --render "$OUT"

#!/usr/bin/env bash
# accuracy_bench.sh: test accuracy of each gradient-exchange variant against fp32, over several seeds, for
# LeNet and CifarNet on Fashion-MNIST (MNIST optional), at 2, 4, 8 and 16 workers, and the gradient bytes each
# moved. Issue 30, item 4.
#
# Every run trains one recipe (configs/<dataset>_<net>_fp32.ini for fp32, _terngrad.ini for every TernGrad
# variant; the variant's flags on top, bench/lib/variants.sh) on 2 MPI processes of this machine, W/2 workers
# each, with the recipe's TOTAL batch (--batch_size is the total over all workers):
#   mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 terngrad-train --config RECIPE
#     --num_nodes W/2 --threads CORES/2 --seed S --max_steps STEPS VARIANT_FLAGS ...
# then evaluates the last checkpoint's moving averages of the weights (terngrad-eval --run_once, the default
# --restore_avg_var: the EMA weights, as scripts/demo.sh) on the test subset. The bytes come from the chief's
# --metrics_jsonl (bench/lib/tg_metrics.py): bytes moved per worker per step and over the run, the same for
# fp32's ring all-reduce, and the bytes into the chief's process on its communicator.
#
# One row per run goes to a results file (bench/lib/results.sh), rewritten atomically after every run; a run
# whose row is there with status ok is skipped, so a stopped bench resumes where it stopped (the same command,
# the same commit). bench/lib/render_accuracy.py renders the table (mean +- sd over seeds per net, dataset,
# workers and variant, the gap to fp32 in points, bytes as a fraction of fp32's).
set -euo pipefail
# The whole script is one block: bash reads it to the end before running it, so a checkout or an edit
# while a long bench runs cannot change what it runs.
{

usage() {
  cat <<'EOF'
usage: bench/accuracy_bench.sh [options]

  -b BUILD_DIR   build folder with terngrad-train, -eval, -data (default: build)
  -n NETS        comma-separated: lenet, cifarnet (default: both)
  -d DATASETS    comma-separated: fashion_mnist, mnist (default: fashion_mnist; mnist needs -M)
  -M IDX_DIR     MNIST's idx files (train-images-idx3-ubyte[.gz] ...): no Debian package ships MNIST
  -w WORKERS     comma-separated totals of workers (default: 2,4,8,16); each a multiple of -p
  -p PROCESSES   MPI processes (default 2): W workers are PROCESSES x W/PROCESSES
  -v VARIANTS    comma-separated variants (default: fp32,terngrad,ef,bucket256,warmup,best);
                 fp32, fp16, terngrad, or TernGrad levers joined by +: ef, bucketN, warmup[K], noclip, clipC
                 (bench/lib/variants.sh; best = ef+bucket256+warmup)
  -s SEEDS       comma-separated seeds (default: 1,2,3)
  -S STEPS       steps per run (default: the recipe's max_steps: 1875 for Fashion-MNIST)
  -t THREADS     compute threads per process (default: cores / processes, at least 1)
  -x "FLAGS"     extra terngrad-train flags for every run (recorded in the flags column)
  -q N           TernGrad variants: --quantization_error_every N (default 125; 0: off): the mean relative error
                 of the averaged gradient against fp32's over the probes, and of the non-zero codes, in the row
                 (the probes change no bit of the run)
  -o FILE        the results file (default: bench/results/accuracy.tsv)
  -W WORK_DIR    converted data and the runs' folders (default: /tmp/terngrad_accuracy)
  -E             no run-time estimate (no calibration runs)
  -N             dry run: print the plan, the commands and the estimate, train nothing else (the estimate's
                 short timing runs do run, unless -E)
  -f             resume a results file written at another commit (its rows are kept as they are)
  -k             keep each run's train_dir, logs and metrics (default: removed after the row is written)
  -h, --help     this text

The estimate: each (net, dataset, workers) is timed once by a short fp32 run (60 steps and one evaluation),
or taken from the ok rows of the results file; a TernGrad run is assumed to take as long.
EOF
}

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib/bench.sh
source "$HERE/lib/bench.sh" # TG_ROOT, tg_die, results_*, bench_options
# shellcheck source=lib/scratch.sh
source "$HERE/lib/scratch.sh"
# shellcheck source=lib/variants.sh
source "$HERE/lib/variants.sh"
# shellcheck source=lib/datasets.sh
source "$HERE/lib/datasets.sh"

# ---- arguments -------------------------------------------------------------------------------------------
BUILD_DIR=build
NETS=lenet,cifarnet
DATASETS=fashion_mnist
MNIST_DIR=""
WORKERS=2,4,8,16
PROCS=2
VARIANTS=fp32,terngrad,ef,bucket256,warmup,best
SEEDS=1,2,3
STEPS=""
THREADS=""
EXTRA=""
PROBE_EVERY=125
OUT=bench/results/accuracy.tsv
WORK=/tmp/terngrad_accuracy
ESTIMATE=1
DRY_RUN=0
FORCE=0
KEEP=0
bench_options -b=BUILD_DIR -n=NETS -d=DATASETS -M=MNIST_DIR -w=WORKERS -p=PROCS -v=VARIANTS -s=SEEDS -S=STEPS \
  -t=THREADS -x=EXTRA -q=PROBE_EVERY -o=OUT -W=WORK -E:ESTIMATE=0 -N:DRY_RUN=1 -f:FORCE=1 -k:KEEP=1 -- "$@"

# Refusals first, before anything is created or trained.
bench_need_tools mpirun python3 timeout
bench_programs "$BUILD_DIR" "build it: cmake --build $BUILD_DIR; or pass -b" terngrad-train=TRAIN terngrad-eval=EVAL \
  terngrad-data=DATA
IFS=, read -r -a NET_LIST <<<"$NETS"
IFS=, read -r -a DATASET_LIST <<<"$DATASETS"
IFS=, read -r -a WORKER_LIST <<<"$WORKERS"
IFS=, read -r -a VARIANT_LIST <<<"$VARIANTS"
IFS=, read -r -a SEED_LIST <<<"$SEEDS"
read -r -a EXTRA_FLAGS <<<"$EXTRA"
[[ "$PROCS" =~ ^[1-9][0-9]*$ ]] || tg_die "-p takes a positive integer"
CORES=$(nproc)
[ -n "$THREADS" ] || THREADS=$((CORES / PROCS > 0 ? CORES / PROCS : 1))
[[ "$THREADS" =~ ^[1-9][0-9]*$ ]] || tg_die "-t takes a positive integer"
[ -z "$STEPS" ] || [[ "$STEPS" =~ ^[1-9][0-9]*$ ]] || tg_die "-S takes a positive integer"
[[ "$PROBE_EVERY" =~ ^[0-9]+$ ]] || tg_die "-q takes a number of steps (0: off)"
for n in "${NET_LIST[@]}"; do
  case "$n" in lenet | cifarnet) ;; *) tg_die "unknown net '$n' (lenet, cifarnet)" ;; esac
done
for d in "${DATASET_LIST[@]}"; do
  case "$d" in
    fashion_mnist) ;;
    mnist) [ -n "$MNIST_DIR" ] || tg_die "-d mnist needs -M IDX_DIR: no Debian package ships MNIST (only dataset-fashion-mnist)" ;;
    *) tg_die "unknown dataset '$d' (fashion_mnist, mnist)" ;;
  esac
done
for w in "${WORKER_LIST[@]}"; do
  { [[ "$w" =~ ^[1-9][0-9]*$ ]] && [ $((w % PROCS)) = 0 ]; } || tg_die "-w $w: each worker count must be a multiple of $PROCS processes"
done
for s in "${SEED_LIST[@]}"; do [[ "$s" =~ ^[0-9]+$ ]] || tg_die "-s $s: seeds are integers"; done
for v in "${VARIANT_LIST[@]}"; do variant_flags "$v" >/dev/null || tg_die "bad variant '$v'"; done
MISSING_FLAGS=$(variant_missing "$TRAIN" "${VARIANT_LIST[@]}")
[ -z "$MISSING_FLAGS" ] || tg_die "this build's terngrad-train has no $MISSING_FLAGS (needed by -v $VARIANTS): rebuild, or leave those variants out"
# The recipe of each (dataset, net, kind), and its steps and total batch.
recipe_of() { # dataset net variant
  local kind
  kind=$(variant_kind "$3")
  [ "$kind" = fp16 ] && kind=fp32
  echo "$TG_ROOT/configs/$1_$2_$kind.ini"
}
for d in "${DATASET_LIST[@]}"; do
  for n in "${NET_LIST[@]}"; do
    for v in "${VARIANT_LIST[@]}"; do
      r=$(recipe_of "$d" "$n" "$v")
      [ -f "$r" ] || tg_die "no recipe $r for $n on $d ($v)"
    done
  done
done
steps_of() { # dataset net variant
  if [ -n "$STEPS" ]; then echo "$STEPS"; else ini_value "$(recipe_of "$@")" max_steps; fi
}
for d in "${DATASET_LIST[@]}"; do
  for n in "${NET_LIST[@]}"; do
    b=$(ini_value "$(recipe_of "$d" "$n" fp32)" batch_size)
    for w in "${WORKER_LIST[@]}"; do
      [ $((b % w)) = 0 ] || tg_die "$n on $d: the recipe's total batch $b does not split evenly over $w workers"
    done
  done
done
case "$OUT" in /*) ;; *) OUT=$(pwd)/$OUT ;; esac
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)

# ---- the results file: what is there, what to run ---------------------------------------------------------
COLUMNS_LINE=$'net\tdataset\tworkers\tlayout\tvariant\tflags\tseed\tsteps\tprecision_at_1\trecall_at_5\teval_examples\tbytes_per_step\tbytes_run\tfp32_bytes_per_step\tfp32_bytes_run\twire_bytes_per_step\twire_bytes_run\texchange\texamples_per_sec\ttrain_wall_s\teval_wall_s\tparameter_digest\tload1\tstatus\tnote\tquant_error\tnonzero_codes\tprobes'
bench_scratch accuracy_bench
HEADER=$TMP/header
ROWS=$TMP/rows # the table's rows without its header line
: >"$ROWS"
HEAD_COMMIT=$(git -C "$TG_ROOT" rev-parse HEAD 2>/dev/null || echo unknown)
if [ -f "$OUT" ]; then
  grep -q '^# kind: accuracy$' "$OUT" || tg_die "$OUT exists and is not an accuracy results file"
  old_commit=$(sed -n 's/^# commit: //p' "$OUT")
  if [ "$old_commit" != "$HEAD_COMMIT" ] && [ "$FORCE" = 0 ]; then
    tg_die "$OUT was measured at commit $old_commit, this checkout is $HEAD_COMMIT: move it away, or -f to add to it"
  fi
  results_resume accuracy "$OUT" "$COLUMNS_LINE" "$HEADER" "$ROWS" || tg_die "cannot resume $OUT"
  [ "$DRY_RUN" = 1 ] || results_resumed_line "$0" "${ARGS[@]}" >>"$HEADER"
  echo "accuracy_bench.sh: resuming $OUT: $(awk -F'\t' '$24 == "ok"' "$ROWS" | wc -l) ok rows" >&2
else
  results_header accuracy "$BUILD_DIR" "$0" "${ARGS[@]}" >"$HEADER"
  {
    echo "# layout: mpirun -np $PROCS on this machine (--bind-to none), W/$PROCS workers and --threads $THREADS per process; evaluation: terngrad-eval --run_once --threads $CORES, EMA weights, test subset"
    echo "# recipes: configs/<dataset>_<net>_fp32.ini (fp32, fp16) and _terngrad.ini (TernGrad variants), variant flags on top (bench/lib/variants.sh); extra flags: ${EXTRA:-none}"
  } >>"$HEADER"
fi
key_of() { printf '%s\t%s\t%s\t%s\t%s\t%s' "$@"; } # net dataset workers variant seed steps
done_key() { # true when an ok row of these six keys is in ROWS
  awk -F'\t' -v k="$1" '$24 == "ok" && ($1 "\t" $2 "\t" $3 "\t" $5 "\t" $7 "\t" $8) == k { found = 1 } END { exit !found }' "$ROWS"
}
commit_rows() {
  local table=$TMP/table
  { echo "$COLUMNS_LINE"; cat "$ROWS"; } >"$table"
  results_commit "$HEADER" "$table" "$OUT" 2>/dev/null
}

# The plan: seeds outermost, so a stopped bench has whole seeds first.
PLAN=()
for seed in "${SEED_LIST[@]}"; do
  for d in "${DATASET_LIST[@]}"; do
    for n in "${NET_LIST[@]}"; do
      for w in "${WORKER_LIST[@]}"; do
        for v in "${VARIANT_LIST[@]}"; do
          st=$(steps_of "$d" "$n" "$v")
          done_key "$(key_of "$n" "$d" "$w" "$v" "$seed" "$st")" || PLAN+=("$n $d $w $v $seed $st")
        done
      done
    done
  done
done
total=$((${#SEED_LIST[@]} * ${#DATASET_LIST[@]} * ${#NET_LIST[@]} * ${#WORKER_LIST[@]} * ${#VARIANT_LIST[@]}))
echo "# accuracy_bench: $(date -u '+%Y-%m-%d %H:%M UTC'), terngrad $(git -C "$TG_ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')," \
  "$CORES cores, ISA $(results_isa | cut -d' ' -f1), load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
echo "# $total runs selected, ${#PLAN[@]} to run ($((total - ${#PLAN[@]})) already in $OUT); $PROCS processes x W/$PROCS workers, $THREADS threads each" >&2

# ---- data ------------------------------------------------------------------------------------------------
data_dir() { echo "$WORK/data/$1"; }
if [ "$DRY_RUN" = 0 ] || [ "$ESTIMATE" = 1 ]; then
  for d in "${DATASET_LIST[@]}"; do
    idx=""
    [ "$d" = mnist ] && idx=$MNIST_DIR
    dataset_prepare "$d" "$(data_dir "$d")" 4 "$DATA" "$idx" || tg_die "could not prepare $d"
  done
fi

# ---- one run ---------------------------------------------------------------------------------------------
train_command() { # net dataset workers variant seed steps dir log_every save_iter -> the command, one word a line
  local n=$1 d=$2 w=$3 v=$4 seed=$5 steps=$6 dir=$7 log_every=$8 save_iter=$9 flags
  read -r -a flags <<<"$(variant_flags "$v")"
  [ "$PROBE_EVERY" = 0 ] || [ "$(variant_kind "$v")" != terngrad ] || flags+=(--quantization_error_every "$PROBE_EVERY")
  printf '%s\n' mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$PROCS" "$TRAIN" \
    --config "$(recipe_of "$d" "$n" "$v")" --num_nodes $((w / PROCS)) --threads "$THREADS" --seed "$seed" \
    --max_steps "$steps" --data_dir "$(data_dir "$d")" --train_dir "$dir/train" --save_iter "$save_iter" \
    --keep_checkpoints 1 --log_every "$log_every" --metrics_jsonl "$dir/metrics.jsonl" "${flags[@]}" "${EXTRA_FLAGS[@]}"
}

# Trains and evaluates; prints "train_wall eval_wall precision recall examples" or returns 1 (the log says why).
train_and_eval() { # net dataset workers variant seed steps dir log_every save_iter
  local dir=$7 cmd t0 t1 t2 line
  mkdir -p "$dir"
  mapfile -t cmd < <(train_command "$@")
  t0=$(now)
  run timeout $(($6 * 5 + 900)) "${cmd[@]}" >"$dir/train.log" 2>&1 || return 1
  t1=$(now)
  run timeout 900 "$EVAL" --checkpoint_dir "$dir/train" --data_dir "$(data_dir "$2")" --subset test --run_once \
    --threads "$CORES" >"$dir/eval.log" 2>&1 || return 1
  t2=$(now)
  line=$(grep -o 'precision @ 1 = [0-9.]* recall @ 5 = [0-9.]* \[[0-9]* examples\]' "$dir/eval.log" | tail -1)
  [ -n "$line" ] || return 1
  local w
  read -r -a w <<<"$line" # precision @ 1 = P recall @ 5 = R [N examples]
  echo "$(elapsed "$t0" "$t1") $(elapsed "$t1" "$t2") ${w[4]} ${w[9]} ${w[10]#[}"
}

log_every_of() { # variant -> gcd(25, the warm-up's steps)
  local a=25 b=0 f prev="" t
  for f in $(variant_flags "$1"); do
    [ "$prev" = --fp32_warmup_steps ] && b=$f
    prev=$f
  done
  while [ "$b" != 0 ]; do
    t=$((a % b))
    a=$b
    b=$t
  done
  echo "$a"
}

# ---- the estimate ----------------------------------------------------------------------------------------
declare -A PER_RUN # "net dataset workers" -> estimated seconds per step, and per run's fixed part
declare -A EST_FROM # ... -> where that came from
estimate_of() { # net dataset workers steps -> seconds
  local k="$1 $2 $3" per fixed
  read -r per fixed <<<"${PER_RUN[$k]:-0 0}"
  awk -v p="$per" -v f="$fixed" -v s="$4" 'BEGIN { printf "%.0f\n", p * s + f }'
}
if [ "$ESTIMATE" = 1 ] && [ ${#PLAN[@]} -gt 0 ]; then
  CAL_STEPS=60
  declare -A SEEN=()
  for p in "${PLAN[@]}"; do
    read -r n d w _ _ st <<<"$p"
    [ -z "${SEEN["$n $d $w"]+x}" ] || continue
    SEEN["$n $d $w"]=1
    # The ok rows of the file first: their mean wall seconds per step (training, evaluation as a fixed part).
    est=$(awk -F'\t' -v n="$n" -v d="$d" -v w="$w" '$24 == "ok" && $1 == n && $2 == d && $3 == w {
        c++; per += $20 / $8; fixed += $21 } END { if (c) printf "%.6f %.1f\n", per / c, fixed / c }' "$ROWS")
    EST_FROM["$n $d $w"]="the results file's ok rows (wall s per step)"
    if [ -z "$est" ]; then
      EST_FROM["$n $d $w"]="a $CAL_STEPS-step fp32 run (median s per step)"
      cdir=$TMP/calibrate
      rm -rf "$cdir"
      echo "# timing $n on $d at $w workers ($CAL_STEPS fp32 steps and one evaluation) ..." >&2
      if out=$(train_and_eval "$n" "$d" "$w" fp32 1 "$CAL_STEPS" "$cdir" 10 1000000000); then
        read -r tw ew _ <<<"$out"
        # The steps' own time from the metrics (the windows after the first), the rest of the wall is fixed.
        est=$(python3 - "$cdir/metrics.jsonl" "$tw" "$ew" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
steps = [r for r in rows if "step" in r and not r.get("summary")]
per = statistics.median(r["sec_per_batch"] for r in steps[1:] or steps)
run = sum(r["sec_per_batch"] * 10 for r in steps)
print("%.6f %.1f" % (per, max(0.0, float(sys.argv[2]) - run) + float(sys.argv[3])))
EOF
        )
      else
        echo "accuracy_bench.sh: the timing run of $n on $d at $w workers failed: $(why "$cdir/train.log")" >&2
        est="0 0"
        EST_FROM["$n $d $w"]="nothing: its timing run failed"
      fi
    fi
    PER_RUN["$n $d $w"]=$est
  done
  total_s=0
  echo "# estimate (seconds per run: training + evaluation):" >&2
  for k in "${!SEEN[@]}"; do
    read -r n d w <<<"$k"
    cnt=0
    for p in "${PLAN[@]}"; do
      read -r pn pd pw _ _ st <<<"$p"
      [ "$pn $pd $pw" = "$k" ] && cnt=$((cnt + 1))
    done
    s=$(estimate_of "$n" "$d" "$w" "$st")
    printf '#   %-8s %-13s %2s workers: %5s s x %3d runs (%s s/step + %s s, from %s)\n' "$n" "$d" "$w" "$s" "$cnt" \
      "$(cut -d' ' -f1 <<<"${PER_RUN[$k]}")" "$(cut -d' ' -f2 <<<"${PER_RUN[$k]}")" "${EST_FROM[$k]}" >&2
    total_s=$((total_s + s * cnt))
  done
  echo "# estimated total: $total_s s ($(awk -v s="$total_s" 'BEGIN { printf "%.1f h", s / 3600 }')) for ${#PLAN[@]} runs" >&2
fi

if [ "$DRY_RUN" = 1 ]; then
  for p in "${PLAN[@]}"; do
    read -r n d w v seed st <<<"$p"
    echo "# $n $d $w workers $v seed $seed:"
    train_command "$n" "$d" "$w" "$v" "$seed" "$st" "$WORK/run" 25 1000000000 | paste -sd' ' -
  done
  exit 0
fi

# ---- the runs --------------------------------------------------------------------------------------------
i=0
for p in "${PLAN[@]}"; do
  i=$((i + 1))
  read -r n d w v seed st <<<"$p"
  run_flags="$(variant_flags "$v")${EXTRA:+ $EXTRA}"
  layout="${PROCS}x$((w / PROCS))"
  load=$(cut -d' ' -f1 /proc/loadavg)
  dir=$WORK/runs/$n-$d-w$w-$v-s$seed
  rm -rf "$dir"
  echo "# [$i/${#PLAN[@]}] $n $d $w workers ($layout) $v seed $seed, $st steps ..." >&2
  # --log_every 25 (divides the recipes' 1875 steps), or the largest divisor of 25 and the warm-up's K, so no log
  # window holds both fp32 and ternary steps: their bytes add up exactly (bench/lib/tg_metrics.py). One
  # checkpoint, at the end.
  log_every=$(log_every_of "$v")
  if out=$(train_and_eval "$n" "$d" "$w" "$v" "$seed" "$st" "$dir" "$log_every" 1000000000) &&
    m=$(python3 "$HERE/lib/tg_metrics.py" bytes "$dir/metrics.jsonl"); then
    read -r tw ew prec rec ex <<<"$out"
    IFS=$'\t' read -r _ bps brun fps frun wps wrun eps digest _ <<<"$m"
    IFS=$'\t' read -r qerr qnz qn <<<"$(python3 "$HERE/lib/tg_metrics.py" quantization "$dir/metrics.jsonl")"
    exch=$(sed -n 's/.*| exchange \(.*\), [0-9]* buckets\{0,1\}.*/\1/p' "$dir/train.log" | head -1 |
      sed 's/ after \([0-9]*\) steps of fp32 (--fp32_warmup_steps)/ after \1 fp32 steps/')
    row=("$n" "$d" "$w" "$layout" "$v" "$run_flags" "$seed" "$st" "$prec" "$rec" "$ex" "$bps" "$brun" "$fps" "$frun"
      "$wps" "$wrun" "${exch:--}" "$eps" "$tw" "$ew" "$digest" "$load" ok "" "$qerr" "$qnz" "$qn")
    echo "#   precision @ 1 $prec, $bps bytes/step per worker (fp32 $fps), train $tw s, eval $ew s, averaged-gradient error $qerr" >&2
  else
    log=$dir/train.log
    [ -s "$dir/eval.log" ] && log=$dir/eval.log
    echo "accuracy_bench.sh: the run failed; last lines of $log:" >&2
    tail -n 8 "$log" >&2 || true
    row=("$n" "$d" "$w" "$layout" "$v" "$run_flags" "$seed" "$st" - - - - - - - - - - - - - - "$load" failed "$(why "$log")"
      - - -)
  fi
  # The row replaces an earlier one of the same run (a failed one: ok rows were not planned).
  k=$(key_of "$n" "$d" "$w" "$v" "$seed" "$st")
  awk -F'\t' -v k="$k" '($1 "\t" $2 "\t" $3 "\t" $5 "\t" $7 "\t" $8) != k' "$ROWS" >"$ROWS.new"
  (
    IFS=$'\t'
    echo "${row[*]}"
  ) >>"$ROWS.new"
  mv "$ROWS.new" "$ROWS"
  commit_rows
  [ "$KEEP" = 1 ] || rm -rf "$dir"
done
[ ${#PLAN[@]} -gt 0 ] || commit_rows
echo "results: $OUT" >&2
python3 "$HERE/lib/render_accuracy.py" "$OUT"
exit
}

#!/usr/bin/env bash
# tta_bench.sh: time to accuracy over an emulated link: LeNet on Fashion-MNIST trained by each system with the
# same recipe until its test accuracy first reaches a target, on 2 and 4 emulated machines at each RATE. Issue
# 30, item 5.
#
# Emulated machines: bench/lib/netns_link.sh (a namespace each on one bridge, both directions of every port
# shaped at RATE), as bench/link_bench.sh. One process per machine, pinned the same way for every system:
# process k (0-based) on core k mod CORES (taskset), one compute thread.
# The recipe: configs/fashion_mnist_lenet_fp32.ini (the demo's: momentum 0.9, LR 0.01 polynomial, weight decay
# 5e-4, total batch 64, 1875 steps), and the test accuracy of the moving averages of the weights.
# Systems (-S):
#   fp32, terngrad, best   ours: terngrad-train under mpirun across the machines (--num_nodes 1 per process,
#                          --threads 1), the recipe (_fp32.ini or _terngrad.ini) and the variant's flags
#                          (bench/lib/variants.sh: terngrad is the paper's --grad_bits 1 --clip_factor 2.5; best
#                          is -B), a checkpoint every K steps (--save_iter K --keep_checkpoints 1000000) and the
#                          step times (--metrics_jsonl, --log_every K); after the training every checkpoint is
#                          evaluated (terngrad-eval --checkpoint_path, EMA weights, all cores, no link), so the
#                          evaluation is outside the timed training. Its clock: the steps' own times summed
#                          (sec_per_batch of each log window times its steps, bench/lib/tg_metrics.py), without
#                          the start-up, the checkpoint saves or the evaluation.
#   ddp, powersgd          PyTorch DDP (gloo), bench/tta_peer.py (the same LeNet, data, preprocessing, optimizer,
#                          schedule, weight decay and EMA; see its header), fp32 all-reduce or the PowerSGD comm
#                          hook (rank -P, start_powerSGD_iter -I); it evaluates every K steps with its clock
#                          paused (its evaluation seconds are reported apart). PyTorch: the venv of
#                          `bench/setup_peers.sh --pypi` (torch 2.15 from PyPI); --debian-torch: Debian's 1.13.
# The target: fp32's final test accuracy minus 0.3 points, its mean over seeds, from the accuracy bench's results
# file (-A; its fp32 LeNet Fashion-MNIST rows of 2 workers and the same steps), or -t.
# A row per run and repetition (repetitions interleaved: every system at every link and machine count, then
# the next repetition; repetition r trains with seed r) goes to the results file (bench/lib/results.sh), rewritten
# after every run; bench/lib/render_accuracy.py renders the medians.
set -euo pipefail
# The whole script is one block: bash reads it to the end before running it, so a checkout or an edit
# while a long bench runs cannot change what it runs.
{

usage() {
  cat <<'EOF'
usage: bench/tta_bench.sh [options] RATE [RATE...]

  RATE            a tc rate (1gbit, 100mbit, ...; bench/lib/netns_link.sh) or `none` (unshaped)
  -b BUILD_DIR    build folder with terngrad-train, -eval, -data (default: build)
  -m MACHINES     comma-separated emulated machine counts (default: 2,4)
  -S SYSTEMS      comma-separated: fp32, terngrad, best, ddp, powersgd (default: all)
  -B VARIANT      our best combination, a variant of bench/lib/variants.sh (default: best = ef+bucket256+warmup)
  -t TARGET       the target test accuracy (a fraction, e.g. 0.8967) instead of -A's
  -A FILE         the accuracy bench's results file for the target (default: bench/results/accuracy.tsv)
  -K STEPS        evaluate every K steps (default: 75)
  -n STEPS        training steps (default: the recipe's, 1875)
  -r REPEATS      repetitions, interleaved (default: 3; the renderer's medians need at least 3)
  -P RANK         PowerSGD's matrix_approximation_rank (default: 2)
  -I ITER         PowerSGD's start_powerSGD_iter (default: 10% of the steps, PyTorch's advice)
  -x "FLAGS"      extra terngrad-train flags for our runs
  -o FILE         the results file (default: bench/results/tta-lenet.tsv)
  -W WORK_DIR     converted data and the runs' folders (default: /tmp/terngrad_tta)
  -p PYTHON       the peer's python (default: bench/lib/peer_python.sh: the PyPI venv of bench/setup_peers.sh)
  --debian-torch  the peer on Debian's PyTorch 1.13 (/usr/bin/python3; bench/setup_peers.sh --debian)
  --no-pin        do not pin the processes
  -k              keep each run's folder (checkpoints, logs, metrics)
  --resume        go on with the results file of a stopped run of the same command (the same arguments but
                  --resume, the same target): its rows are kept, the runs it has a row "ok" for are not run
                  again, and its header gains a line saying when, and at which commit, the run went on
  -h, --help      this text

Needs root, ip, tc, taskset, mpirun and python3. A peer that is missing (no PyTorch with gloo in PYTHON) or
fails writes a row saying so.
EOF
}

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib/bench.sh
source "$HERE/lib/bench.sh" # TG_ROOT, tg_die, results_*, bench_options
# shellcheck source=lib/netns_link.sh
source "$HERE/lib/netns_link.sh"
# shellcheck source=lib/scratch.sh
source "$HERE/lib/scratch.sh"
# shellcheck source=lib/variants.sh
source "$HERE/lib/variants.sh"
# shellcheck source=lib/datasets.sh
source "$HERE/lib/datasets.sh"
# shellcheck source=lib/rank_pinning.sh
source "$HERE/lib/rank_pinning.sh"

# ---- arguments -------------------------------------------------------------------------------------------
BUILD_DIR=build
MACHINES=2,4
SYSTEMS=fp32,terngrad,best,ddp,powersgd
BEST=best
TARGET=""
ACC_FILE=bench/results/accuracy.tsv
EVAL_EVERY=75
STEPS=""
REPEATS=3
PSGD_RANK=2
PSGD_START=""
EXTRA=""
OUT=bench/results/tta-lenet.tsv
WORK=/tmp/terngrad_tta
# shellcheck source=lib/peer_python.sh
source "$HERE/lib/peer_python.sh"
PYTHON=$(peer_python)
PIN=1
KEEP=0
RESUME=0
RATES=()
bench_options -b=BUILD_DIR -m=MACHINES -S=SYSTEMS -B=BEST -t=TARGET -A=ACC_FILE -K=EVAL_EVERY -n=STEPS -r=REPEATS \
  -P=PSGD_RANK -I=PSGD_START -x=EXTRA -o=OUT -W=WORK -p=PYTHON \
  "--debian-torch:PYTHON=$(TG_PEER=debian PYTHON="" peer_python)" --no-pin:PIN=0 -k:KEEP=1 --resume:RESUME=1 @RATES \
  -- "$@"

# Refusals first, before anything is created.
bench_link_refusals "ip tc mpirun python3 taskset timeout" "1gbit 100mbit" "100mbit, 1gbit (>= 8kbit)" "${RATES[@]}"
bench_programs "$BUILD_DIR" "build it: cmake --build $BUILD_DIR; or pass -b" terngrad-train=TRAIN terngrad-eval=EVAL \
  terngrad-data=DATA
IFS=, read -r -a MACHINE_LIST <<<"$MACHINES"
IFS=, read -r -a SYSTEM_LIST <<<"$SYSTEMS"
read -r -a EXTRA_FLAGS <<<"$EXTRA"
RECIPE_FP32=$TG_ROOT/configs/fashion_mnist_lenet_fp32.ini
RECIPE_TERN=$TG_ROOT/configs/fashion_mnist_lenet_terngrad.ini
[ -n "$STEPS" ] || STEPS=$(ini_value "$RECIPE_FP32" max_steps)
BATCH=$(ini_value "$RECIPE_FP32" batch_size)
[[ "$STEPS" =~ ^[1-9][0-9]*$ ]] || tg_die "-n takes a positive integer"
[[ "$EVAL_EVERY" =~ ^[1-9][0-9]*$ ]] || tg_die "-K takes a positive integer"
[[ "$REPEATS" =~ ^[1-9][0-9]*$ ]] || tg_die "-r takes a positive integer"
[[ "$PSGD_RANK" =~ ^[1-9][0-9]*$ ]] || tg_die "-P takes a positive integer"
[ -n "$PSGD_START" ] || PSGD_START=$((STEPS / 10 > 2 ? STEPS / 10 : 2))
{ [[ "$PSGD_START" =~ ^[0-9]+$ ]] && [ "$PSGD_START" -ge 2 ]; } || tg_die "-I takes an integer >= 2 (PyTorch's minimum with error feedback)"
MAXM=0
for m in "${MACHINE_LIST[@]}"; do
  { [[ "$m" =~ ^[1-9][0-9]*$ ]] && [ "$m" -ge 2 ]; } || tg_die "-m $m: machine counts are integers >= 2"
  [ $((BATCH % m)) = 0 ] || tg_die "-m $m: the recipe's total batch $BATCH does not split over $m machines"
  [ "$m" -le "$MAXM" ] || MAXM=$m
done
for s in "${SYSTEM_LIST[@]}"; do
  case "$s" in fp32 | terngrad | best | ddp | powersgd) ;; *) tg_die "unknown system '$s' (fp32, terngrad, best, ddp, powersgd)" ;; esac
done
variant_flags "$BEST" >/dev/null || tg_die "-B $BEST is not a variant"
OURS_VARIANTS=()
for s in "${SYSTEM_LIST[@]}"; do
  case "$s" in fp32 | terngrad) OURS_VARIANTS+=("$s") ;; best) OURS_VARIANTS+=("$BEST") ;; esac
done
if [ ${#OURS_VARIANTS[@]} -gt 0 ]; then
  MISSING_FLAGS=$(variant_missing "$TRAIN" "${OURS_VARIANTS[@]}")
  [ -z "$MISSING_FLAGS" ] || tg_die "this build's terngrad-train has no $MISSING_FLAGS (needed by -B $BEST): rebuild, pass another -B, or leave best out of -S"
fi
# The target.
TARGET_NOTE="-t $TARGET"
if [ -z "$TARGET" ]; then
  [ -f "$ACC_FILE" ] || tg_die "no $ACC_FILE for the target (run bench/accuracy_bench.sh first, or pass -t ACCURACY)"
  t=$(python3 "$HERE/lib/render_accuracy.py" --target "$ACC_FILE" --net lenet --dataset fashion_mnist --workers 2 \
    --steps "$STEPS") || tg_die "no target in $ACC_FILE (pass -t ACCURACY)"
  read -r TARGET fp32_mean fp32_n <<<"$t"
  TARGET_NOTE="fp32's mean $fp32_mean over $fp32_n seeds (LeNet, Fashion-MNIST, 2 workers, $STEPS steps, $ACC_FILE) minus 0.3 points"
fi
awk -v t="$TARGET" 'BEGIN { exit !(t > 0 && t <= 1) }' || tg_die "the target $TARGET is not a fraction in (0, 1]"
case "$OUT" in /*) ;; *) OUT=$(pwd)/$OUT ;; esac
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
CORES=$(nproc)
if [ "$PIN" = 1 ] && [ "$CORES" -lt 2 ]; then
  echo "tta_bench.sh: $CORES core: not pinned" >&2
  PIN=0
fi
# A missing peer is not a refusal: its rows say so.
PEER_MISSING=""
TORCH_VERSION=none
if [[ " ${SYSTEM_LIST[*]} " == *" ddp "* || " ${SYSTEM_LIST[*]} " == *" powersgd "* ]]; then
  if TORCH_VERSION=$("$PYTHON" -c 'import torch, torch.distributed as d; assert d.is_gloo_available(); print(torch.__version__)' 2>/dev/null); then
    :
  else
    TORCH_VERSION=none
    PEER_MISSING="no PyTorch with gloo in $PYTHON (bench/setup_peers.sh --pypi)"
    echo "tta_bench.sh: $PEER_MISSING: the DDP rows will say so" >&2
  fi
fi

# ---- data, the link, the helpers -------------------------------------------------------------------------
SHARDS=$((MAXM > 4 ? MAXM : 4)) # every process reads its own share of the shards
DATA_DIR=$WORK/data/fashion_mnist-$SHARDS
dataset_prepare fashion_mnist "$DATA_DIR" "$SHARDS" "$DATA" || tg_die "could not prepare Fashion-MNIST"
IDX_DIR=$(dataset_idx_default fashion_mnist)

bench_scratch tta_bench

netlink_create "tgtta$$" "$MAXM" "$TMP/netns_agent.sh"
IF=$NETLINK_IF
PINNER=$TMP/pin_rank.sh
write_rank_pinner "$PINNER"

# The first point of a curve ("step seconds accuracy" lines) at or above the target: "seconds steps", or
# "not reached -"; then the final accuracy and step.
reach() { # curve_file
  awk -v t="$TARGET" '{ if (!hit && $3 >= t) { hit = 1; s = $2; n = $1 } last = $3; lstep = $1 }
    END { if (hit) printf "%.3f %d", s, n; else printf "not_reached -"; printf " %s %s\n", last, lstep }' "$1"
}
reached_text() { if [ "$1" = "not reached" ]; then echo "target not reached"; else echo "target at $1 s (step $2)"; fi; }
curve_words() { awk '{ printf "%s%s:%.3f:%s", (NR > 1 ? " " : ""), $1, $2, $3 }' "$1"; }

# ---- the results file ------------------------------------------------------------------------------------
COLUMNS_LINE=$'rep\tseed\tload1\trate\tmachines\tsystem\tflags\tsteps\teval_every\ttarget\tseconds_to_target\tsteps_to_target\tfinal_accuracy\tfinal_step\ttrain_s\teval_s\twall_s\tstatus\tnote\tcurve'
HEADER=$TMP/header
results_header tta "$BUILD_DIR" "$0" "${ARGS[@]}" >"$HEADER"
{
  echo "# target: $TARGET ($TARGET_NOTE)"
  echo "# recipe: configs/fashion_mnist_lenet_fp32.ini (ours: _terngrad.ini for the TernGrad variants), $STEPS steps, total batch $BATCH; evaluation every $EVAL_EVERY steps, EMA weights, the 10000 test images"
  echo "# layout: one process per emulated machine, 1 worker and 1 compute thread each; pinning: $([ "$PIN" = 1 ] && echo "process k on core k mod $CORES (taskset)" || echo none)"
  echo "# clocks: ours the summed step times of the metrics (no start-up, checkpoint saves or evaluation; every checkpoint evaluated after the training); the peer's summed step times, paused while it evaluates"
  echo "# peer: $PYTHON, torch $TORCH_VERSION, gloo; PowerSGD rank $PSGD_RANK, start_powerSGD_iter $PSGD_START; best: $BEST = $(variant_flags "$BEST"); extra flags: ${EXTRA:-none}"
  echo "# repetitions: $REPEATS"
} >>"$HEADER"
ROWS=$TMP/rows
: >"$ROWS"
if [ "$RESUME" = 1 ] && [ -f "$OUT" ]; then
  # The stopped run's header and rows; refused unless it ran this command (without --resume) to this target.
  results_resume tta "$OUT" "$COLUMNS_LINE" "$HEADER" "$TMP/old_rows" || tg_die "--resume: cannot resume $OUT"
  old_cmd=$(sed -n 's/^# command: //p' "$HEADER" | head -n 1)
  new_cmd=$(results_command "$0" "${ARGS[@]}" | sed 's/ --resume\b//g')
  [ "$old_cmd" = "$new_cmd" ] || tg_die "--resume: $OUT was written by '$old_cmd', not by '$new_cmd'"
  grep -q "^# target: $TARGET " "$HEADER" || tg_die "--resume: $OUT has another target than $TARGET"
  awk -F'\t' '$18 == "ok"' "$TMP/old_rows" >"$ROWS" # a run that failed runs again
  kept_rows=$(wc -l <"$ROWS")
  results_resumed_line "$0" "${ARGS[@]}" >>"$HEADER"
  echo "tta_bench.sh: resuming $OUT: $kept_rows runs kept" >&2
fi
done_before() { # rep rate machines system: 0 when the resumed file has this run's row
  awk -F'\t' -v r="$1" -v a="$2" -v m="$3" -v s="$4" '$1 == r && $4 == a && $5 == m && $6 == s { f = 1 } END { exit !f }' "$ROWS"
}
REP=0
SEED=0
LOAD=0
record() { # rate machines system flags status note seconds steps final_acc final_step train_s eval_s wall_s curve
  local IFS=$'\t'
  echo "$REP$IFS$SEED$IFS$LOAD$IFS$1$IFS$2$IFS$3$IFS$4$IFS$STEPS$IFS$EVAL_EVERY$IFS$TARGET$IFS$7$IFS$8$IFS$9$IFS${10}$IFS${11}$IFS${12}$IFS${13}$IFS$5$IFS$6$IFS${14}" >>"$ROWS"
  local table=$TMP/table
  { echo "$COLUMNS_LINE"; cat "$ROWS"; } >"$table"
  results_commit "$HEADER" "$table" "$OUT" 2>/dev/null
}
record_failed() { record "$1" "$2" "$3" "$4" "$5" "$6" - - - - - - - -; }

RUN=0
# Ours: terngrad-train on M processes across the link, then every checkpoint evaluated.
run_ours() { # rate machines system variant
  local rate=$1 m=$2 system=$3 variant=$4 recipe=$RECIPE_TERN flags dir t0 t1 rc=0
  [ "$(variant_kind "$variant")" = terngrad ] || recipe=$RECIPE_FP32
  read -r -a flags <<<"$(variant_flags "$variant")"
  RUN=$((RUN + 1))
  dir=$WORK/runs/run$RUN
  rm -rf "$dir"
  mkdir -p "$dir"
  t0=$(now)
  netlink_mpirun "$m"
  run timeout $((STEPS * 3 + 900)) "${NETLINK_MPIRUN[@]}" "$PINNER" "$TRAIN" --config "$recipe" --num_nodes 1 \
    --threads 1 --seed "$SEED" --max_steps "$STEPS" --data_dir "$DATA_DIR" --train_dir "$dir/train" \
    --save_iter "$EVAL_EVERY" --keep_checkpoints 1000000 --log_every "$EVAL_EVERY" --metrics_jsonl "$dir/metrics.jsonl" \
    "${flags[@]}" "${EXTRA_FLAGS[@]}" >"$dir/train.log" 2>&1 || rc=$?
  t1=$(now)
  local shown="${flags[*]}${EXTRA:+ $EXTRA}"
  if [ "$rc" != 0 ]; then
    echo "tta_bench.sh: ours $system ($variant) on $m machines at $rate failed (exit $rc):" >&2
    tail -n 8 "$dir/train.log" >&2 || true
    record_failed "$rate" "$m" "$system" "$shown" failed "exit $rc: $(why "$dir/train.log")"
    return
  fi
  # Every checkpoint's accuracy, at the summed step time of its step.
  local -A secs=()
  local w step s e0 e1 ckpt acc eval_s=0 curve=$dir/curve
  for w in $(python3 "$HERE/lib/tg_metrics.py" steptime "$dir/metrics.jsonl"); do secs[${w%%:*}]=${w#*:}; done
  : >"$curve"
  for step in $(find "$dir/train" -maxdepth 1 -name 'model.ckpt-*' -printf '%f\n' | sed -n 's/^model\.ckpt-\([0-9]*\)$/\1/p' | sort -n); do
    ckpt=$dir/train/model.ckpt-$step
    s=${secs[$step]:-}
    [ -n "$s" ] || {
      echo "tta_bench.sh: no logged step $step in the metrics (log_every $EVAL_EVERY): skipped" >&2
      continue
    }
    e0=$(now)
    acc=$("$EVAL" --checkpoint_path "$ckpt" --data_dir "$DATA_DIR" --subset test --threads "$CORES" 2>&1 |
      grep -o 'precision @ 1 = [0-9.]*' | tail -1 | awk '{ print $5 }') || true
    e1=$(now)
    eval_s=$(awk -v a="$eval_s" -v b="$(elapsed "$e0" "$e1")" 'BEGIN { print a + b }')
    [ -n "$acc" ] || {
      record_failed "$rate" "$m" "$system" "$shown" failed "terngrad-eval failed on $ckpt"
      return
    }
    echo "$step $s $acc" >>"$curve"
  done
  [ -s "$curve" ] || {
    record_failed "$rate" "$m" "$system" "$shown" failed "no checkpoint to evaluate"
    return
  }
  local r secs_to steps_to final fstep train_s
  r=$(reach "$curve")
  read -r secs_to steps_to final fstep <<<"$r"
  train_s=$(tail -n 1 "$curve" | awk '{ printf "%.3f\n", $2 }')
  [ "$secs_to" = not_reached ] && secs_to="not reached" && steps_to="not reached"
  echo "#   $system: $(reached_text "$secs_to" "$steps_to"), final $final, train $train_s s, eval $eval_s s" >&2
  record "$rate" "$m" "$system" "$shown" ok "" "$secs_to" "$steps_to" "$final" "$fstep" "$train_s" "$eval_s" \
    "$(elapsed "$t0" "$t1")" "$(curve_words "$curve")"
  [ "$KEEP" = 1 ] || rm -rf "$dir"
}

# The peer: one tta_peer.py rank per machine, each pinned as ours' ranks.
run_peer() { # rate machines system method
  local rate=$1 m=$2 system=$3 method=$4 shown="--method $4"
  [ "$method" = powersgd ] && shown+=" --powersgd_rank $PSGD_RANK --start_powersgd_iter $PSGD_START"
  if [ -n "$PEER_MISSING" ]; then
    record_failed "$rate" "$m" "$system" "$shown" missing "$PEER_MISSING"
    return
  fi
  RUN=$((RUN + 1))
  local dir=$WORK/runs/run$RUN port=$((29600 + RUN % 1000)) k pids=() rc0=0 rc=0 t0 t1
  rm -rf "$dir"
  mkdir -p "$dir"
  local common=(--method "$method" --data_dir "$IDX_DIR" --steps "$STEPS" --batch "$BATCH" --eval_every "$EVAL_EVERY"
    --seed "$SEED" --threads 1 --powersgd_rank "$PSGD_RANK" --start_powersgd_iter "$PSGD_START" --iface "$IF")
  local limit=$((STEPS * 3 + 1800))
  t0=$(now)
  for k in $(seq 2 "$m"); do
    pin $((k - 1)) ip netns exec "$(netlink_ns "$k")" env MASTER_ADDR="$(netlink_ip 1)" MASTER_PORT="$port" \
      RANK=$((k - 1)) WORLD_SIZE="$m" GLOO_SOCKET_IFNAME="$IF" timeout "$limit" "$PYTHON" "$HERE/tta_peer.py" \
      "${common[@]}" >"$dir/rank$((k - 1)).log" 2>&1 &
    pids+=("$!")
  done
  run pin 0 ip netns exec "$(netlink_ns 1)" env MASTER_ADDR="$(netlink_ip 1)" MASTER_PORT="$port" RANK=0 \
    WORLD_SIZE="$m" GLOO_SOCKET_IFNAME="$IF" timeout "$limit" "$PYTHON" "$HERE/tta_peer.py" "${common[@]}" \
    --json_out "$dir/out.json" >"$dir/rank0.log" 2>&1 || rc0=$?
  # The other ranks would wait for a failed rank 0 until gloo's timeout (30 min): end them.
  if [ "$rc0" != 0 ]; then kill "${pids[@]}" 2>/dev/null || true; fi
  for k in "${pids[@]}"; do wait "$k" || rc=$?; done
  t1=$(now)
  if [ "$rc0" != 0 ] || [ "$rc" != 0 ] || [ ! -s "$dir/out.json" ]; then
    echo "tta_bench.sh: $system on $m machines at $rate failed (rank 0 exit $rc0, others $rc):" >&2
    tail -n 8 "$dir/rank0.log" >&2 || true
    record_failed "$rate" "$m" "$system" "$shown" failed "rank 0 exit $rc0, others $rc: $(why "$dir/rank0.log")"
    return
  fi
  local curve=$dir/curve train_s eval_s r secs_to steps_to final fstep
  python3 -c 'import json, sys
j = json.load(open(sys.argv[1]))
for step, s, acc in j["curve"]:
    print(step, s, acc)' "$dir/out.json" >"$curve"
  read -r train_s eval_s < <(python3 -c 'import json, sys; j = json.load(open(sys.argv[1])); print("%.3f %.1f" % (j["train_s"], j["eval_s"]))' "$dir/out.json")
  r=$(reach "$curve")
  read -r secs_to steps_to final fstep <<<"$r"
  [ "$secs_to" = not_reached ] && secs_to="not reached" && steps_to="not reached"
  echo "#   $system: $(reached_text "$secs_to" "$steps_to"), final $final, train $train_s s, eval $eval_s s (paused)" >&2
  record "$rate" "$m" "$system" "$shown" ok "" "$secs_to" "$steps_to" "$final" "$fstep" "$train_s" "$eval_s" \
    "$(elapsed "$t0" "$t1")" "$(curve_words "$curve")"
  [ "$KEEP" = 1 ] || rm -rf "$dir"
}

system_name() {
  case "$1" in
    fp32) echo "ours fp32" ;;
    terngrad) echo "ours TernGrad" ;;
    best) echo "ours $BEST" ;;
    ddp) echo "DDP fp32" ;;
    powersgd) echo "DDP PowerSGD rank $PSGD_RANK" ;;
  esac
}

# ---- the runs --------------------------------------------------------------------------------------------
total=$((REPEATS * ${#RATES[@]} * ${#MACHINE_LIST[@]} * ${#SYSTEM_LIST[@]}))
echo "# tta_bench: $(date -u '+%Y-%m-%d %H:%M UTC'), terngrad $(git -C "$TG_ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')," \
  "$CORES cores, ISA $(results_isa | cut -d' ' -f1), load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
echo "# target $TARGET ($TARGET_NOTE); $total runs of $STEPS steps, evaluated every $EVAL_EVERY; peer torch $TORCH_VERSION" >&2
i=0
for REP in $(seq "$REPEATS"); do
  SEED=$REP
  for rate in "${RATES[@]}"; do
    netlink_shape "$rate" || tg_die "could not shape the link at $rate"
    for m in "${MACHINE_LIST[@]}"; do
      for s in "${SYSTEM_LIST[@]}"; do
        i=$((i + 1))
        LOAD=$(cut -d' ' -f1 /proc/loadavg)
        name=$(system_name "$s")
        if done_before "$REP" "$rate" "$m" "$name"; then
          echo "# [$i/$total] repetition $REP (seed $SEED), $rate, $m machines, $name: kept from the stopped run" >&2
          continue
        fi
        echo "# [$i/$total] repetition $REP (seed $SEED), $rate, $m machines, $name ..." >&2
        case "$s" in
          fp32 | terngrad) run_ours "$rate" "$m" "$name" "$s" ;;
          best) run_ours "$rate" "$m" "$name" "$BEST" ;;
          ddp) run_peer "$rate" "$m" "$name" fp32 ;;
          powersgd) run_peer "$rate" "$m" "$name" powersgd ;;
        esac
      done
    done
  done
done
echo "results: $OUT" >&2
python3 "$HERE/lib/render_accuracy.py" "$OUT"
exit
}

#!/usr/bin/env bash
# Checks of the shell scripts (ctest `scripts`, label scripts; about 15 s):
#   1. every scripts/*.sh, scripts/lib/*.sh, bench/*.sh and .ci/run parses (bash -n) and has no shellcheck
#      warning (shellcheck missing: that part prints SKIPPED, except under CI=true where it fails: setup.sh
#      installs it);
#   2. each run_multi_gpus_*.sh launcher, in DRY_RUN=1, prints a terngrad-train command that reads its
#      configs/*.ini with --config, carries the overrides set in the environment and no other recipe flag,
#      names its folders from the config's values (and the overrides), and that terngrad-train accepts
#      (the printed command with --summary exits 0);
#   3. a training that fails ends the evaluation polling beside it (EVAL_EVERY=0: no terngrad-eval left running);
#   4. run_multi_gpus_lenet.sh really trains a few steps on a tiny idx dataset converted with terngrad-data,
#      evaluating itself (--eval_every: the curve in its train_dir), and ends with the last checkpoint's accuracy;
#   5. TERM to a launcher stops its training (which saves a checkpoint) and its evaluation (EVAL_EVERY=0); exit 143.
# Usage: scripts/check_scripts.sh [BUILD_DIR]   (default: $BUILD_DIR, else build). Exit 0 when all passed.
set -uo pipefail
BUILD_DIR=${1:-${BUILD_DIR:-}}
# shellcheck source=lib/launch_training.sh
source "$(dirname "$0")/lib/launch_training.sh"  # TG_ROOT, BUILD_DIR, tg_binary, TG_OVERRIDES
DATA=$(tg_binary terngrad-data) || exit 1
tg_binary terngrad-train > /dev/null && tg_binary terngrad-eval > /dev/null || exit 1
export BUILD_DIR
# What the caller's environment sets must not leak into the launchers: only the overrides set below count.
for pair in "${TG_OVERRIDES[@]}"; do unset "${pair%%:*}"; done
unset CONFIG DEVICE NUM_GPUS DATA_DIR ROOT_WORKSPACE VAL_BATCH_SIZE EVAL_INTERVAL_SECS EVAL_SUBSET DRY_RUN
unset TERNGRAD_TRAIN TERNGRAD_EVAL TERNGRAD_DATA CUDA_VISIBLE_DEVICES

WORK=$(mktemp -d /tmp/tg_scripts.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
FAILED=0
fail() {
  echo "FAIL: $*"
  FAILED=1
}
has() { [[ " $1 " == *" $2 "* ]]; }  # LINE WORD: LINE holds WORD as a whole word

# ---- 1. syntax and shellcheck -----------------------------------------------------------------------------
scripts=("$TG_ROOT"/scripts/*.sh "$TG_ROOT"/scripts/lib/*.sh "$TG_ROOT"/bench/*.sh "$TG_ROOT/.ci/run")
for s in "${scripts[@]}"; do bash -n "$s" 2> "$WORK/syntax" || fail "bash -n $s: $(head -1 "$WORK/syntax")"; done
if command -v shellcheck > /dev/null; then
  # From each script's folder: their `source` lines and shellcheck directives are relative to it.
  {
    (cd "$TG_ROOT/scripts" && shellcheck -x -P SCRIPTDIR -S warning -f gcc ./*.sh lib/*.sh)
    (cd "$TG_ROOT/bench" && shellcheck -x -P SCRIPTDIR -S warning -f gcc ./*.sh)
    (cd "$TG_ROOT" && shellcheck -x -P SCRIPTDIR -S warning -f gcc .ci/run)
  } > "$WORK/shellcheck"
  [[ ! -s $WORK/shellcheck ]] ||
    fail "shellcheck: $(wc -l < "$WORK/shellcheck") warnings, the first: $(head -1 "$WORK/shellcheck")"
  echo "syntax: ${#scripts[@]} scripts parse; shellcheck: $(wc -l < "$WORK/shellcheck") warnings"
elif [[ ${CI:-} == true ]]; then
  fail "shellcheck not installed (CI=true; scripts/setup.sh installs it)"
else
  echo "syntax: ${#scripts[@]} scripts parse; SKIPPED: shellcheck (not installed)"
fi

# ---- 2. launchers in DRY_RUN ------------------------------------------------------------------------------
# launcher | its config | overrides set (VAR=value ...) | the flags they must give
check_launcher() {
  local launcher=$1 config=$2 overrides=$3 want=$4
  local out train folder flag
  # shellcheck disable=SC2086 # the overrides are VAR=value words
  out=$(env DRY_RUN=1 ROOT_WORKSPACE="$WORK/dry" DATA_DIR="$WORK/nodata" $overrides \
    "$TG_ROOT/scripts/$launcher" 2>&1) || {
    fail "$launcher: DRY_RUN=1 failed: $out"
    return
  }
  train=$(grep '^train: ' <<< "$out")
  folder=$(grep '^train_dir: ' <<< "$out")
  [[ -n $train ]] || { fail "$launcher: no train: line in $out"; return; }
  has "$train" "--config" && has "$train" "$TG_ROOT/configs/$config" ||
    fail "$launcher: the train command does not read configs/$config: $train"
  for flag in $want; do has "$train" "$flag" || fail "$launcher: the train command lacks $flag: $train"; done
  for flag in --seed --save_iter --initial_learning_rate --weight_decay --grad_bits --clip_factor --batch_size; do
    if [[ $train == *" $flag="* ]] && [[ " $want " != *" $flag="* ]]; then
      fail "$launcher: $flag is restated though its variable is unset: $train"
    fi
  done
  # The folder name: <dataset>_<net>_<size>_<optimizer>_<bits>_<lr>_<clip>_<wd>... from the config and the overrides.
  local dataset net lr wd bits
  CONFIG=$TG_ROOT/configs/$config
  expected() {  # VAR KEY: VAR's value in the overrides, else the config's KEY
    local v
    v=$(sed -n "s/.*\b$1=\([^ ]*\).*/\1/p" <<< "$overrides")
    echo "${v:-$(config_value "$2")}"
  }
  dataset=$(expected DATASET_NAME dataset) net=$(expected NET net) lr=$(expected BASE_LR initial_learning_rate)
  wd=$(expected WEIGHT_DECAY weight_decay) bits=$(expected GRAD_BITS grad_bits)
  [[ $folder == *"/${dataset}_training_data/${dataset}_${net}_"*"_${bits}_${lr}_"*"_${wd}_"* ]] ||
    fail "$launcher: the folder is not named from $config (bits $bits): $folder"
  # terngrad-train accepts the command as printed (the network is built, nothing trained).
  eval "${train#train: } --summary" > "$WORK/summary" 2>&1 ||
    fail "$launcher: terngrad-train refuses the printed command: $(tail -1 "$WORK/summary")"
  echo "launcher $launcher: --config configs/$config, overrides [$want]"
}
check_launcher run_multi_gpus_lenet.sh mnist_lenet_terngrad.ini "SEED=7 MAX_STEPS=11" \
  "--seed=7 --max_steps=11 --device cpu"
check_launcher run_multi_gpus_lenet.sh fashion_mnist_lenet_fp32.ini \
  "CONFIG=configs/fashion_mnist_lenet_fp32.ini NUM_NODES=3 QUANTIZE_LOGITS=false" \
  "--num_nodes=3 --quantize_logits=false"
check_launcher run_multi_gpus_cifar10.sh cifar10_cifarnet_terngrad.ini "GRAD_BITS=32 CLIP_FACTOR=0" \
  "--grad_bits=32 --clip_factor=0 --device cpu"
check_launcher run_multi_gpus_alexnet.sh imagenet_alexnet_terngrad.ini "DEVICE=cuda NUM_GPUS=2 DROPOUT_KEEP_PROB=0.5" \
  "--num_gpus 2 --num_nodes=2 --dropout_keep_prob=0.5 --device cuda"
check_launcher run_multi_gpus_resnet50.sh imagenet_resnet50_terngrad.ini "BASE_LR=0.2 WARMUP_STEPS=100" \
  "--initial_learning_rate=0.2 --warmup_steps=100 --device cpu --num_gpus 1 --num_nodes=8"  # cpu until the GPU check
check_launcher run_multi_gpus_inception_v3.sh imagenet_inception_v3_terngrad.ini "DEVICE=cpu NUM_GPUS=1" \
  "--device cpu --num_gpus 1 --num_nodes=8"
check_launcher run_multi_gpus_inception_v3.sh imagenet_inception_v3_fp32.ini \
  "CONFIG=$TG_ROOT/configs/imagenet_inception_v3_fp32.ini" "--num_nodes=8"
# Several machines: HOSTS becomes one mpirun of one process per slot, pinned, with the flags it implies.
check_hosts() {  # launcher | environment words | what the train line must hold (|-separated)
  local launcher=$1 env_words=$2 want=$3 out train w
  # shellcheck disable=SC2086 # VAR=value words
  out=$(env DRY_RUN=1 ROOT_WORKSPACE="$WORK/dry" DATA_DIR="$WORK/nodata" $env_words \
    "$TG_ROOT/scripts/$launcher" 2>&1) || {
    fail "$launcher $env_words: DRY_RUN=1 failed: $out"
    return
  }
  train=$(grep '^train: ' <<< "$out")
  IFS='|' read -r -a parts <<< "$want"
  for w in "${parts[@]}"; do [[ $train == *"$w"* ]] || fail "$launcher $env_words: the command lacks '$w': $train"; done
  echo "launcher $launcher $env_words: ${train:7:60}..."
}
ROOT=""  # as root the launchers add what Open MPI asks for to start
[[ $(id -u) == 0 ]] && ROOT="--allow-run-as-root "
check_hosts run_multi_gpus_resnet50.sh "DEVICE=cuda HOSTS=a:2,b:2" \
  "mpirun -np 4 ${ROOT}-H a:2\\,b:2 --bind-to socket --map-by slot|-x CUDA_MODULE_LOADING=EAGER|--num_gpus 1|--num_nodes=1"
check_hosts run_multi_gpus_lenet.sh "HOSTS=a:2,b:2 THREADS=3 RANKS_PER_NODE=2" \
  "mpirun -np 4 ${ROOT}-H a:2\\,b:2 --bind-to core --map-by slot:PE=3|-x OMP_PROC_BIND=close|--threads 3|--ranks_per_node 2"
check_hosts run_multi_gpus_lenet.sh "HOSTS=a:1,b:1 PIN=0" "mpirun -np 2 ${ROOT}-H a:1\\,b:1 $(tg_binary terngrad-train)"
out=$(env DRY_RUN=1 HOSTS=a:2,b:3 "$TG_ROOT/scripts/run_multi_gpus_lenet.sh" 2>&1) &&
  fail "HOSTS with unequal slots is accepted: $out"
[[ $out == *"every host must have the same number of slots"* ]] || fail "HOSTS=a:2,b:3: unclear error: $out"
out=$(env DRY_RUN=1 CONFIG=configs/none.ini "$TG_ROOT/scripts/run_multi_gpus_lenet.sh" 2>&1) &&
  fail "a missing CONFIG is accepted: $out"
[[ $out == "run_multi_gpus_lenet.sh: CONFIG=configs/none.ini: no such file" ]] ||
  fail "a missing CONFIG: unclear message: $out"

# ---- 3. a failed training ends the evaluation -------------------------------------------------------------
mkdir -p "$WORK/empty"  # no train-* shards: terngrad-train fails at once, terngrad-eval polls for checkpoints
# The timeouts of this script only tell a hang from a slow run (sanitizer build, slow CPU).
ROOT_WORKSPACE=$WORK/failed DATA_DIR=$WORK/empty EVAL_EVERY=0 EVAL_INTERVAL_SECS=1 timeout 300 \
  "$TG_ROOT/scripts/run_multi_gpus_lenet.sh" > "$WORK/failed.log" 2>&1
rc=$?
[[ $rc -ne 0 && $rc -ne 124 ]] || fail "a failed training: the launcher exited $rc: $(tail -2 "$WORK/failed.log")"
grep -q "the training failed" "$WORK/failed.log" || fail "a failed training is not named: $(tail -2 "$WORK/failed.log")"
left=""
for _ in $(seq 600); do  # the kill is sent at exit: the process goes soon after (60 s: it did not)
  left=$(pgrep -f -- "terngrad-eval --checkpoint_dir $WORK/failed/" || true)
  [[ -z $left ]] && break
  sleep 0.1
done
if [[ -n $left ]]; then
  fail "a failed training left the evaluation polling (pid $left)"
  for pid in $left; do kill "$pid"; done
fi
echo "failed training: launcher exit $rc, evaluation left running: ${left:-none}"

# ---- 4. a real short run of run_multi_gpus_lenet.sh -------------------------------------------------------
be32() { printf "$(printf '\\x%02x\\x%02x\\x%02x\\x%02x' $(($1 >> 24 & 255)) $(($1 >> 16 & 255)) $(($1 >> 8 & 255)) $(($1 & 255)))"; }
idx_pair() {  # NAME COUNT: NAME-images.idx (COUNT 28x28 images) and NAME-labels.idx (labels i % 10)
  local i
  { be32 2051; be32 "$2"; be32 28; be32 28; head -c $(($2 * 784)) /dev/urandom; } > "$WORK/$1-images.idx"
  { be32 2049; be32 "$2"; for ((i = 0; i < $2; i++)); do printf "\\x0$((i % 10))"; done; } > "$WORK/$1-labels.idx"
  "$DATA" convert-idx --images "$WORK/$1-images.idx" --labels "$WORK/$1-labels.idx" --subset "$1" \
    --num_shards "$3" --output_dir "$WORK/mnist" > "$WORK/convert.log" 2>&1 ||
    fail "terngrad-data convert-idx: $(tail -1 "$WORK/convert.log")"
}
idx_pair train 256 2
idx_pair test 50 1
t0=$(date +%s)
# The default: the training evaluates itself (EVAL_EVERY: max_steps / 20 = every step here), its curve in its folder.
ROOT_WORKSPACE=$WORK/run DATA_DIR=$WORK/mnist MAX_STEPS=6 SAVE_ITER=3 TRAIN_BATCH_SIZE=16 NUM_NODES=2 \
  timeout 300 "$TG_ROOT/scripts/run_multi_gpus_lenet.sh" > "$WORK/run.log" 2>&1
rc=$?
last=$(tail -1 "$WORK/run.log")
echo "short run: exit $rc in $(($(date +%s) - t0)) s; last line: $last"
[[ $rc -eq 0 ]] || fail "run_multi_gpus_lenet.sh exited $rc: $(tail -3 "$WORK/run.log")"
[[ $last == *"step 6: test precision@1 "*"on the 50 examples of 'test'"* ]] ||
  fail "the last line is not the final checkpoint's accuracy on the 50 test examples: $last"
curve=$(find "$WORK/run/mnist_training_data" -name eval.jsonl | head -1)
[[ -n $curve && $(grep -c '"step"' "$curve") -eq 6 ]] ||
  fail "the train_dir holds no learning curve of 6 evaluations: ${curve:-no eval.jsonl}"
ckpt=$(find "$WORK/run/mnist_training_data" -name 'model.ckpt-6' | head -1)
[[ -n $ckpt ]] || fail "no model.ckpt-6 in $WORK/run/mnist_training_data"
find "$WORK/run/mnist_training_data" -maxdepth 1 -name 'mnist_lenet_28_momentum_1_0.01_2.5_0.0005_0.9_1_16_2_*' |
  grep -q . || fail "the run's folder is not named from the config and overrides: $(ls "$WORK/run/mnist_training_data")"
grep -q '"summary": true' "$WORK"/run/mnist_info/training_*_metrics.jsonl 2> /dev/null ||
  fail "no metrics summary in $WORK/run/mnist_info"

# ---- 5. TERM to a launcher: the training saves a checkpoint and stops, the evaluation ends, exit 143 ---------
ROOT_WORKSPACE=$WORK/term DATA_DIR=$WORK/mnist MAX_STEPS=1000000 SAVE_ITER=1000000 TRAIN_BATCH_SIZE=16 \
  NUM_NODES=2 EVAL_EVERY=0 EVAL_INTERVAL_SECS=1 "$TG_ROOT/scripts/run_multi_gpus_lenet.sh" > "$WORK/term.log" 2>&1 &
launcher=$!
stepped=0
for _ in $(seq 3000); do  # until the training has logged its first step (an event, not a time; 300 s at most)
  grep -q "entropy_loss" "$WORK"/term/mnist_info/training_*_info.txt 2> /dev/null && stepped=1 && break
  kill -0 $launcher 2> /dev/null || break
  sleep 0.1
done
[[ $stepped -eq 1 ]] || fail "TERM: the training logged no step: $(tail -2 "$WORK/term.log")"
kill -TERM $launcher
t0=$(date +%s)
# The training ends within its 10 s grace period (README); 60 s tells a slow exit from one that never comes.
for _ in $(seq 600); do kill -0 $launcher 2> /dev/null || break; sleep 0.1; done
if kill -0 $launcher 2> /dev/null; then
  fail "TERM: the launcher still runs 60 s later"
  kill -9 $launcher
fi
wait $launcher
rc=$?
left=$(pgrep -f -- "--checkpoint_dir $WORK/term/|--train_dir $WORK/term/" || true)
saved=$(find "$WORK/term/mnist_training_data" -name 'model.ckpt-*' | head -1)
echo "TERM: launcher exit $rc after $(($(date +%s) - t0)) s; checkpoint: ${saved##*/}; left running: ${left:-none}"
[[ $rc -eq 143 ]] || fail "TERM: the launcher exited $rc, expected 143: $(tail -2 "$WORK/term.log")"
[[ -n $saved ]] || fail "TERM: the training saved no checkpoint: $(tail -2 "$WORK/term.log")"
if [[ -n $left ]]; then
  fail "TERM: processes left running: $left"
  for pid in $left; do kill "$pid"; done
fi

if [[ $FAILED -ne 0 ]]; then
  echo "check_scripts: FAILED"
  exit 1
fi
echo "check_scripts: passed"

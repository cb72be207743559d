#!/usr/bin/env bash
# Fault tests of terngrad-train with real processes (ctest label `fault`). Every wait is for observed progress
# (a checkpoint, its temporary file, a logged step), never a fixed time, so a slow CPU or the sanitizer build
# only takes longer (about 1 minute on 2 AVX-512 cores, a few under ASan); a run that shows no progress for
# TG_FAULT_STALL_S seconds (default 120) is a failure that says so.
#   1. kill -9, rounds of 10 runs in a row, with a checkpoint every step: the first run as soon as its first temporary
#      checkpoint file appears, each later one at a random moment within the observed interval between two
#      checkpoints, counted either from its first temporary file or from its second checkpoint (so some kills
#      land inside a save, some before any checkpoint exists). Asserted on what happened: every run that
#      started with a checkpoint resumed from the one the index named (never older than what the index named
#      before the previous kill); every temporary file a kill left is removed by the next run; no run reports
#      an error; the final parameter digest equals an uninterrupted run's; no temporary file is left. A run
#      that starts with no checkpoint (the first, or one after a kill before any checkpoint) starts from
#      scratch: counted and reported, never a failure. Rounds (each a fresh train_dir, at most 5) go on until at
#      least one kill, one resume and one kill inside a save happened: a round of none is never a pass.
#   2. kill -9 one rank of a 2-process mpirun job once the job has logged a step: the whole job ends within 10 s
#      of the kill (README's claim) and names the lost rank. Then a rank that hangs without an error: one rank of
#      a 4-process job stopped (SIGSTOP: no TCP reset ever comes): with --collective_timeout 3 the job ends within
#      3 + 10 s with a line naming --collective_timeout, the step and what it waited for.
#   3. a checkpoint that does not fit on the disk, without privileges (tests/disk_full: an LD_PRELOAD library
#      that fails writes under a path with ENOSPC), the disk full at a write and at the fsync: one clear error
#      line (No space left on device, naming the checkpoint), exit 1, the previous checkpoint and the index
#      intact and readable.
# Usage: scripts/fault_test.sh [BUILD_DIR]   (default: $BUILD_DIR, else build). Exits 0 when every part passed.
#        scripts/fault_test.sh elastic [BUILD_DIR]: the elastic launcher's cases instead (scripts/fault_elastic.sh).
# The preload library: $TG_DISK_FULL_LIB (ctest sets it), else BUILD_DIR/tests/libtg_disk_full.so. Without
# mpirun part 2 reports SKIPPED, except under CI=true where that is a failure. TG_FAULT_SEED seeds the kill
# moments (default 7).
set -u
shopt -s nullglob
if [ "${1:-}" = elastic ]; then
  shift
  exec "$(dirname "$0")/fault_elastic.sh" "$@"
fi
BUILD_DIR=${1:-${BUILD_DIR:-}}
# shellcheck source=lib/common.sh
source "$(dirname "$0")/lib/common.sh"
TRAIN=$(tg_binary terngrad-train) || exit 1
DISK_FULL_LIB=${TG_DISK_FULL_LIB:-$BUILD_DIR/tests/libtg_disk_full.so}
WORK=$(cd "$(mktemp -d /tmp/tg_fault.XXXXXX)" && pwd -P)  # the real path: the preload compares it
trap 'rm -rf "$WORK"' EXIT
# shellcheck source=lib/fault_common.sh
source "$(dirname "$0")/lib/fault_common.sh"

# The step the checkpoint index of DIR names, or "" (no index yet). The index is replaced by a rename, so a
# read sees the old or the new one whole.
index_step() {
  local line=""
  [ -f "$1/checkpoint" ] && read -r line < "$1/checkpoint" 2> /dev/null
  [[ $line =~ model\.ckpt-([0-9]+)\" ]] && echo "${BASH_REMATCH[1]}"
}
# Whether process PID has a temporary checkpoint file in DIR (its name ends in .tmp-PID).
has_temporary() {
  local files=("$1"/*.tmp-"$2")
  [ ${#files[@]} -gt 0 ]
}
index_past() {  # DIR STEP: the index names a step after STEP ("" = any)
  local s
  s=$(index_step "$1")
  [ -n "$s" ] && { [ -z "$2" ] || [ "$s" -gt "$2" ]; }
}

# A small, fast run: LeNet on synthetic data (deterministic and resumable), one thread.
COMMON=(--benchmark_mode --dataset fashion_mnist --net lenet --batch_size 16 --threads 1 --seed 3)

# ---- 1. kill -9 at random moments -------------------------------------------------------------------------
# 12x12 images: ~5 ms a step with its 3 MB checkpoint (AVX-512, Release). Each run does a few steps before its
# kill; 400 steps leave room for all ten.
KILL=(--image_size 12 --log_every 50 --max_steps 400)
"$TRAIN" "${COMMON[@]}" "${KILL[@]}" --save_iter 1000 --train_dir "$WORK/ref" > "$WORK/ref.log" 2>&1 &
wait_end $! "$WORK/ref.log" || fail "the uninterrupted run failed: $(tail -1 "$WORK/ref.log")"
REF=$(digest_of "$WORK/ref.log")
RANDOM=${TG_FAULT_SEED:-7}
kills=0 resumes=0 inside=0 scratch=0 runs=0  # over every round
t0=$(now_us)
# One round: 10 runs in a row into a fresh train_dir (fewer when the training finishes first), then the final
# resume and its digest. Updates the counters above.
kill_round() {  # ROUND
  local DIR="$WORK/killed_$1" window_us="" finished_early=0 before_kill="" left=0 i log start pid rc status t1 first
  local offset_us errors stale
  for i in $(seq 10); do
    log="$WORK/kill_$i.log"
    start=$(index_step "$DIR")
    [ -z "$before_kill" ] || [ "${start:-0}" -ge "$before_kill" ] ||
      fail "run $i: the index names step ${start:-none}, before the kill it named $before_kill"
    "$TRAIN" "${COMMON[@]}" "${KILL[@]}" --save_iter 1 --keep_checkpoints 2 --train_dir "$DIR" > "$log" 2>&1 &
    pid=$!
    runs=$((runs + 1))
    # The first run is killed as soon as its first temporary file is seen (inside or just after the first save:
    # often before any checkpoint exists). Later ones are killed after a random part of the window counted from
    # their first temporary file (half of them, once a window was measured), else from their second checkpoint
    # (which measures the window).
    if [ $i -eq 1 ] || { [ -n "$window_us" ] && ((RANDOM % 2)); }; then
      wait_for $pid "$log" has_temporary "$DIR" $pid
      rc=$?
    else
      wait_for $pid "$log" index_past "$DIR" "$start"
      rc=$?
      if [ $rc -eq 0 ]; then
        t1=$(now_us)
        first=$(index_step "$DIR")
        wait_for $pid "$log" index_past "$DIR" "$first"
        rc=$?
        [ $rc -eq 0 ] && window_us=$(($(now_us) - t1))
      fi
    fi
    if [ $rc -eq 1 ]; then
      fail "run $i made no progress: $(tail -1 "$log")"
      kill -9 $pid 2> /dev/null
      wait $pid 2> /dev/null
      break
    fi
    if [ $rc -eq 0 ]; then
      offset_us=$((${window_us:-0} * (RANDOM % 1000) / 1000))
      sleep "$(awk -v us="$offset_us" 'BEGIN{printf "%.6f", us / 1e6}')"
      before_kill=$(index_step "$DIR")
      kill -9 $pid 2> /dev/null && kills=$((kills + 1))
    fi
    wait $pid 2> /dev/null
    status=$?
    if [ $rc -eq 2 ] || [ $status -ne 137 ]; then  # it ended before the kill: only a finished training may
      grep -q "done:\|training already finished" "$log" && [ $status -eq 0 ] ||
        fail "run $i ended by itself with status $status: $(tail -1 "$log")"
      finished_early=1
    fi
    # What happened, checked against what the run says.
    if [ -n "$start" ]; then
      if grep -q "resumed from $DIR/model.ckpt-$start at step $start " "$log"; then
        resumes=$((resumes + 1))
      else
        fail "run $i started with the index at step $start but did not resume from it: $(grep -m1 resumed "$log")"
      fi
    else
      scratch=$((scratch + 1))
      grep -q "resumed from" "$log" && fail "run $i resumed though no checkpoint existed: $(grep resumed "$log")"
    fi
    if [ "$left" -gt 0 ]; then
      grep -q "removed $left temporary checkpoint file" "$log" ||
        fail "run $i: the $left temporary file(s) of the killed run $((i - 1)) were not reported removed"
    fi
    left=$(find "$DIR" -maxdepth 1 -name "*.tmp-$pid" | wc -l)
    [ "$left" -gt 0 ] && inside=$((inside + 1))
    # An error line (the configuration line names --error_feedback and is not one).
    errors=$(grep -v "effective configuration" "$log" | grep -i "error" || true)
    if [ -n "$errors" ]; then fail "run $i: $(head -1 <<< "$errors")"; fi
    [ $finished_early -eq 0 ] || break
  done
  start=$(index_step "$DIR")
  "$TRAIN" "${COMMON[@]}" "${KILL[@]}" --save_iter 1 --keep_checkpoints 2 --train_dir "$DIR" > "$WORK/final.log" 2>&1 &
  wait_end $! "$WORK/final.log" || fail "the final resume failed: $(tail -1 "$WORK/final.log")"
  [ -z "$start" ] || grep -q "resumed from $DIR/model.ckpt-$start at step $start \|finished at step $start " \
    "$WORK/final.log" || fail "the final run did not resume from step $start: $(grep -m1 resumed "$WORK/final.log")"
  [ "$left" -eq 0 ] || grep -q "removed $left temporary checkpoint file" "$WORK/final.log" ||
    fail "the final run did not report the $left temporary file(s) of the last killed run removed"
  GOT=$(digest_of "$WORK/final.log")
  stale=$(find "$DIR" -name '*.tmp-*' | wc -l)
  echo "kill -9, round $1: $runs runs so far, $kills killed in $(seconds_of $(($(now_us) - t0))) s (last checkpoint" \
    "interval $((${window_us:-0} / 1000)) ms): $resumes resumed from the index's checkpoint, $scratch started from" \
    "scratch, $inside killed inside a save (temporary file left, removed by the next run); digest $GOT," \
    "uninterrupted $REF; temporary files left: $stale"
  [ -n "$REF" ] && [ "$GOT" = "$REF" ] || fail "digest after kills ($GOT) differs from the uninterrupted run's ($REF)"
  [ "$stale" -eq 0 ] || fail "temporary checkpoint files left: $(find "$DIR" -name '*.tmp-*')"
}
# Rounds until the three events a claim rests on have each happened at least once (a kill, a resume from the
# index's checkpoint, a kill inside a save), at most 5: at any machine speed a round that finished early or whose
# kills all landed between saves is followed by another, never counted as a pass.
for round in 1 2 3 4 5; do
  kill_round "$round"
  [ "$kills" -ge 1 ] && [ "$resumes" -ge 1 ] && [ "$inside" -ge 1 ] && break
done
[ "$kills" -ge 1 ] && [ "$resumes" -ge 1 ] && [ "$inside" -ge 1 ] ||
  fail "after $round rounds: $kills kills, $resumes resumes, $inside kills inside a save: each needs at least one"

# The process of MPI rank RANK of the job training into TRAIN_DIR ("" when there is none): its OMPI_COMM_WORLD_RANK.
pid_of_rank() {  # TRAIN_DIR RANK
  local p
  for p in $(pgrep -f "$TRAIN.*$1"); do
    if tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | grep -q "^OMPI_COMM_WORLD_RANK=$2\$"; then echo "$p"; fi
  done
}

# ---- 2. kill -9 one rank of an MPI job ---------------------------------------------------------------------
if ! command -v mpirun > /dev/null; then
  if [ "${CI:-}" = true ]; then fail "lost MPI rank: mpirun not found (CI=true)"; else
    echo "SKIPPED: lost MPI rank (mpirun not found)"
  fi
else
  logged_step() { grep -q "step [0-9]*, entropy_loss" "$1"; }
  # mpi_loss DIR LABEL NP RANK SIGNAL LIMIT_S MESSAGE_RE [FLAGS...]: a job of NP ranks (train_dir $WORK/DIR) steps,
  # then rank RANK gets SIGNAL; the job must end within LIMIT_S s (the poll goes on to 60 s to tell slow from hung)
  # with an error line matching MESSAGE_RE (grep -E).
  mpi_loss() {
    local dir=$1 label=$2 np=$3 rank=$4 sig=$5 limit=$6 want=$7 log="$WORK/$1.log" job rc pid t0 secs line
    shift 7
    mpirun --allow-run-as-root --oversubscribe -np "$np" "$TRAIN" "${COMMON[@]}" --image_size 12 --num_nodes 1 \
      --log_every 1 --max_steps 100000000 --save_iter 100000000 "$@" --train_dir "$WORK/$dir" > "$log" 2>&1 &
    job=$!
    wait_for $job "$log" logged_step "$log"
    rc=$?
    pid=$(pid_of_rank "$WORK/$dir" "$rank")
    if [ $rc -ne 0 ] || [ -z "$pid" ]; then
      fail "$label: the job logged no step (wait status $rc) or rank $rank was not found: $(tail -2 "$log")"
      pkill -9 -P $job
      kill -9 $job 2> /dev/null
      return
    fi
    t0=$(now_us)
    kill "-$sig" "$pid"
    for _ in $(seq 600); do kill -0 $job 2> /dev/null || break; sleep 0.1; done
    secs=$(seconds_of $(($(now_us) - t0)))
    if kill -0 $job 2> /dev/null; then
      fail "$label: the job still runs 60 s after SIG$sig of rank $rank"
      kill -CONT "$pid" 2> /dev/null
      pkill -9 -P $job
      kill -9 $job
    fi
    wait $job 2> /dev/null
    line=$(grep -E "$want" "$log" | head -1)
    echo "$label: the job ended ${secs} s after SIG$sig of rank $rank${*:+ ($*)}; message: $line"
    awk -v s="$secs" -v l="$limit" 'BEGIN{exit !(s <= l)}' || fail "$label: the job took ${secs} s to end (limit $limit s)"
    [ -n "$line" ] || fail "$label: no line matches '$want': $(grep -i error "$log" | head -3)"
  }
  # README: a lost process ends the job within 10 s, naming the rank.
  mpi_loss mpi "lost rank" 2 1 KILL 10 "[Rr]ank 1"
  # A stopped rank: nothing resets a connection, only the progress watchdog ends the wait (3 + 10 s).
  mpi_loss stop "stopped rank" 4 2 STOP 13 "error: .*step [0-9]+ made no progress .*\(--collective_timeout 3\)" \
    --collective_timeout 3
fi

# ---- 3. a checkpoint that does not fit on the disk -------------------------------------------------------
# 8x8 images: ~1.6 MB a checkpoint. The "disk" holds one and a half: the checkpoint of step 2 fits, the one of
# step 4 does not.
FULL=(--image_size 8 --log_every 2 --save_iter 2)
if [ ! -f "$DISK_FULL_LIB" ]; then
  fail "full disk: $DISK_FULL_LIB not found (build the tg_disk_full target, or set TG_DISK_FULL_LIB)"
else
  "$TRAIN" "${COMMON[@]}" "${FULL[@]}" --max_steps 2 --train_dir "$WORK/size" > "$WORK/size.log" 2>&1 ||
    fail "full disk: sizing run failed: $(tail -1 "$WORK/size.log")"
  bytes=$(stat -c %s "$WORK/size/model.ckpt-2" 2> /dev/null || echo 0)
  for at in write fsync; do
    disk="$WORK/disk_$at"
    mkdir -p "$disk"
    # ASan checks that its runtime comes first among the libraries; the preload comes before it by design.
    env LD_PRELOAD="$DISK_FULL_LIB" TG_DISK_FULL_PATH="$disk/" TG_DISK_FULL_BYTES=$((bytes * 3 / 2)) \
      TG_DISK_FULL_AT=$at ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
      "$TRAIN" "${COMMON[@]}" "${FULL[@]}" --max_steps 6 --train_dir "$disk/t" > "$WORK/full_$at.log" 2>&1
    rc=$?
    last=$(tail -1 "$WORK/full_$at.log")
    echo "full disk at the $at ($((bytes * 3 / 2)) bytes, a checkpoint $bytes): exit $rc; last line: $last;" \
      "files: $(ls -A "$disk/t" | tr '\n' ' ')"
    [ $rc -eq 1 ] || fail "full disk at the $at: exit $rc, expected 1"
    [[ $last =~ ^terngrad-train:\ error:\ .*model\.ckpt-4.*No\ space\ left\ on\ device ]] ||
      fail "full disk at the $at: unclear error: $last"
    grep -q 'model_checkpoint_path: "model.ckpt-2"' "$disk/t/checkpoint" ||
      fail "full disk at the $at: the index does not name step 2: $(head -1 "$disk/t/checkpoint")"
    [ -z "$(find "$disk/t" -name '*.tmp-*')" ] || fail "full disk at the $at: a temporary file was left"
    # The previous checkpoint is whole: a re-run reads it (header and every tensor checksum) and stops there.
    "$TRAIN" "${COMMON[@]}" "${FULL[@]}" --max_steps 2 --train_dir "$disk/t" > "$WORK/reread_$at.log" 2>&1 ||
      fail "full disk at the $at: the previous checkpoint cannot be read: $(tail -1 "$WORK/reread_$at.log")"
    grep -q "training already finished at step 2" "$WORK/reread_$at.log" ||
      fail "full disk at the $at: $(tail -1 "$WORK/reread_$at.log")"
  done
fi

if [ $FAILED -ne 0 ]; then
  echo "fault_test: FAILED"
  exit 1
fi
echo "fault_test: passed"

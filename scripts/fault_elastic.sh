#!/usr/bin/env bash
# The elastic launcher (scripts/elastic_run.sh) tested by losing machines: 3 emulated machines (network namespaces on
# one switch, bench/lib/netns_link.sh; mpirun reaches them through an rsh agent that detaches each machine's
# processes, as ssh does), TernGrad with error feedback on LeNet (synthetic input), a checkpoint every 10 steps.
#   killed   the terngrad-train process of machine 3 killed (kill -9) once step 20 is saved
#   link     machine 1's link cut (ip link set down: no reset ever arrives) once step 20 is saved: it runs rank 0
#   stopped  every process of machine 2 stopped (SIGSTOP: a frozen machine; it still answers ping), continued
#            (SIGCONT) once the next generation has made its first step
#   grow     2 machines (--elastic_batch per_worker) gain the third (DISCOVERY prints it) once step 20 is saved
# Each case: the launcher ends 0 with the training finished; the machine lost is left out (or the new one taken in);
# the final checkpoint (parameter digest and every rank's error-feedback residual file) equals, bit for bit, the
# one of resuming by hand on the same layouts from the same checkpoint; no temporary file is left; the time from the
# loss to the next generation's first step is printed (limit 30 s). Then:
#   fence    one trainer of generation 1 stopped, generation 2 written, continued and asked to stop (SIGTERM: it
#            saves): it refuses to write, exits 1 naming both generations, and leaves no file
#   bad      DISCOVERY failing and printing garbage, fewer machines than MIN_NODES, MAX_RESTARTS exhausted: one line
#            each naming the last checkpoint, exit 1
# Every wait is for an observed event (a log line, a file, a process's end), bounded by TG_FAULT_STALL_S seconds
# without progress. Needs root, ip, ping and mpirun: without them SKIPPED (a failure under CI=true).
# Usage: scripts/fault_elastic.sh [BUILD_DIR]   (also: scripts/fault_test.sh elastic [BUILD_DIR])
set -u
BUILD_DIR=${1:-${BUILD_DIR:-build}}
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib/common.sh
source "$HERE/lib/common.sh"
# shellcheck source=lib/fault_common.sh
source "$HERE/lib/fault_common.sh"
# shellcheck source=../bench/lib/netns_link.sh
source "$HERE/../bench/lib/netns_link.sh"
TRAIN=$(tg_binary terngrad-train) || exit 1
export TERNGRAD_TRAIN=$TRAIN

missing=""
[ "$(id -u)" = 0 ] || missing+=" root"
for tool in ip ping mpirun setsid; do command -v "$tool" > /dev/null || missing+=" $tool"; done
if [ -n "$missing" ]; then
  echo "fault_elastic: SKIPPED (needs$missing)"
  [ "${CI:-}" = true ] && exit 1
  exit 0
fi

WORK=$(cd "$(mktemp -d /tmp/tg_elastic.XXXXXX)" && pwd -P)
HUB=tgfeh
cleanup() {
  netlink_destroy
  rm -rf "$WORK"
}
trap cleanup EXIT
# A run that was killed may have left its machines: gone before this one makes them.
for ns in tgfe1 tgfe2 tgfe3 "$HUB"; do
  [ -e "/var/run/netns/$ns" ] || continue
  for p in $(ip netns pids "$ns" 2> /dev/null); do kill -9 "$p" 2> /dev/null; done
  ip netns del "$ns"
done
netlink_create tgfe 3 || exit 1
ip -n "$HUB" addr add 10.77.0.254/24 dev tgbr0
netlink_mpi_agent "$WORK/agent" detach
MPI_ARGS="--mca plm_rsh_agent $WORK/agent --mca btl tcp,self --mca btl_tcp_if_include $NETLINK_SUBNET"
# (rtc_hwloc_vmhole none: an orted that shares its hardware topology through /dev/shm crashed now and then when
# machines' processes had been killed; the machines of this test share one /dev/shm.)
MPI_ARGS+=" --mca oob_tcp_if_include $NETLINK_SUBNET --mca rtc_hwloc_vmhole none --bind-to none"
M1=10.77.0.1 M2=10.77.0.2 M3=10.77.0.3
STEPS=200
FLAGS=(--benchmark_mode --dataset fashion_mnist --net lenet --image_size 16 --batch_size 24 --threads 1 --seed 3
  --grad_bits 1 --error_feedback --num_nodes 1 --ranks_per_node 1 --save_iter 10 --log_every 1
  --collective_timeout 3)

in_hub() { ip netns exec "$HUB" "$@"; }
# The terngrad-train processes of emulated machine K.
trainers_on() {
  local p
  for p in $(ip netns pids "$(netlink_ns "$1")" 2> /dev/null); do
    [ "$(cat "/proc/$p/comm" 2> /dev/null)" = terngrad-train ] && echo "$p"
  done
}
# Ends every process of every emulated machine and brings each link up (between cases).
reset_machines() {
  local k p
  for k in 1 2 3; do
    ip -n "$(netlink_ns "$k")" link set "$NETLINK_IF" up
    for p in $(ip netns pids "$(netlink_ns "$k")" 2> /dev/null); do kill -CONT "$p" 2> /dev/null; kill -9 "$p" 2> /dev/null; done
  done
}
# The launcher in the switch's namespace (where mpirun reaches every machine); ENV... then launcher flags.
launch() {
  local dir=$1
  shift
  mkdir -p "$dir"
  in_hub env PROBE="ping -c 1 -W 1" COOLDOWN_S=600 POLL_S=0.2 GRACE_S=5 MAX_RESTARTS=2 MPIRUN_ARGS="$MPI_ARGS" \
    BUILD_DIR="$BUILD_DIR" "$@" bash "$HERE/elastic_run.sh" "${FLAGS[@]}" --max_steps "$STEPS" \
    --train_dir "$dir/run" > "$dir/launcher.log" 2>&1 &
  LAUNCHER=$!
}
saved() { grep -q "saved .*model.ckpt-$2 " "$1" 2> /dev/null; }
stepped() { grep -q "I step [0-9]*," "$1" 2> /dev/null; }
# mpirun on the emulated machines HOSTS with the test's flags and EXTRA... (resuming by hand); its log in LOG.
by_hand() {
  local hosts=$1 log=$2 np
  shift 2
  np=$(echo "$hosts" | tr ',' '\n' | grep -c .)
  # shellcheck disable=SC2086  # MPI_ARGS is a list of words
  in_hub timeout -k 5 300 mpirun --allow-run-as-root --oversubscribe -np "$np" --host "$(echo "$hosts" | sed 's/,/:1,/g; s/$/:1/')" \
    --map-by slot $MPI_ARGS "$TRAIN" "${FLAGS[@]}" "$@" >> "$log" 2>&1
}
# Compares case DIR's final checkpoint with the by-hand one in DIR/hand: the parameter digest and every rank file.
same_final() {
  local dir=$1 name=$2 a b f n=0
  a=$(grep -h "saved .*/run/model.ckpt-$STEPS " "$dir"/run/elastic/generation-*.log | grep -o 'digest [0-9a-f]*' | tail -1)
  b=$(grep -h "saved .*/hand/model.ckpt-$STEPS " "$dir/hand.log" | grep -o 'digest [0-9a-f]*' | tail -1)
  if [ -z "$a" ] || [ "$a" != "$b" ]; then
    fail "$name: final parameter $a, resumed by hand $b"
    return 1
  fi
  for f in "$dir/run/model.ckpt-$STEPS".rank-*; do
    cmp -s "$f" "$dir/hand/$(basename "$f")" || { fail "$name: $(basename "$f") differs from the by-hand one"; return 1; }
    n=$((n + 1))
  done
  [ "$n" -gt 0 ] || { fail "$name: no per-rank state file beside the final checkpoint"; return 1; }
  echo "$name: final checkpoint equals the by-hand resume ($a, $n rank file(s) identical)"
}
# TG_ELASTIC_RESULTS=FILE (bench/elastic_bench.sh): one row per case, "case seconds from_step steps_lost equal".
result_row() {
  [ -n "${TG_ELASTIC_RESULTS:-}" ] && printf '%s\t%s\t%s\t%s\t%s\n' "$@" >> "$TG_ELASTIC_RESULTS"
  return 0
}
no_temporary() {
  local left
  left=$(find "$1" -name '*.tmp*' | head -3)
  [ -z "$left" ] || fail "$2: temporary files left: $left"
}
# Waits for case DIR's first generation to save step 20; status 1 (the case failed, its launcher stopped) if never.
until_step20_saved() {
  wait_for "$LAUNCHER" "$1/launcher.log" saved "$1/run/elastic/generation-1.log" 20 && return 0
  fail "$2: generation 1 never saved step 20: $(tail -3 "$1/launcher.log")"
  kill -- "$LAUNCHER" 2> /dev/null
  return 1
}
# Case NAME: 3 machines; INJECT (a function) once step 20 is saved; AFTER (a function or true) once the second
# generation has made its first step; LOST: the machine the second generation must leave out.
loss_case() {
  local name=$1 inject=$2 after=$3 lost=$4 dir="$WORK/$1" t0 t1 from hosts2 rc
  reset_machines
  launch "$dir" HOSTS="$M1:1,$M2:1,$M3:1"
  until_step20_saved "$dir" "$name" || return
  t0=$(now_us)
  "$inject"
  if ! wait_for "$LAUNCHER" "$dir/launcher.log" stepped "$dir/run/elastic/generation-2.log"; then
    fail "$name: no second generation made a step: $(grep elastic_run "$dir/launcher.log" | tail -3)"
    kill -- "$LAUNCHER" 2> /dev/null
    return
  fi
  t1=$(now_us)
  "$after"
  wait_end "$LAUNCHER" "$dir/launcher.log"
  rc=$?
  reset_machines
  grep "^elastic_run:" "$dir/launcher.log" | sed "s/^/  $name: /"
  [ $rc -eq 0 ] || { fail "$name: the launcher exited $rc: $(tail -2 "$dir/launcher.log")"; return; }
  hosts2=$(sed -n 's/^elastic_run: generation 2: [0-9]* machine(s) (\([^)]*\)).*/\1/p' "$dir/launcher.log" | sed 's/:1//g')
  from=$(sed -n 's/^elastic_run: generation 2: .* from .*model\.ckpt-\([0-9]*\) .*/\1/p' "$dir/launcher.log")
  [ "$(echo "$hosts2" | tr ',' '\n' | grep -c .)" = 2 ] && [[ ",$hosts2," != *",$lost,"* ]] ||
    fail "$name: generation 2 ran on '$hosts2', expected the 2 machines other than $lost"
  grep -q "generation 2 finished the training" "$dir/launcher.log" || fail "$name: generation 2 did not finish it"
  echo "$name: loss to the first step of generation 2 (on $hosts2, from step $from): $(seconds_of $((t1 - t0))) s"
  awk -v s="$(seconds_of $((t1 - t0)))" 'BEGIN{exit !(s <= 30)}' || fail "$name: more than 30 s from the loss to a step"
  no_temporary "$dir/run" "$name"
  # By hand: the 3 machines to step $from, then generation 2's from there.
  by_hand "$M1,$M2,$M3" "$dir/hand.log" --max_steps "$from" --train_dir "$dir/hand"
  by_hand "$hosts2" "$dir/hand.log" --allow_topology_change --max_steps "$STEPS" --train_dir "$dir/hand"
  local equal=no lost_steps
  same_final "$dir" "$name" && equal=yes
  lost_steps=$(sed -n 's/^elastic_run: generation 1 failed .*: \([0-9]*\) step(s) lost$/\1/p' "$dir/launcher.log")
  result_row "$name" "$(seconds_of $((t1 - t0)))" "$from" "${lost_steps:--}" "$equal"
}

kill_machine3() { kill -9 "$(trainers_on 3)"; }
cut_machine1() { ip -n "$(netlink_ns 1)" link set "$NETLINK_IF" down; }
stop_machine2() {
  local p
  for p in $(ip netns pids "$(netlink_ns 2)"); do kill -STOP "$p"; done
}
continue_machine2() {
  local p
  for p in $(ip netns pids "$(netlink_ns 2)"); do kill -CONT "$p"; done
}
loss_case killed kill_machine3 true "$M3"
loss_case link cut_machine1 true "$M1"
loss_case stopped stop_machine2 continue_machine2 "$M2"

# ---- grow: 2 machines, the third appears ----
grow() {
  local dir="$WORK/grow" t0 t1 rc from
  reset_machines
  printf '%s:1\n%s:1\n' "$M1" "$M2" > "$WORK/machines"
  FLAGS+=(--elastic_batch per_worker)
  launch "$dir" DISCOVERY="cat $WORK/machines"
  until_step20_saved "$dir" grow || return
  t0=$(now_us)
  echo "$M3:1" >> "$WORK/machines"
  wait_for "$LAUNCHER" "$dir/launcher.log" stepped "$dir/run/elastic/generation-2.log" || fail "grow: no generation 2"
  t1=$(now_us)
  wait_end "$LAUNCHER" "$dir/launcher.log"
  rc=$?
  grep "^elastic_run:" "$dir/launcher.log" | sed "s/^/  grow: /"
  [ $rc -eq 0 ] || { fail "grow: the launcher exited $rc: $(tail -2 "$dir/launcher.log")"; return; }
  grep -q "generation 2: 3 machine(s)" "$dir/launcher.log" || fail "grow: generation 2 did not run on 3 machines"
  grep -q "a total batch of 36, the learning rate scaled by 1.5" "$dir/run/elastic/generation-2.log" ||
    fail "grow: --elastic_batch per_worker did not scale the batch to 36 and the rate by 1.5"
  from=$(sed -n 's/^elastic_run: generation 2: .* from .*model\.ckpt-\([0-9]*\) .*/\1/p' "$dir/launcher.log")
  echo "grow: the third machine appeared; generation 2 made its first step (from step $from) $(seconds_of $((t1 - t0))) s later"
  no_temporary "$dir/run" grow
  by_hand "$M1,$M2" "$dir/hand.log" --max_steps "$from" --train_dir "$dir/hand"
  by_hand "$M1,$M2,$M3" "$dir/hand.log" --allow_topology_change --max_steps "$STEPS" --train_dir "$dir/hand"
  local equal=no
  same_final "$dir" grow && equal=yes
  result_row grow "$(seconds_of $((t1 - t0)))" "$from" 0 "$equal"
  unset 'FLAGS[-1]' 'FLAGS[-2]'
}
grow

# ---- fence: a process of a generation that is over comes back ----
fence() {
  local dir="$WORK/fence" pid rc line
  mkdir -p "$dir/run"
  echo 1 > "$dir/run/generation"
  "$TRAIN" --benchmark_mode --dataset fashion_mnist --net lenet --image_size 16 --batch_size 8 --threads 1 \
    --log_every 1 --max_steps 100000000 --save_iter 100000000 --generation 1 --train_dir "$dir/run" > "$dir/log" 2>&1 &
  pid=$!
  wait_for "$pid" "$dir/log" stepped "$dir/log" || { fail "fence: the trainer made no step"; return; }
  kill -STOP "$pid"
  echo 2 > "$dir/run/generation"  # the launcher started generation 2
  kill -TERM "$pid"               # pending until it runs again: a stop request, which saves
  kill -CONT "$pid"
  wait_end "$pid" "$dir/log"
  rc=$?
  line=$(grep "error:" "$dir/log" | head -1)
  echo "fence: generation 1 continued after generation 2 started: exit $rc; $line"
  [ $rc -eq 1 ] || fail "fence: exit $rc, expected 1"
  [[ $line == *"--generation 1 is over"*"names generation 2"* ]] || fail "fence: no line naming both generations"
  [ -z "$(find "$dir/run" -name 'model.ckpt*' -o -name '*.tmp*' -o -name checkpoint)" ] ||
    fail "fence: it wrote: $(ls "$dir/run")"
}
fence

# ---- bad input: one line each, exit 1, the last checkpoint named ----
bad() {
  local name=$1 want=$2 dir="$WORK/bad-$1" rc line
  shift 2
  mkdir -p "$dir"
  in_hub env PROBE="ping -c 1 -W 1" POLL_S=0.2 WAIT_S=1 MPIRUN_ARGS="$MPI_ARGS" BUILD_DIR="$BUILD_DIR" "$@" \
    bash "$HERE/elastic_run.sh" "${FLAGS[@]}" --max_steps "$STEPS" --train_dir "$dir/run" > "$dir/log" 2>&1
  rc=$?
  line=$(grep "^elastic_run:" "$dir/log" | tail -1)
  echo "bad input, $name: exit $rc; $line"
  [ $rc -eq 1 ] || fail "bad input, $name: exit $rc, expected 1"
  [[ $line == *"$want"*"last checkpoint: "* ]] || fail "bad input, $name: expected a line with '$want'"
}
# A train_dir whose index names a checkpoint that is not there: every generation fails at its start; the index is
# left as it was.
broken_index() {
  mkdir -p "$WORK/bad-restarts exhausted/run"
  printf 'model_checkpoint_path: "model.ckpt-5"\nall_model_checkpoint_paths: "model.ckpt-5"\n' \
    > "$WORK/bad-restarts exhausted/run/checkpoint"
}
reset_machines
bad "discovery fails" "DISCOVERY failed (exit 3)" DISCOVERY="echo no; exit 3"
bad "discovery garbage" "'$M1:two' is not host:slots" DISCOVERY="echo $M1:two"
bad "too few machines" "only 1 machine(s) usable for 1 s, MIN_NODES is 2" HOSTS="$M1:1" MIN_NODES=2
broken_index
bad "restarts exhausted" "MAX_RESTARTS (1) restarts done" HOSTS="$M1:1,$M2:1" MAX_RESTARTS=1 COOLDOWN_S=0
grep -q 'model_checkpoint_path: "model.ckpt-5"' "$WORK/bad-restarts exhausted/run/checkpoint" ||
  fail "bad input, restarts exhausted: the checkpoint index was changed"

if [ $FAILED -ne 0 ]; then
  echo "fault_elastic: FAILED"
  exit 1
fi
echo "fault_elastic: passed"

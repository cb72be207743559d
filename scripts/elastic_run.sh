#!/usr/bin/env bash
# Elastic training: runs terngrad-train under mpirun on the machines that answer, and when the job loses a machine
# (its processes killed, the machine or its link gone, its processes stopped: a stalled peer ends the job after
# --collective_timeout) starts it again on the machines left, from the last checkpoint; a machine that comes back,
# or a new one, is taken in at the next step boundary (the job saves and stops). Horovod elastic's and torchrun's
# idea; each start is a generation of the job.
#
#   scripts/elastic_run.sh TERNGRAD_TRAIN_FLAGS...   --train_dir is required: one folder every machine sees (a shared
#                                                   file system); --save_iter (steps) or --save_secs (time) bounds
#                                                   what a loss costs: the work since the last checkpoint; give
#                                                   --collective_timeout well above the slowest step (a stalled peer
#                                                   is found after it: 600 s by default, tens of seconds suit most)
# Machines (exactly one of, Horovod's conventions):
#   HOSTS="a:2,b:2"       machine:slots (slots: processes on it; ranks fill the machines in this order)
#   HOSTFILE=FILE         one machine a line, "host:slots" or "host slots=N" (# comments)
#   DISCOVERY="COMMAND"   prints the machines available now, "host:slots" a line; asked before each generation and
#                         every POLL_S while one runs
# Settings: MIN_NODES (1: fewer machines waits, then stops), MAX_NODES (all), MAX_RESTARTS (3: failed generations
# before giving up), COOLDOWN_S (60: a machine that failed is left out this long, twice as long at each further
# failure), WAIT_S (120: how long to wait for MIN_NODES), POLL_S (2), GRACE_S (10: how long mpirun may take to end a
# failed generation before the launcher kills it), PROBE (the command that tells a machine answers, the machine
# appended, e.g. `ping -c 1 -W 2`; default `ssh -o BatchMode=yes -o ConnectTimeout=5 MACHINE true`), MPIRUN
# (mpirun), MPIRUN_ARGS (more mpirun arguments, e.g. the rsh agent of emulated machines), BUILD_DIR /
# TERNGRAD_TRAIN (the program).
#
# A generation: the launcher writes its number into <train_dir>/generation, then starts it with --generation (a
# process of an older generation never writes into the train_dir again, and a machine that does not see this
# train_dir refuses to start: train/generation_fence.h) and, when a checkpoint exists, --allow_topology_change (the
# scheme decides what becomes of per-rank state such as error-feedback residuals; --elastic_batch whether the total
# or each worker's batch is kept). Its output goes to <train_dir>/elastic/generation-G.log and to stderr. It ends in
# one of three ways: the training finished (exit 0); it stopped to take in machines (--stop_file
# <train_dir>/elastic.stop: it saved a checkpoint and exited 0; the next generation has more machines); or it failed.
# A failed generation's lost machines are those that do not answer PROBE, and those whose processes mpirun saw
# killed or the survivors named as not answering (rank to machine: the order of the machines and their slots); they
# are left out for their cool-down and the next generation starts on the rest from the last checkpoint; the steps
# lost (the last logged step against the checkpoint's) are said. What is left of a failed generation (mpirun and its
# process group) is killed before the next starts.
# Exit: 0 when the training finished; 1 when MAX_RESTARTS failed generations, fewer than MIN_NODES machines for
# WAIT_S, or a machine list that cannot be read (one line each, naming the last checkpoint); 2 for a usage error.
set -uo pipefail
# shellcheck source=lib/common.sh
source "$(dirname "$0")/lib/common.sh"

say() { echo "elastic_run: $*" >&2; }
usage() {
  sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
}
[ $# -gt 0 ] || usage
case "$1" in -h | --help) usage ;; esac
TRAIN=$(tg_binary terngrad-train) || exit 1
MIN_NODES=${MIN_NODES:-1} MAX_RESTARTS=${MAX_RESTARTS:-3} COOLDOWN_S=${COOLDOWN_S:-60} WAIT_S=${WAIT_S:-120}
POLL_S=${POLL_S:-2} GRACE_S=${GRACE_S:-10} MPIRUN=${MPIRUN:-mpirun} MPIRUN_ARGS=${MPIRUN_ARGS:-}
PROBE=${PROBE:-}
for v in MIN_NODES MAX_RESTARTS COOLDOWN_S WAIT_S GRACE_S; do
  [[ ${!v} =~ ^[0-9]+$ ]] || { say "$v='${!v}' is not a whole number"; exit 2; }
done
if ! [[ $POLL_S =~ ^[0-9]*\.?[0-9]+$ ]] || [ "$POLL_S" = 0 ]; then
  say "POLL_S='$POLL_S' is not a positive number of seconds"
  exit 2
fi
[ "$MIN_NODES" -ge 1 ] || { say "MIN_NODES must be at least 1"; exit 2; }
[ -n "${MAX_NODES:-}" ] && { [[ $MAX_NODES =~ ^[1-9][0-9]*$ && $MAX_NODES -ge $MIN_NODES ]] ||
  { say "MAX_NODES='$MAX_NODES' must be a whole number >= MIN_NODES ($MIN_NODES)"; exit 2; }; }
n_sources=0
for v in HOSTS HOSTFILE DISCOVERY; do [ -n "${!v:-}" ] && n_sources=$((n_sources + 1)); done
[ "$n_sources" -eq 1 ] || { say "give the machines by exactly one of HOSTS, HOSTFILE, DISCOVERY"; exit 2; }

# The train_dir (the flags' --train_dir or --train_dir=...).
TRAIN_DIR=""
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    --train_dir) TRAIN_DIR=${args[i + 1]:-} ;;
    --train_dir=*) TRAIN_DIR=${args[i]#--train_dir=} ;;
    --generation | --generation=* | --stop_file | --stop_file=*)
      say "${args[i]%%=*} is the launcher's to set"
      exit 2
      ;;
  esac
done
[ -n "$TRAIN_DIR" ] || { say "--train_dir is required (every generation resumes from its checkpoints)"; exit 2; }
mkdir -p "$TRAIN_DIR" || exit 1
TRAIN_DIR=$(cd "$TRAIN_DIR" && pwd)
STOP_FILE=$TRAIN_DIR/elastic.stop
LOG_DIR=$TRAIN_DIR/elastic
mkdir -p "$LOG_DIR" || exit 1

# The machines available now, "host slots" a line, in the order given; status 1 and the reason (one line on stdout)
# when the source fails or prints what is not a machine list.
discover() {
  local out line host slots rc
  if [ -n "${DISCOVERY:-}" ]; then
    out=$(bash -c "$DISCOVERY" 2>&1)
    rc=$?
    [ $rc -eq 0 ] || { echo "DISCOVERY failed (exit $rc): $(echo "$out" | tail -1)"; return 1; }
  elif [ -n "${HOSTFILE:-}" ]; then
    out=$(cat "$HOSTFILE" 2>&1) || { echo "HOSTFILE $HOSTFILE: $out"; return 1; }
  else
    out=$(echo "$HOSTS" | tr ',' '\n')
  fi
  while IFS= read -r line; do
    line=${line%%#*}
    line=$(echo "$line" | tr -s ' \t' ' ' | sed 's/^ //; s/ $//')
    [ -z "$line" ] && continue
    if [[ $line =~ ^([^:[:space:]]+):([1-9][0-9]*)$ ]] || [[ $line =~ ^([^:[:space:]]+)\ slots=([1-9][0-9]*)$ ]]; then
      host=${BASH_REMATCH[1]} slots=${BASH_REMATCH[2]}
      echo "$host $slots"
    elif [[ $line =~ ^[^:[:space:]]+$ ]]; then
      echo "$line 1"
    else
      echo "machine list: '$line' is not host:slots"
      return 1
    fi
  done <<< "$out"
}

# Whether a machine answers (at most 10 s).
probe() {
  if [ -n "$PROBE" ]; then
    # shellcheck disable=SC2086  # PROBE is a command and its options
    timeout 10 $PROBE "$1" > /dev/null 2>&1
  else
    timeout 10 ssh -o BatchMode=yes -o ConnectTimeout=5 "$1" true > /dev/null 2>&1
  fi
}

declare -A LEFT_OUT_UNTIL=() FAILS=()  # host -> epoch seconds until which it is left out; its failures
# Usable machines now: discovered, not left out; at most MAX_NODES. "host slots" lines.
usable() {
  local list now host slots n=0
  list=$(discover) || { echo "$list" | tail -1; return 1; }
  now=$(date +%s)
  while read -r host slots; do
    [ -z "$host" ] && continue
    if [ -n "${LEFT_OUT_UNTIL[$host]:-}" ] && [ "$now" -lt "${LEFT_OUT_UNTIL[$host]}" ]; then continue; fi
    [ -n "${MAX_NODES:-}" ] && [ "$n" -ge "$MAX_NODES" ] && break
    echo "$host $slots"
    n=$((n + 1))
  done <<< "$list"
}

# Leaves machine $1 out for its cool-down (COOLDOWN_S, doubled at each further failure); $2: why. Sets left_out_line.
leave_out() {
  local cool
  FAILS[$1]=$((${FAILS[$1]:-0} + 1))
  cool=$((COOLDOWN_S << (FAILS[$1] - 1)))
  LEFT_OUT_UNTIL[$1]=$(($(date +%s) + cool))
  left_out_line=" $1 ($2; failure ${FAILS[$1]}: left out ${cool} s);"
}
left_out_line=""

last_checkpoint() {
  local c
  c=$(sed -n 's/^model_checkpoint_path: "\(.*\)"$/\1/p' "$TRAIN_DIR/checkpoint" 2> /dev/null)
  echo "${c:-none}"
}
checkpoint_step() { last_checkpoint | sed -n 's/.*model\.ckpt-\([0-9]*\)$/\1/p'; }
# The machine that runs world rank $1 of a generation on "host slots" lines $2 (ranks fill the machines in order).
host_of_rank() { echo "$2" | awk -v r="$1" '{ if (r < n + $2) { print $1; exit } n += $2 }'; }
# Whether a failed generation's log names its end: a process's error line, or mpirun's report of one.
ended_in_error() {
  grep -qE '^terngrad-train( \(process [0-9]+ of [0-9]+\))?: error:|^MPI_ABORT was invoked|mpirun noticed that process' "$1"
}

gen=$(cat "$TRAIN_DIR/generation" 2> /dev/null || echo 0)
[[ $gen =~ ^[0-9]+$ ]] || { say "$TRAIN_DIR/generation holds '$gen', not a generation number"; exit 1; }
failures=0 waited_since=""
JOB="" TAIL=""
cleanup() {
  [ -n "$JOB" ] && kill -- -"$JOB" 2> /dev/null
  [ -n "$TAIL" ] && kill "$TAIL" 2> /dev/null
}
trap 'cleanup; exit 130' INT TERM

while :; do
  listed=$(usable) || { say "$listed; last checkpoint: $(last_checkpoint)"; exit 1; }
  # Only machines that answer start; one that does not is left out for its cool-down (its failure counted).
  machines=""
  while read -r host slots; do
    [ -z "$host" ] && continue
    if probe "$host"; then
      machines+="$host $slots"$'\n'
    else
      leave_out "$host" "does not answer"
      say "$host does not answer:${left_out_line}"
    fi
  done <<< "$listed"
  machines=${machines%$'\n'}
  count=$(echo "$machines" | grep -c .)
  if [ "$count" -lt "$MIN_NODES" ]; then
    waited_since=${waited_since:-$(date +%s)}
    if [ $(($(date +%s) - waited_since)) -ge "$WAIT_S" ]; then
      say "only $count machine(s) usable for ${WAIT_S} s, MIN_NODES is $MIN_NODES; last checkpoint: $(last_checkpoint)"
      exit 1
    fi
    sleep "$POLL_S"
    continue
  fi
  waited_since=""
  gen=$((gen + 1))
  { echo "$gen" > "$TRAIN_DIR/generation.tmp" && mv -f "$TRAIN_DIR/generation.tmp" "$TRAIN_DIR/generation"; } || exit 1
  rm -f "$STOP_FILE"
  host_arg=$(echo "$machines" | awk '{printf "%s%s:%s", (NR > 1 ? "," : ""), $1, $2}')
  np=$(echo "$machines" | awk '{n += $2} END {print n}')
  resume=()
  [ "$(last_checkpoint)" != none ] && resume=(--allow_topology_change)
  log=$LOG_DIR/generation-$gen.log
  : > "$log"
  say "generation $gen: $count machine(s) ($host_arg), $np process(es), from $(last_checkpoint) (log: $log)"
  # shellcheck disable=SC2086  # MPIRUN_ARGS is a list of words
  setsid $MPIRUN --allow-run-as-root --oversubscribe -np "$np" --host "$host_arg" --map-by slot $MPIRUN_ARGS \
    "$TRAIN" "$@" "${resume[@]}" --generation "$gen" --stop_file "$STOP_FILE" > "$log" 2>&1 < /dev/null &
  JOB=$!
  tail -n +1 -f --pid="$JOB" "$log" >&2 &
  TAIL=$!
  asked=0 failed_at=""
  while kill -0 "$JOB" 2> /dev/null; do
    sleep "$POLL_S"
    # A failed generation whose mpirun does not end (a machine that is stopped or cut off cannot be told to): killed
    # GRACE_S after the failure showed.
    if ended_in_error "$log"; then
      failed_at=${failed_at:-$(date +%s)}
      if [ $(($(date +%s) - failed_at)) -ge "$GRACE_S" ]; then
        say "generation $gen: mpirun did not end ${GRACE_S} s after the failure: killing it"
        kill -- -"$JOB" 2> /dev/null
        sleep 1
        kill -KILL -- -"$JOB" 2> /dev/null
      fi
      continue
    fi
    # A machine to take in (one back from its cool-down, or a new one): this generation saves and stops.
    if [ "$asked" = 0 ] && more=$(usable 2> /dev/null) && [ "$(echo "$more" | grep -c .)" -gt "$count" ]; then
      say "generation $gen: $(($(echo "$more" | grep -c .) - count)) more machine(s) usable: stopping at the next step" \
        "to take them in"
      touch "$STOP_FILE"
      asked=1
    fi
  done
  wait "$JOB"
  rc=$?
  kill -KILL -- -"$JOB" 2> /dev/null  # anything of the generation still running here
  wait "$TAIL" 2> /dev/null
  JOB="" TAIL=""
  # Stopped for the machines to take in (the trainer's "stopped at step N on request"): the next generation has them.
  if [ "$rc" = 0 ] && [ "$asked" = 1 ] && grep -q "stopped at step [0-9]* on request" "$log"; then continue; fi
  if [ "$rc" = 0 ]; then
    say "generation $gen finished the training; last checkpoint: $(last_checkpoint)"
    exit 0
  fi
  failures=$((failures + 1))
  # The machines lost: those that do not answer, whose processes were killed, or that the survivors named.
  declare -A lost=()
  while read -r host _; do probe "$host" || lost[$host]="does not answer"; done <<< "$machines"
  while read -r host; do
    [ -n "$host" ] && lost[$host]=${lost[$host]:-"its process was killed"}
  done < <(sed -n 's/.*mpirun noticed that process rank [0-9]* with PID [0-9]* on node \([^ ]*\) exited on signal.*/\1/p' "$log")
  while read -r host; do
    [ -n "$host" ] && lost[$host]=${lost[$host]:-"mpirun lost its daemon"}
  done < <(sed -n 's/.*Remote daemon: \[\[[0-9]*,[0-9]*\],[0-9]*\] on node \([^ ]*\).*/\1/p' "$log")
  for r in $(sed -n 's/.*process(es) \([0-9,]*\) of [0-9]* did not answer.*/\1/p' "$log" | tr ',' '\n' | sort -un); do
    host=$(host_of_rank "$r" "$machines")
    [ -n "$host" ] && lost[$host]=${lost[$host]:-"its process (rank $r) stopped answering"}
  done
  detail=""
  for host in "${!lost[@]}"; do
    leave_out "$host" "${lost[$host]}"
    detail+=$left_out_line
  done
  unset lost
  reached=$(grep -o 'I step [0-9]*,' "$log" | tail -1 | tr -dc '0-9')
  saved=$(checkpoint_step)
  say "generation $gen failed (exit $rc; failure $failures of at most $MAX_RESTARTS restarts):${detail:- no machine lost;}" \
    "reached step ${reached:-none}, last checkpoint $(last_checkpoint)${reached:+: $((reached - ${saved:-0})) step(s) lost}"
  if [ "$failures" -gt "$MAX_RESTARTS" ]; then
    say "MAX_RESTARTS ($MAX_RESTARTS) restarts done and generation $gen failed: giving up; last checkpoint: $(last_checkpoint)"
    exit 1
  fi
done

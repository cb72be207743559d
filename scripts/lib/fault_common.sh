# Helpers of the fault tests (scripts/fault_test.sh, scripts/fault_elastic.sh): failures counted in FAILED, waits
# for observed progress bounded by STALL_S seconds without any. Sourced.
# shellcheck shell=bash
STALL_S=${TG_FAULT_STALL_S:-120}
FAILED=0
# shellcheck disable=SC2034  # FAILED is read by the scripts that source this
fail() { echo "FAIL: $*"; FAILED=1; }
digest_of() { grep -o 'parameter digest [0-9a-f]*' "$1" | tail -1 | awk '{print $3}'; }
now_us() { echo "${EPOCHREALTIME/./}"; }  # microseconds (bash 5)
seconds_of() { awk -v us="$1" 'BEGIN{printf "%.1f", us / 1e6}'; }

# wait_for PID LOG COMMAND...: polls COMMAND until it succeeds (0). 2: PID ended first. 1: no progress (LOG
# did not grow, the command did not succeed) for STALL_S seconds; the reason is printed.
wait_for() {
  local pid=$1 log=$2 size=-1 new last n=0
  shift 2
  last=$(now_us)
  while ! "$@"; do
    kill -0 "$pid" 2> /dev/null || { "$@" && return 0; return 2; }
    if ((++n % 25 == 0)); then  # every ~0.5 s: has the run made progress?
      new=$(wc -c < "$log" 2> /dev/null || echo 0)
      if [ "$new" != "$size" ]; then
        size=$new
        last=$(now_us)
      elif (($(now_us) - last > STALL_S * 1000000)); then
        echo "no progress for $STALL_S s while waiting for: $*; last line: $(tail -1 "$log")"
        return 1
      fi
    fi
    sleep 0.02
  done
}
# Waits for PID to end by itself, bounded by STALL_S seconds without LOG growing; its exit status, or 124.
wait_end() {
  local pid=$1 log=$2 why
  why=$(wait_for "$pid" "$log" false)
  if [ $? -eq 1 ]; then
    echo "$why" >&2
    kill -9 "$pid" 2> /dev/null
    wait "$pid" 2> /dev/null
    return 124
  fi
  wait "$pid"
}


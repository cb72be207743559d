# shellcheck shell=bash
# The bookkeeping of scripts/gpu_check.sh's device run (sourced): sections run in order of value inside one
# deadline, each timed, each ending PASS, FAIL or SKIPPED with a reason, or SLOW: a speed section (GC_SPEED) whose
# runs were correct and whose measured ratio missed its target; a failing command is run once more with
# TG_CUDA_SYNC=1 (a kernel fault then names its launcher); the summary says first whether the correctness sections
# (all but GC_SPEED's) passed, the condition on which the GPU path's status flips (core/gpu_status.h), then ends
# with one line:
#   gpu_check: PASS                                    every section ran and passed, every speed target met
#   gpu_check: SLOW (n speed targets missed: a, b)     every section ran, none failed, speed targets missed
#   gpu_check: PARTIAL (n sections skipped: a, b; ...) none failed, some did not run (time, a missing tool)
#   gpu_check: FAIL (n sections failed: a, b; ...)     any failed (a missing GPU makes the environment fail)
# Functions:
#   gc_init SECONDS             the deadline, from now
#   gc_left                     prints the seconds left before it
#   gc_section NAME CAP         starts section NAME; GC_LIMIT = min(CAP, seconds left) (GC_CAP = CAP); records it
#                               SKIPPED and returns 1 when under GC_MIN_SECONDS are left
#   gc_pass / gc_fail / gc_skip / gc_slow DETAIL   ends the current section (its time is recorded)
#   gc_timed_out WHAT           ends a section whose command WHAT ran out of time: SKIPPED when the deadline had
#                               cut its limit below its cap (the run was out of time, not the section), else FAIL,
#                               naming the limit that run had (the section's cap, or its share of it)
#   gc_skip_section NAME REASON records a section that was not started
#   gc_run LOG CMD...           runs CMD under timeout GC_LIMIT (killed GC_KILL_AFTER s after its TERM) into LOG;
#                               GC_RUN_LIMIT is that limit, GC_RC its exit status (124 or 137: timed out); when it failed otherwise and time is left, reruns it once with
#                               TG_CUDA_SYNC=1 into LOG.sync: GC_RERUN_RC (empty when not rerun). GC_NO_RERUN=1
#                               (for a program TG_CUDA_SYNC means nothing to, the PyTorch peer) runs it once
#   gc_summary FILE             prints the table, the correctness line and the last line, also into FILE; returns 0
#                               (PASS), 4 (SLOW), 3 (PARTIAL) or 1 (FAIL)
GC_MIN_SECONDS=5
GC_KILL_AFTER=2  # a command that ignores its TERM is killed this long after it (counted in no cap: keep it short)
GC_SPEED=""      # names or prefixes of the speed sections (gpu_check.sh sets them); the rest are correctness
GC_NAMES=() GC_STATUS=() GC_DETAIL=() GC_SECONDS=()
GC_CUR="" GC_T0=0 GC_LIMIT=0 GC_CAP=0 GC_RC=0 GC_RERUN_RC="" GC_RUN_LIMIT=0

gc_init() {
  GC_START=$(date +%s)
  GC_DEADLINE=$((GC_START + $1))
  GC_NAMES=() GC_STATUS=() GC_DETAIL=() GC_SECONDS=()
}

gc_left() { echo $((GC_DEADLINE - $(date +%s))); }

gc_record() {  # NAME STATUS DETAIL SECONDS
  GC_NAMES+=("$1") GC_STATUS+=("$2") GC_DETAIL+=("$3") GC_SECONDS+=("$4")
}

gc_section() {
  local name=$1 cap=$2 left
  left=$(gc_left)
  GC_CAP=$cap
  GC_LIMIT=$((cap < left ? cap : left))
  if ((GC_LIMIT < GC_MIN_SECONDS)); then
    gc_record "$name" SKIPPED "the $((GC_DEADLINE - GC_START)) s deadline is reached" 0
    echo "== $name: SKIPPED (deadline)"
    return 1
  fi
  GC_CUR=$name GC_T0=$(date +%s)
  echo "== [$((GC_T0 - GC_START)) s] $name (limit ${GC_LIMIT} s)"
}

gc_end() {  # STATUS DETAIL
  local took=$(($(date +%s) - GC_T0))
  gc_record "$GC_CUR" "$1" "$2" "$took"
  echo "   $GC_CUR: $1${2:+ ($2)} in $took s"
  GC_CUR=""
}
gc_pass() { gc_end PASS "${1:-}"; }
gc_fail() { gc_end FAIL "${1:-}"; }
gc_skip() { gc_end SKIPPED "${1:-}"; }
gc_slow() { gc_end SLOW "${1:-}"; }

gc_timed_out() {
  local run=${GC_RUN_LIMIT:-$GC_LIMIT}
  ((run > 0)) || run=$GC_LIMIT
  if ((GC_LIMIT < GC_CAP)); then
    gc_skip "$1 cut by the $((GC_DEADLINE - GC_START)) s deadline after ${run} s (section cap ${GC_CAP} s)"
  elif ((run < GC_LIMIT)); then
    gc_fail "$1 timed out after ${run} s (its share of the section's ${GC_LIMIT} s cap)"
  else
    gc_fail "$1 timed out after ${run} s (the section's cap)"
  fi
}

gc_is_speed() {  # NAME: whether it is one of GC_SPEED's sections
  local s
  for s in $GC_SPEED; do [[ $1 == "$s" || $1 == "$s":* ]] && return 0; done
  return 1
}

gc_skip_section() {
  gc_record "$1" SKIPPED "$2" 0
  echo "== $1: SKIPPED ($2)"
}

gc_run() {
  local log=$1
  shift
  GC_RERUN_RC=""
  GC_RUN_LIMIT=$GC_LIMIT
  timeout -k "$GC_KILL_AFTER" "$GC_LIMIT" "$@" > "$log" 2>&1
  GC_RC=$?
  ((GC_RC == 137)) && GC_RC=124  # killed after ignoring its TERM: timed out all the same
  if ((GC_RC != 0 && GC_RC != 124 && GC_RC != 77)) && [[ ${GC_NO_RERUN:-0} != 1 ]]; then
    local left
    left=$(($(gc_left) < GC_LIMIT ? $(gc_left) : GC_LIMIT))
    if ((left >= GC_MIN_SECONDS)); then
      echo "   exit $GC_RC: rerunning once with TG_CUDA_SYNC=1 (limit $left s)"
      TG_CUDA_SYNC=1 timeout -k "$GC_KILL_AFTER" "$left" "$@" > "$log.sync" 2>&1
      GC_RERUN_RC=$?
    fi
  fi
  return "$GC_RC"
}

# What a failed run's rerun said, for the section's detail.
gc_rerun_text() {
  [[ -z $GC_RERUN_RC ]] && return 0
  if ((GC_RERUN_RC == 0)); then
    echo "; passed when rerun with TG_CUDA_SYNC=1 (a race or an asynchronous fault?)"
  else
    echo "; rerun with TG_CUDA_SYNC=1: exit $GC_RERUN_RC"
  fi
}

gc_summary() {
  local file=$1 i failed=() skipped=() slow=() bad_correct=() skipped_correct=() n_correct=0 line text correct
  text="== summary after $(($(date +%s) - GC_START)) s"
  for i in "${!GC_NAMES[@]}"; do
    text+=$'\n'$(printf '  %-26s %-7s %4s s  %s' "${GC_NAMES[$i]}" "${GC_STATUS[$i]}" "${GC_SECONDS[$i]}" "${GC_DETAIL[$i]}")
    case ${GC_STATUS[$i]} in
      FAIL) failed+=("${GC_NAMES[$i]}") ;;
      SKIPPED) skipped+=("${GC_NAMES[$i]}") ;;
      SLOW) slow+=("${GC_NAMES[$i]}") ;;
    esac
    if ! gc_is_speed "${GC_NAMES[$i]}"; then
      n_correct=$((n_correct + 1))
      [[ ${GC_STATUS[$i]} == FAIL ]] && bad_correct+=("${GC_NAMES[$i]}")
      [[ ${GC_STATUS[$i]} == SKIPPED ]] && skipped_correct+=("${GC_NAMES[$i]}")
    fi
  done
  # Whether the correctness sections passed: what the GPU path's status may flip on (not the speed ratios).
  if ((n_correct == 0)); then correct="correctness: none ran"
  elif ((${#bad_correct[@]})); then correct="correctness: FAIL ($(gc_join "${bad_correct[@]}"))"
  elif ((${#skipped_correct[@]})); then correct="correctness: INCOMPLETE (skipped: $(gc_join "${skipped_correct[@]}"))"
  else correct="correctness: PASS ($n_correct sections)"; fi
  local missed=""
  ((${#slow[@]})) && missed="${#slow[@]} speed target$( ((${#slow[@]} > 1)) && echo s) missed: $(gc_join "${slow[@]}")"
  if ((${#GC_NAMES[@]} == 0)); then
    line="gpu_check: FAIL (no section ran)"
  elif ((${#failed[@]})); then
    line="gpu_check: FAIL (${#failed[@]} section$( ((${#failed[@]} > 1)) && echo s) failed: $(gc_join "${failed[@]}")"
    ((${#skipped[@]})) && line+="; ${#skipped[@]} skipped: $(gc_join "${skipped[@]}")"
    line+="${missed:+; $missed})"
  elif ((${#skipped[@]})); then
    line="gpu_check: PARTIAL (${#skipped[@]} section$( ((${#skipped[@]} > 1)) && echo s) skipped: $(gc_join "${skipped[@]}")${missed:+; $missed})"
  elif ((${#slow[@]})); then
    line="gpu_check: SLOW ($missed)"
  else
    line="gpu_check: PASS"
  fi
  printf '%s\n%s\n%s\n' "$text" "$correct" "$line" | tee "$file"
  [[ $line == "gpu_check: PASS" ]] && return 0
  [[ $line == "gpu_check: SLOW"* ]] && return 4
  [[ $line == "gpu_check: PARTIAL"* ]] && return 3
  return 1
}

gc_join() {
  local IFS=,
  echo "$*" | sed 's/,/, /g'
}

# gc_median: the true median of the numbers on stdin (one a line): the middle one, or the mean of the middle two.
gc_median() {
  sort -g | awk '{v[NR] = $1} END {
    if (NR == 0) exit 1
    if (NR % 2) printf "%.1f\n", v[(NR + 1) / 2]; else printf "%.1f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# scratch.sh: what every benchmark script does around its runs, sourced by them.
#   bench_scratch NAME   TMP=/tmp/NAME.<pid>.XXXXXX, removed at exit; an emulated link's namespaces (netns_link.sh,
#                        when sourced) are deleted too. Ctrl-C exits 130, TERM 143; otherwise the script's status stays.
#   run CMD...           runs CMD in the background and waits for it: bash runs a trap only once the foreground
#                        command has finished, but interrupts a `wait` at once, so Ctrl-C stops a long run now.
#   now                  wall-clock seconds (with nanoseconds)
#   elapsed A B          B - A in seconds, one decimal
#   why LOG              the reason a run failed, for its row: LOG's first error line, else its last line (no tabs)
# shellcheck shell=bash

bench_scratch() {
  TMP=$(mktemp -d "/tmp/$1.$$.XXXXXX")
  trap _bench_scratch_exit EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

# shellcheck disable=SC2317 # run by the EXIT trap
_bench_scratch_exit() {
  local rc=$?
  trap - EXIT INT TERM
  if declare -F netlink_destroy >/dev/null; then netlink_destroy; fi
  rm -rf "$TMP"
  exit "$rc"
}

run() {
  "$@" &
  wait "$!"
}
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f\n", b - a }'; }
why() { { grep -m1 -iE 'error' "$1" || tail -n 1 "$1"; } 2>/dev/null | tr '\t' ' ' | cut -c1-200; }

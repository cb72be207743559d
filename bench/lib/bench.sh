# bench.sh: what every bench script sources first: scripts/lib/common.sh (TG_ROOT, tg_die: "<script>: MESSAGE" on
# stderr, exit 1; tg_binary), lib/results.sh (the results file), and below, the bench's command line and the
# refusals the benches share before anything is created.
#   bench_options SPEC... -- ARG...
#       the options of a bench that takes long ones and words (accuracy_bench.sh, tta_bench.sh, ...). ARGS keeps
#       ARG... as given (the results header's command). SPEC is one of
#         -x=VAR          -x takes a value, which goes to VAR
#         -x=FUNC()       -x takes a value, FUNC is called with it (with none when it is missing: its own message)
#         -x:VAR=VALUE    -x takes none and sets VAR to VALUE
#         @ARRAY          the words that are not options are added to ARRAY
#       -h and --help run the caller's usage and exit 0. Refused (one line, exit 1): "-x needs a value (--help)"
#       (BENCH_VALUE_HINT, if set, replaces " (--help)"), "unknown option -x (--help)", and, without @ARRAY or for
#       a word when there is none, "unknown argument WORD (--help)".
#   bench_getopts OPTSTRING USAGE SPEC... -- ARG...
#       the short options of the other benches, through getopts (ARGS keeps ARG...). SPEC: x=VAR, x=FUNC() as
#       above, x+=ARRAY (each value appended). Any other option, after getopts' own message for an unknown one or
#       a missing value: USAGE "N,M" prints the script's lines N to M (its header) on stdout and exits 2; any
#       other USAGE is the message of tg_die.
#   bench_need_tools TOOL...   refuses "needs TOOL on PATH" for the first one missing
#   bench_link_refusals TOOLS EXAMPLES SUCH_AS RATE...
#       the refusals of a bench on emulated machines (bench/lib/netns_link.sh, sourced by the caller): root,
#       every one of TOOLS (space-separated) on the PATH, a RATE ("no RATE given (e.g. EXAMPLES; --help)"), each
#       one a tc rate ("bad rate 'R': expected a tc rate such as SUCH_AS, or none")
#   bench_programs DIR HINT NAME[=VAR]...
#                              refuses "no DIR/NAME (HINT)" for the first NAME not executable in DIR; then sets each
#                              VAR to its program's absolute path (realpath)
#   bench_batch NET DEFAULT    NET's per-worker batch from -B (BATCHES: "lenet=512,alexnet=8"), else DEFAULT;
#                              refuses "-B NET=X: the batch must be a positive integer"
# shellcheck shell=bash

# shellcheck source=../../scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib/common.sh"
# shellcheck source=results.sh
source "$(dirname "${BASH_SOURCE[0]}")/results.sh"

# SPEC TARGET VALUE...: what a value option's spec does with its value (a missing one: FUNC() with none).
_bench_option_take() {
  local target=$1
  shift
  case "$target" in
    *"()") "${target%"()"}" "$@" ;;
    +*) eval "${target#+}+=(\"\$1\")" ;;
    *) printf -v "$target" '%s' "$1" ;;
  esac
}

bench_options() {
  local _specs=() _words="" _s _found
  while [ "$1" != -- ]; do
    case "$1" in
      @*) _words=${1#@} ;;
      *) _specs+=("$1") ;;
    esac
    shift
  done
  shift
  # shellcheck disable=SC2034 # read by the caller (results_header)
  ARGS=("$@")
  while [ $# -gt 0 ]; do
    if [ "$1" = -h ] || [ "$1" = --help ]; then
      usage
      exit 0
    fi
    _found=""
    for _s in "${_specs[@]}"; do
      [ "${_s%%[:=]*}" = "$1" ] || continue
      _found=1
      _s=${_s#"$1"}
      if [ "${_s:0:1}" = : ]; then
        _s=${_s#:}
        printf -v "${_s%%=*}" '%s' "${_s#*=}"
        shift
      else
        _s=${_s#=}
        [ $# -ge 2 ] || [[ $_s != *"()" ]] || _bench_option_take "$_s" # FUNC's own message
        [ $# -ge 2 ] || tg_die "$1 needs a value${BENCH_VALUE_HINT- (--help)}"
        _bench_option_take "$_s" "$2"
        shift 2
      fi
      break
    done
    [ -z "$_found" ] || continue
    if [ -n "$_words" ] && [[ $1 != -* ]]; then
      eval "$_words+=(\"\$1\")"
      shift
    elif [ -n "$_words" ]; then
      tg_die "unknown option $1 (--help)"
    else
      tg_die "unknown argument $1 (--help)"
    fi
  done
}

bench_getopts() {
  local _optstring=$1 _usage=$2 _specs=() _s _o _found
  shift 2
  while [ "$1" != -- ]; do
    _specs+=("$1")
    shift
  done
  shift
  # shellcheck disable=SC2034 # read by the caller (results_header)
  ARGS=("$@")
  while getopts "$_optstring" _o "$@"; do
    _found=""
    for _s in "${_specs[@]}"; do
      [ "${_s%%[+=]*}" = "$_o" ] || continue
      _found=1
      _s=${_s#"$_o"}
      if [ "${_s:0:1}" = + ]; then
        _bench_option_take "+${_s#+=}" "$OPTARG"
      else
        _bench_option_take "${_s#=}" "$OPTARG"
      fi
      break
    done
    [ -z "$_found" ] || continue
    if [[ $_usage =~ ^[0-9]+,[0-9]+$ ]]; then
      sed -n "${_usage}p" "$0"
      exit 2
    fi
    tg_die "$_usage"
  done
}

bench_need_tools() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null 2>&1 || tg_die "needs $tool on PATH"
  done
}

bench_link_refusals() {
  local tools=$1 examples=$2 such_as=$3 r
  shift 3
  [ "$(id -u)" = 0 ] || tg_die "needs root (network namespaces, tc)"
  # shellcheck disable=SC2086 # the tools are words
  bench_need_tools $tools
  [ $# -gt 0 ] || tg_die "no RATE given (e.g. $examples; --help)"
  for r in "$@"; do
    netlink_rate_bits "$r" >/dev/null || tg_die "bad rate '$r': expected a tc rate such as $such_as, or none"
  done
}

bench_programs() {
  local dir=$1 hint=$2 p
  shift 2
  for p in "$@"; do
    [ -x "$dir/${p%%=*}" ] || tg_die "no $dir/${p%%=*} ($hint)"
  done
  for p in "$@"; do
    [[ $p != *=* ]] || printf -v "${p#*=}" '%s' "$(realpath "$dir/${p%%=*}")"
  done
}

bench_batch() {
  local kv
  for kv in ${BATCHES//,/ }; do
    if [ "${kv%%=*}" = "$1" ]; then
      [[ "${kv#*=}" =~ ^[1-9][0-9]*$ ]] || tg_die "-B $kv: the batch must be a positive integer"
      echo "${kv#*=}"
      return
    fi
  done
  echo "$2"
}

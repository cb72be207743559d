# results.sh: the provenance every benchmark results file starts with, and how such a file is written. Sourced
# by the bench/*.sh scripts and scripts/demo.sh; bench/README.md ("Results files") describes the format and
# scripts/check_readme_results.py reads it.
#
# A results file (bench/results/NAME.tsv) is `# key: value` lines, then one tab-separated table with a header
# line. The keys, all required:
#   format   terngrad-results 1
#   kind     which renderer of scripts/check_readme_results.py turns the table into README text
#   command  the command line that wrote the file, the script named from the repository root
#   commit   the 40-hex commit checked out when it ran
#   tree     clean, or modified: tracked files other than bench/results/ and *.md differed from that commit
#   date     UTC, ISO 8601
#   cpu      the CPU model and the cores the OS shows
#   isa      the widest vector ISA of the CPU (AVX-512, AVX2 or baseline x86-64), then its AVX flags
#   flags    the build: CMake build type, compiler and its flags, from BUILD_DIR/CMakeCache.txt; OMP_* settings
#   load     the 1/5/15-minute load average when the run started
# and, when the run restricted the vector ISA (results_restrict_isa), `restricted`: to what and how; `version`: the
# first line of BUILD_DIR/terngrad-train --version (the binary that ran: version, commit, build type, compiler) when
# that program is there; `peer`: the PyTorch beside ours (interpreter, torch version), written by the benches that
# run one.
# shellcheck shell=bash

TG_RESULTS_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

# The widest vector ISA of this CPU, then its AVX flags.
results_isa() {
  local flags widest=baseline
  flags=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|avx512[a-z0-9_]*|amx[a-z0-9_]*)$' | sort -u |
    paste -sd' ' -)
  if [[ " $flags " == *" avx512f "* ]]; then
    widest=AVX-512
  elif [[ " $flags " == *" avx2 "* ]]; then
    widest=AVX2
  fi
  echo "$widest (${flags:-no AVX})"
}

# The build's type, compiler and flags (BUILD_DIR/CMakeCache.txt), and the OMP_* variables of this environment.
results_flags() {
  local cache=$1/CMakeCache.txt type="?" cxx="?" cxxflags="" relflags="" omp
  if [ -f "$cache" ]; then
    type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$cache")
    cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$cache")
    cxxflags=$(sed -n 's/^CMAKE_CXX_FLAGS:[A-Z]*=//p' "$cache")
    relflags=$(sed -n "s/^CMAKE_CXX_FLAGS_${type^^}:[A-Z]*=//p" "$cache")
    [ -x "$cxx" ] && cxx="$cxx $("$cxx" -dumpfullversion 2>/dev/null || echo)"
  fi
  omp=$(env | grep '^OMP_' | sort | paste -sd' ' -)
  echo "build ${type:-?}, ${cxx% }, CXXFLAGS '${cxxflags}' '${relflags}'; ${omp:-no OMP_* set}"
}

# SCRIPT ARGS...: the command line, SCRIPT named from the repository root.
results_command() {
  local script
  script=$(realpath --relative-to="$TG_RESULTS_ROOT" "$1")
  shift
  if [ $# -eq 0 ]; then echo "$script"; else echo "$script $*"; fi
}
# The commit checked out, and whether the tree is clean or modified.
results_checkout_commit() { git -C "$TG_RESULTS_ROOT" rev-parse HEAD 2>/dev/null || echo unknown; }
results_checkout_tree() {
  # Results files and the READMEs that quote them change between runs; any other tracked file is code.
  if [ -z "$(git -C "$TG_RESULTS_ROOT" status --porcelain --untracked-files=no -- . ':(exclude)bench/results' \
    ':(exclude)*.md' 2>/dev/null)" ]; then echo clean; else echo modified; fi
}

# results_resume KIND OUT COLUMNS_LINE HEADER_FILE ROWS_FILE: a stopped run's results file OUT gone on with: its
# provenance lines to HEADER_FILE, its table's rows (without the column line) to ROWS_FILE. Returns 1, the reason
# on stderr, when OUT is not of KIND or its columns are not COLUMNS_LINE.
results_resume() {
  local kind=$1 out=$2 columns=$3 header=$4 rows=$5
  grep -q "^# kind: $kind\$" "$out" || {
    echo "$out is not a results file of kind $kind" >&2
    return 1
  }
  [ "$(grep -v '^#' "$out" | head -n 1)" = "$columns" ] || {
    echo "$out: its columns are not this script's" >&2
    return 1
  }
  grep '^#' "$out" >"$header"
  grep -v '^#' "$out" | tail -n +2 >"$rows" || true
}
# results_resumed_line SCRIPT ARGS...: the `# resumed:` line a run adds to the header it goes on with.
results_resumed_line() {
  echo "# resumed: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(results_checkout_commit) (tree $(results_checkout_tree))," \
    "load $(cut -d' ' -f1-3 /proc/loadavg), command $(results_command "$@")"
}

# results_restrict_isa avx2: exports what restricts this run, ours and PyTorch's, to AVX2 on a wider CPU
# (ONEDNN_MAX_CPU_ISA, which also lowers our own vector loops; ATEN_CPU_CAPABILITY and MKL_ENABLE_INSTRUCTIONS for
# PyTorch) and TG_RESTRICTED_ISA, which results_header records as `# restricted:`. `native` changes nothing.
results_restrict_isa() {
  case "$1" in
    native) ;;
    avx2)
      export ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2
      export TG_RESTRICTED_ISA="AVX2 (ONEDNN_MAX_CPU_ISA=AVX2 for both; ATEN_CPU_CAPABILITY=avx2 and MKL_ENABLE_INSTRUCTIONS=AVX2 for PyTorch)"
      ;;
    *)
      echo "results_restrict_isa: unknown ISA '$1' (native, avx2)" >&2
      return 1
      ;;
  esac
}

# results_header KIND BUILD_DIR SCRIPT ARGS...: the provenance lines, SCRIPT named from the repository root.
results_header() {
  local kind=$1 build=$2 script=$3
  shift 3
  echo "# format: terngrad-results 1"
  echo "# kind: $kind"
  echo "# command: $(results_command "$script" "$@")"
  echo "# commit: $(results_checkout_commit)"
  echo "# tree: $(results_checkout_tree)"
  echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "# cpu: $(grep -m1 '^model name' /proc/cpuinfo | sed 's/^[^:]*: *//'), $(nproc) cores"
  echo "# isa: $(results_isa)"
  if [ -n "${TG_RESTRICTED_ISA:-}" ]; then echo "# restricted: $TG_RESTRICTED_ISA"; fi
  echo "# flags: $(results_flags "$build")"
  echo "# load: $(cut -d' ' -f1-3 /proc/loadavg)"
  if [ -x "$build/terngrad-train" ]; then echo "# version: $("$build/terngrad-train" --version 2>/dev/null | head -1)"; fi
}

# results_commit HEADER_FILE TABLE_FILE OUT: writes OUT (header, then the table) under a temporary name in OUT's
# folder and renames it, so a stopped run never leaves a half-written results file.
results_commit() {
  local header=$1 table=$2 out=$3 tmp
  mkdir -p "$(dirname "$out")"
  tmp=$(mktemp "$out.tmp.XXXXXX")
  cat "$header" "$table" >"$tmp"
  mv -f "$tmp" "$out"
  echo "results: $out" >&2
}

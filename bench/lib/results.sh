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

# results_header KIND BUILD_DIR SCRIPT ARGS...: the provenance lines, SCRIPT named from the repository root.
results_header() {
  local kind=$1 build=$2 script=$3 commit tree=clean cmd
  shift 3
  script=$(realpath --relative-to="$TG_RESULTS_ROOT" "$script")
  cmd=$script
  [ $# -eq 0 ] || cmd="$script $*"
  commit=$(git -C "$TG_RESULTS_ROOT" rev-parse HEAD 2>/dev/null || echo unknown)
  # Results files and the READMEs that quote them change between runs; any other tracked file is code.
  [ -z "$(git -C "$TG_RESULTS_ROOT" status --porcelain --untracked-files=no -- . ':(exclude)bench/results' \
    ':(exclude)*.md' 2>/dev/null)" ] || tree=modified
  echo "# format: terngrad-results 1"
  echo "# kind: $kind"
  echo "# command: $cmd"
  echo "# commit: $commit"
  echo "# tree: $tree"
  echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "# cpu: $(grep -m1 '^model name' /proc/cpuinfo | sed 's/^[^:]*: *//'), $(nproc) cores"
  echo "# isa: $(results_isa)"
  echo "# flags: $(results_flags "$build")"
  echo "# load: $(cut -d' ' -f1-3 /proc/loadavg)"
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

# shellcheck shell=bash
# What the scripts share (sourced, not run): the repository root, the build folder, and where the terngrad
# programs are. One place for each, so the prepare, launch, demo and fault scripts agree.
#   TG_ROOT            the repository root (the folder above scripts/)
#   BUILD_DIR          the build folder: as set by the caller (a relative one is taken from the folder the
#                      script was started in), else $TG_ROOT/build; always made absolute here
#   tg_binary NAME     prints the program NAME (terngrad-data, terngrad-train, terngrad-eval) to run: the
#                      environment's TERNGRAD_DATA / TERNGRAD_TRAIN / TERNGRAD_EVAL if set, else
#                      $BUILD_DIR/NAME, else NAME on the PATH; or one error line on stderr and status 1
#   tg_die MESSAGE     prints "<script>: MESSAGE" on stderr and exits 1
#   tg_default_device  prints cuda when the built terngrad-train's --version says its GPU path has passed the
#                      device check, else cpu: the launchers' default DEVICE follows the one switch
#                      (include/terngrad/core/gpu_status.h) instead of a script's guess

TG_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD_DIR=${BUILD_DIR:-$TG_ROOT/build}
case "$BUILD_DIR" in /*) ;; *) BUILD_DIR=$(pwd)/$BUILD_DIR ;; esac

tg_die() {
  echo "$(basename "$0"): $*" >&2
  exit 1
}

tg_binary() {
  local name=$1 var
  var=$(echo "$name" | tr 'a-z-' 'A-Z_')  # terngrad-data -> TERNGRAD_DATA
  local given=${!var:-}
  if [[ -n $given ]]; then
    [[ -x $given ]] || { echo "$(basename "$0"): $var=$given is not an executable file" >&2; return 1; }
    echo "$given"
  elif [[ -x $BUILD_DIR/$name ]]; then
    echo "$BUILD_DIR/$name"
  elif command -v "$name" > /dev/null; then
    command -v "$name"
  else
    echo "$(basename "$0"): $name not found in $BUILD_DIR nor on the PATH: build first: scripts/test.sh or" \
      "cmake --build build" >&2
    return 1
  fi
}

tg_default_device() {
  local bin
  if bin=$(tg_binary terngrad-train 2> /dev/null) && "$bin" --version 2> /dev/null | grep -q "has passed the device check"; then
    echo cuda
  else
    echo cpu
  fi
}

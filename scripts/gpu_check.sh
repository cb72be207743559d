#!/usr/bin/env bash
# The one prepared check for a lent GPU machine (one device command, at most 10 minutes; this script keeps
# under 9 with hard internal limits that add up to 530 s). It builds only what it runs, for sm_90 (H100/H200)
# with all cores, then:
#   1. cuda_ops_check, one process per op group (conv, fc, bn, optim, reduce): a fault in one group does not
#      take the others down;
#   2. the CUDA GoogleTest cases (cuda_backend_test, ternary_codec_test's CUDA cases), if GoogleTest and the
#      CPU backend's packages are there (their oracle is the CPU backend);
#   3. if the trainer configured (every package present): 20 LeNet steps twice on CUDA (the final parameter
#      digests must be equal), their first losses against a CPU run of the same steps, then AlexNet and
#      ResNet-50 step throughput, all with --benchmark_mode (synthetic input);
# and prints a summary. Every line printed is also in $OUT/gpu_check.log ($OUT if set, else
# build-gpu/gpu_check), beside build.log, ops.log, gtest.log and train.log.
#
# A bare GPU machine may lack fmt/spdlog headers (and oneDNN, MPI, protobuf, GoogleTest): the build then uses
# -DTG_GPU_CHECK_ONLY=ON, which needs only CUDA/cuDNN, OpenMP and the fmt/spdlog headers from .gpu_deps/.
# Prepare those here first, and carry the folder with the device command:
#   scripts/gpu_check.sh --prepare          # copies /usr/include/{fmt,spdlog} to .gpu_deps/ (git-ignored)
#   device run: command "scripts/gpu_check.sh", carry [".gpu_deps"]
# cuDNN and NCCL are taken from the CUDA toolkit or the system, else from the pip wheels of the machine's
# python3 (nvidia-cudnn-cu13, nvidia-nccl-cu13).
# Environment: BUILD_DIR (build-gpu), JOBS (nproc), TG_CUDA_SYNC=1 to make a kernel fault name its launcher.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEPS="$ROOT/.gpu_deps"

if [[ "${1:-}" == "--prepare" ]]; then
  mkdir -p "$DEPS/include"
  for d in fmt spdlog; do
    [[ -d /usr/include/$d ]] || { echo "gpu_check --prepare: /usr/include/$d not found" >&2; exit 1; }
    rm -rf "${DEPS:?}/include/$d" && cp -r "/usr/include/$d" "$DEPS/include/"
  done
  exclude="$(git -C "$ROOT" rev-parse --git-path info/exclude)"
  [[ "$exclude" = /* ]] || exclude="$ROOT/$exclude"
  mkdir -p "$(dirname "$exclude")"
  grep -qx '/.gpu_deps/' "$exclude" 2>/dev/null || echo '/.gpu_deps/' >>"$exclude"
  echo "gpu_check --prepare: $(du -sh "$DEPS" | cut -f1) in $DEPS; carry \".gpu_deps\" with the device command"
  exit 0
fi

BUILD_DIR="${BUILD_DIR:-$ROOT/build-gpu}"
JOBS="${JOBS:-$(nproc)}"
LOG_DIR="${OUT:-$BUILD_DIR/gpu_check}"
mkdir -p "$LOG_DIR"
exec > >(tee -a "$LOG_DIR/gpu_check.log") 2>&1
# Limits in seconds (sum 530 < 540): build, ops check per group, GoogleTest, LeNet (3 runs), throughput (2 runs).
T_BUILD=240 T_GTEST=50 T_LENET=20 T_THROUGHPUT=35
declare -A T_OPS=([conv]=35 [fc]=20 [bn]=25 [optim]=15 [reduce]=15)
START=$(date +%s)
summary=()
status=0
note() { summary+=("$1"); }
fail() { summary+=("FAIL: $1"); status=1; }
elapsed() { echo $(($(date +%s) - START)); }

echo "== gpu_check $(date -u +%FT%TZ) in $ROOT"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader 2>&1 || true

# ---- cuDNN/NCCL: toolkit or system, else the pip wheels ---------------------------------------------------
cmake_args=()
wheel_dir() { python3 -c "import nvidia.$1 as m; print(list(m.__path__)[0])" 2>/dev/null; }
any_file() { for f in "$@"; do [[ -f "$f" ]] && return 0; done; return 1; }
if ! any_file /usr/local/cuda*/include/cudnn.h /usr/local/include/cudnn.h /usr/include/cudnn.h \
    /usr/include/x86_64-linux-gnu/cudnn.h; then
  d="$(wheel_dir cudnn)"
  if [[ -n "$d" && -f "$d/include/cudnn.h" ]]; then
    cmake_args+=(-DCUDNN_INCLUDE_DIR="$d/include" -DCUDNN_LIBRARY="$(ls "$d"/lib/libcudnn.so* | head -1)")
    export LD_LIBRARY_PATH="$d/lib:${LD_LIBRARY_PATH:-}"
    echo "cuDNN from the pip wheel in $d"
  else
    echo "no cuDNN found (toolkit, system or pip wheel): the build will fail"
  fi
fi
if ! any_file /usr/local/cuda*/lib64/libnccl.so* /usr/local/lib/libnccl.so* /usr/lib/x86_64-linux-gnu/libnccl.so*; then
  d="$(wheel_dir nccl)"
  if [[ -n "$d" ]] && ls "$d"/lib/libnccl.so* >/dev/null 2>&1; then
    cmake_args+=(-DNCCL_LIBRARY="$(ls "$d"/lib/libnccl.so* | head -1)")
    export LD_LIBRARY_PATH="$d/lib:${LD_LIBRARY_PATH:-}"
  fi
fi
generator=()
# Ninja when there (faster), unless the build folder was configured with another generator.
command -v ninja >/dev/null && [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]] && generator=(-G Ninja)

# ---- build (configure included) within T_BUILD ----------------------------------------------------------------
echo "== build in $BUILD_DIR (-j$JOBS, limit ${T_BUILD}s)"
: >"$LOG_DIR/build.log"
left() { echo $((T_BUILD - $(elapsed))); }
if ! timeout "$(left)" cmake -S "$ROOT" -B "$BUILD_DIR" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DTG_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DTG_GPU_CHECK_ONLY=ON -DTG_DEPS_DIR="$DEPS" -DTG_BUILD_BENCH=OFF \
    "${cmake_args[@]}" >>"$LOG_DIR/build.log" 2>&1; then
  tail -30 "$LOG_DIR/build.log"
  fail "configure (log: build.log)"
fi
grep "terngrad:" "$LOG_DIR/build.log" | sed 's/^-- /   /'
have_target() { cmake --build "$BUILD_DIR" --target help 2>/dev/null | grep -qE "(^|[ .:/])$1(:|$| )"; }
build() {  # build TARGET...: within what is left of T_BUILD
  local t
  t=$(left)
  ((t > 5)) || { echo "   no build time left for $*"; return 124; }
  timeout "$t" cmake --build "$BUILD_DIR" -j"$JOBS" --target "$@" >>"$LOG_DIR/build.log" 2>&1
}
ops_built=0
if ((status == 0)); then
  if build cuda_ops_check; then ops_built=1; else
    grep -E "error" "$LOG_DIR/build.log" | head -30
    fail "build cuda_ops_check (log: build.log)"
  fi
fi
gtests=()
for t in cuda_backend_test ternary_codec_test; do have_target "$t" && gtests+=("$t"); done
train_built=0
extra=("${gtests[@]}")
have_target terngrad-train && extra+=(terngrad-train)
if ((ops_built)) && ((${#extra[@]})); then
  if build "${extra[@]}"; then
    have_target terngrad-train && train_built=1
  else
    grep -E "error" "$LOG_DIR/build.log" | head -30
    fail "build ${extra[*]} (log: build.log)"
    gtests=()
  fi
fi
((${#gtests[@]})) || note "GoogleTest CUDA tests: not built (GoogleTest or the CPU backend's packages missing here)"
((train_built)) || note "trainer checks: terngrad-train not built (packages missing here, see build.log)"
echo "   build done after $(elapsed)s"

# ---- 1. ops check, one process per group ----------------------------------------------------------------------------
if ((ops_built)); then
  for g in conv fc bn optim reduce; do
    echo "== cuda_ops_check --group $g (limit ${T_OPS[$g]}s)"
    rc=0
    timeout "${T_OPS[$g]}" "$BUILD_DIR/cuda_ops_check" --group "$g" 2>&1 | tee -a "$LOG_DIR/ops.log"
    rc=${PIPESTATUS[0]}
    case $rc in
      0) note "ops $g: PASS" ;;
      124) fail "ops $g: timed out after ${T_OPS[$g]}s" ;;
      77) fail "ops $g: no CUDA device" ;;
      *) fail "ops $g: exit $rc ($(grep -c ' FAIL' "$LOG_DIR/ops.log") FAIL lines so far)" ;;
    esac
  done
fi

# ---- 2. GoogleTest CUDA cases -----------------------------------------------------------------------------------------
if ((${#gtests[@]})); then
  per=$((T_GTEST / ${#gtests[@]}))
  for t in "${gtests[@]}"; do
    filter="*"
    [[ $t == ternary_codec_test ]] && filter="*Cuda*:*CUDA*"
    echo "== $t --gtest_filter=$filter (limit ${per}s)"
    timeout "$per" "$BUILD_DIR/tests/$t" --gtest_filter="$filter" >>"$LOG_DIR/gtest.log" 2>&1
    rc=$?
    grep -E "^\[  (FAILED|SKIPPED) |^\[  PASSED|^\[==========\]" "$LOG_DIR/gtest.log" | tail -8 | sed 's/^/   /'
    if ((rc == 124)); then fail "$t: timed out after ${per}s"
    elif ((rc != 0)); then fail "$t: exit $rc (see gtest.log)"
    else note "$t: $(grep -oE '[0-9]+ tests?, listed below|PASSED  \] [0-9]+ tests?' "$LOG_DIR/gtest.log" | tail -1)"
    fi
  done
fi

# ---- 3. trainer: LeNet determinism and CPU agreement, AlexNet/ResNet-50 throughput --------------------------------------
train() {  # train LIMIT NAME ARGS...: one run, its log in $BUILD_DIR/runs/NAME.log (also appended to train.log)
  local limit=$1 name=$2
  shift 2
  mkdir -p "$BUILD_DIR/runs"
  rm -rf "$BUILD_DIR/runs/$name"
  timeout "$limit" "$BUILD_DIR/terngrad-train" --benchmark_mode --train_dir "$BUILD_DIR/runs/$name" \
    --log_every 1 --save_iter 100000000 "$@" >"$BUILD_DIR/runs/$name.log" 2>&1
  local rc=$?
  { echo "---- $name (exit $rc): $*"; cat "$BUILD_DIR/runs/$name.log"; } >>"$LOG_DIR/train.log"
  return $rc
}
digest() { grep -oE 'parameter digest [0-9a-fx]+' "$BUILD_DIR/runs/$1.log" | tail -1 | awk '{print $3}'; }
losses() { grep -oE 'step [0-9]+, entropy_loss = [0-9.na-]+' "$BUILD_DIR/runs/$1.log" | awk '{print $4}' | head -"$2" | tr '\n' ' '; }
rate() { grep -oE '[0-9.]+ examples/sec' "$BUILD_DIR/runs/$1.log" | tail -1; }
if ((train_built)); then
  lenet=(--net lenet --dataset fashion_mnist --batch_size 64 --max_steps 20 --num_nodes 1)
  echo "== LeNet 20 steps: cuda twice, cpu once (limit ${T_LENET}s each)"
  ok=1
  train "$T_LENET" lenet_cuda1 "${lenet[@]}" --device cuda || ok=0
  train "$T_LENET" lenet_cuda2 "${lenet[@]}" --device cuda || ok=0
  train "$T_LENET" lenet_cpu "${lenet[@]}" --device cpu || ok=0
  d1=$(digest lenet_cuda1) d2=$(digest lenet_cuda2)
  echo "   digests: cuda run 1 ${d1:-?}, run 2 ${d2:-?}"
  echo "   first losses: cuda $(losses lenet_cuda1 5)| cpu $(losses lenet_cpu 5)"
  if ((!ok)); then fail "lenet: a run failed (see train.log)"
  elif [[ -z "$d1" || "$d1" != "$d2" ]]; then fail "lenet: cuda runs end with different parameter digests ($d1 vs $d2)"
  else note "lenet: cuda runs bit-identical (digest $d1)"
  fi
  # The first 3 losses (2 decimals in the log) must agree with the CPU's.
  if [[ "$(losses lenet_cuda1 3)" == "$(losses lenet_cpu 3)" && -n "$(losses lenet_cpu 3)" ]]; then
    note "lenet: first 3 losses equal the CPU's ($(losses lenet_cpu 3))"
  else
    fail "lenet: first losses cuda [$(losses lenet_cuda1 3)] vs cpu [$(losses lenet_cpu 3)]"
  fi
  for net in alexnet resnet50; do
    echo "== $net 20 steps on cuda (limit ${T_THROUGHPUT}s)"
    b=128
    [[ $net == resnet50 ]] && b=64
    if train "$T_THROUGHPUT" "${net}_cuda" --net "$net" --dataset imagenet --batch_size "$b" --max_steps 20 \
        --num_nodes 1 --device cuda; then
      note "$net batch $b: $(rate "${net}_cuda")"
    else
      fail "$net: exit $? (see train.log)"
    fi
    tail -2 "$BUILD_DIR/runs/${net}_cuda.log" | sed 's/^/   /'
  done
fi

echo "== summary after $(elapsed)s (logs in $LOG_DIR)"
printf '  %s\n' "${summary[@]}"
((status == 0)) && echo "gpu_check: PASS" || echo "gpu_check: FAIL"
exit $status

#!/usr/bin/env bash
# The one prepared check for a lent GPU machine (one device command, at most 10 minutes; this script keeps
# under 9: every step runs under `timeout` with its own cap AND within one deadline, T_TOTAL = 530 s from the
# start, so the whole script never passes 530 s while time a fast step leaves flows to the later ones; a step
# that gets under 5 s is skipped with a line saying so). It builds only what it runs, for sm_90 (H100/H200)
# with all cores, then, in order of importance:
#   1. cuda_ops_check, one process per op group (conv, fc, bn, optim, reduce, amp; conv, fc and bn include
#      f16/bf16 lines, amp the mixed-precision element-wise ops): a fault in one group does not take the
#      others down;
#   2. the CUDA GoogleTest cases (cuda_backend_test, cuda_mixed_precision_test, ternary_codec_test's CUDA
#      cases), if GoogleTest and the CPU backend's packages are there (their oracle is the CPU backend);
#   3. if the trainer configured (every package present): 20 LeNet steps twice on CUDA (the final parameter
#      digests must be equal), their first losses against a CPU run of the same steps, all with
#      --benchmark_mode (synthetic input);
#   4. mixed precision (issue 12), if terngrad-train has --precision (else one line says it is skipped):
#      ResNet-50 at batch 256 and Inception-v3 at batch 128 per GPU, 15 training steps each in fp16, bf16 and
#      (last, the least needed) fp32 (--benchmark_mode; the median img/s of steps 6-15), each model next to its
#      PyTorch AMP peer on the same card with the terngrad/torch ratio (bench/torch_amp_peer.py: torchvision model, channels_last, autocast + GradScaler; skipped
#      with a line when the machine's python3 lacks torch/torchvision);
#   5. AlexNet fp32 step throughput at batch 128, if time is left;
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
# Caps in seconds of each step (the deadline T_TOTAL bounds their sum): build, ops check per group, GoogleTest
# (split over the executables), LeNet (per run, 3 runs), mixed precision (per terngrad-train run, 6 runs; per
# PyTorch peer process, 2 processes), AlexNet throughput (1 run). Sized so that, with the build and the ops
# checks at their usual durations, the mixed-precision section still fits; AlexNet runs only if time is left.
T_TOTAL=530
T_BUILD=240 T_GTEST=60 T_LENET=15 T_MP=25 T_PEER=40 T_ALEXNET=30
declare -A T_OPS=([conv]=45 [fc]=20 [bn]=35 [optim]=15 [reduce]=12 [amp]=25)
START=$(date +%s)
summary=()
status=0
note() { summary+=("$1"); }
fail() { summary+=("FAIL: $1"); status=1; }
elapsed() { echo $(($(date +%s) - START)); }
# cap CAP: what a step may use now, min(CAP, time left before T_TOTAL).
cap() { local left=$((T_TOTAL - $(elapsed))); echo $(($1 < left ? $1 : left)); }
# enough SECONDS NAME: true when SECONDS >= 5, else notes that NAME is skipped for lack of time.
enough() { (($1 >= 5)) && return 0; note "$2: skipped, the ${T_TOTAL}s deadline is reached"; return 1; }

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
left() { local b=$((T_BUILD - $(elapsed))); cap "$b"; }
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
for t in cuda_backend_test cuda_mixed_precision_test ternary_codec_test; do have_target "$t" && gtests+=("$t"); done
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
  for g in conv fc bn optim reduce amp; do
    lim=$(cap "${T_OPS[$g]}")
    enough "$lim" "ops $g" || continue
    echo "== cuda_ops_check --group $g (limit ${lim}s)"
    timeout "$lim" "$BUILD_DIR/cuda_ops_check" --group "$g" >"$LOG_DIR/ops_$g.log" 2>&1
    rc=$?
    cat "$LOG_DIR/ops_$g.log" | tee -a "$LOG_DIR/ops.log"
    skips=$(grep -c ' SKIP:' "$LOG_DIR/ops_$g.log")
    case $rc in
      0) note "ops $g: PASS$( ((skips)) && echo " ($skips dtype line(s) skipped: the device lacks the dtype)")" ;;
      124) fail "ops $g: timed out after ${lim}s" ;;
      77) fail "ops $g: no CUDA device" ;;
      *) fail "ops $g: exit $rc ($(grep -c ' FAIL' "$LOG_DIR/ops_$g.log") FAIL lines)" ;;
    esac
  done
fi

# ---- 2. GoogleTest CUDA cases -----------------------------------------------------------------------------------------
if ((${#gtests[@]})); then
  per=$((T_GTEST / ${#gtests[@]}))
  for t in "${gtests[@]}"; do
    filter="*"
    [[ $t == ternary_codec_test ]] && filter="*Cuda*:*CUDA*"
    lim=$(cap "$per")
    enough "$lim" "$t" || continue
    echo "== $t --gtest_filter=$filter (limit ${lim}s)"
    timeout "$lim" "$BUILD_DIR/tests/$t" --gtest_filter="$filter" >"$LOG_DIR/gtest_$t.log" 2>&1
    rc=$?
    cat "$LOG_DIR/gtest_$t.log" >>"$LOG_DIR/gtest.log"
    grep -E "^\[  (FAILED|SKIPPED) |^\[  PASSED|^\[==========\]|^\[ INFO" "$LOG_DIR/gtest_$t.log" | tail -8 | sed 's/^/   /'
    if ((rc == 124)); then fail "$t: timed out after ${lim}s"
    elif ((rc != 0)); then fail "$t: exit $rc (see gtest.log)"
    else note "$t: $(grep -oE '[0-9]+ tests?, listed below|PASSED  \] [0-9]+ tests?' "$LOG_DIR/gtest_$t.log" | tail -1)"
    fi
  done
fi

# ---- 3. trainer: LeNet determinism and CPU agreement ---------------------------------------------------------------------
train() {  # train LIMIT NAME ARGS...: one run, its log in $BUILD_DIR/runs/NAME.log (also appended to train.log);
           # LOG_EVERY (default 1) is its --log_every
  local limit=$1 name=$2
  shift 2
  mkdir -p "$BUILD_DIR/runs"
  rm -rf "$BUILD_DIR/runs/$name"
  timeout "$limit" "$BUILD_DIR/terngrad-train" --benchmark_mode --train_dir "$BUILD_DIR/runs/$name" \
    --log_every "${LOG_EVERY:-1}" --save_iter 100000000 "$@" >"$BUILD_DIR/runs/$name.log" 2>&1
  local rc=$?
  { echo "---- $name (exit $rc): $*"; cat "$BUILD_DIR/runs/$name.log"; } >>"$LOG_DIR/train.log"
  return $rc
}
digest() { grep -oE 'parameter digest [0-9a-fx]+' "$BUILD_DIR/runs/$1.log" | tail -1 | awk '{print $3}'; }
losses() { grep -oE 'step [0-9]+, entropy_loss = [0-9.na-]+' "$BUILD_DIR/runs/$1.log" | awk '{print $4}' | head -"$2" | tr '\n' ' '; }
# The run's img/s: the final "median N examples/sec" (the last window's rate if the run was cut short).
rate() { grep -oE '[0-9.]+ examples/sec' "$BUILD_DIR/runs/$1.log" | tail -1 | awk '{print $1}'; }
if ((train_built)); then
  lenet=(--net lenet --dataset fashion_mnist --batch_size 64 --max_steps 20 --num_nodes 1)
  lim=$(cap "$T_LENET")
  if enough "$lim" "lenet"; then
    echo "== LeNet 20 steps: cuda twice, cpu once (limit ${lim}s each)"
    ok=1
    train "$(cap "$T_LENET")" lenet_cuda1 "${lenet[@]}" --device cuda || ok=0
    train "$(cap "$T_LENET")" lenet_cuda2 "${lenet[@]}" --device cuda || ok=0
    train "$(cap "$T_LENET")" lenet_cpu "${lenet[@]}" --device cpu || ok=0
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
  fi
fi

# ---- 4. mixed precision: ResNet-50 / Inception-v3 img/s in fp32, fp16, bf16 next to PyTorch AMP ---------------------
train_help=""
((train_built)) && train_help=$("$BUILD_DIR/terngrad-train" --help 2>&1)
if ((train_built)) && ! grep -q -- '--precision' <<<"$train_help"; then
  note "mixed precision: skipped (this terngrad-train has no --precision flag)"
elif ((train_built)); then
  peer="$ROOT/bench/torch_amp_peer.py"
  mp_run() {  # mp_run PRECISION: one terngrad-train run of $net at batch $b; its rate goes into $line and ours[]
    local p=$1 lim rc r
    lim=$(cap "$T_MP")
    enough "$lim" "$net $p" || return 0
    echo "== $net batch $b $p, 15 steps on cuda (limit ${lim}s)"
    LOG_EVERY=5 train "$lim" "${net}_$p" --net "$net" --dataset imagenet --batch_size "$b" --max_steps 15 \
      --num_nodes 1 --device cuda --precision "$p"
    rc=$?
    tail -2 "$BUILD_DIR/runs/${net}_$p.log" | sed 's/^/   /'
    r=$(rate "${net}_$p")
    [[ -n "$r" ]] && ours[$p]=$r
    if ((rc == 0)); then line+=" $p ${r:-?}"
    elif [[ -n "$r" ]]; then line+=" $p ${r} (cut at ${lim}s)"; note "$net $p: timed out after ${lim}s (rate of the steps done)"
    else fail "$net $p: exit $rc (see train.log)"
    fi
  }
  # Per model: fp16 and bf16, then the PyTorch peer, then fp32 (the least needed if the deadline is near).
  for spec in resnet50:256 inception_v3:128; do
    net=${spec%%:*} b=${spec##*:}
    line="$net b$b img/s:"
    declare -A ours=()
    mp_run fp16
    mp_run bf16
    lim=$(cap "$T_PEER")
    if enough "$lim" "$net PyTorch AMP peer"; then
      echo "== PyTorch AMP peer: $net batch $b fp16, bf16 (limit ${lim}s)"
      timeout "$lim" python3 "$peer" --net "$net" --batch "$b" --precision fp16 bf16 --warmup 5 --steps 10 \
        >"$LOG_DIR/peer_$net.log" 2>&1
      rc=$?
      cat "$LOG_DIR/peer_$net.log" >>"$LOG_DIR/train.log"
      tail -3 "$LOG_DIR/peer_$net.log" | sed 's/^/   /'
      if grep -q "skipped" "$LOG_DIR/peer_$net.log"; then line+=" | torch AMP: $(grep -m1 skipped "$LOG_DIR/peer_$net.log")"
      elif ((rc != 0)); then line+=" | torch AMP: exit $rc (see train.log)"
      else
        line+=" | torch AMP:"
        for p in fp16 bf16; do
          tr_=$(grep -oE "$net $p batch=[0-9]+ images/s=[0-9.]+" "$LOG_DIR/peer_$net.log" | sed -E 's/.*images\/s=//')
          [[ -n "$tr_" ]] || continue
          line+=" $p $tr_"
          [[ -n "${ours[$p]:-}" ]] && line+=" (terngrad/torch $(awk -v a="${ours[$p]}" -v b="$tr_" 'BEGIN{printf "%.2f", a/b}')x)"
        done
      fi
      line+=" |"
    fi
    mp_run fp32
    note "$line"
  done
fi

# ---- 5. AlexNet fp32 throughput, if time is left ----------------------------------------------------------------------------
if ((train_built)); then
  lim=$(cap "$T_ALEXNET")
  if enough "$lim" "alexnet throughput"; then
    echo "== alexnet 20 steps on cuda (limit ${lim}s)"
    if train "$lim" alexnet_cuda --net alexnet --dataset imagenet --batch_size 128 --max_steps 20 --num_nodes 1 \
        --device cuda; then
      note "alexnet batch 128: $(rate alexnet_cuda) img/s"
    else
      fail "alexnet: exit $? (see train.log)"
    fi
    tail -2 "$BUILD_DIR/runs/alexnet_cuda.log" | sed 's/^/   /'
  fi
fi

echo "== summary after $(elapsed)s (logs in $LOG_DIR)"
printf '  %s\n' "${summary[@]}"
((status == 0)) && echo "gpu_check: PASS" || echo "gpu_check: FAIL"
exit $status

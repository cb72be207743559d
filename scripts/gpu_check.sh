#!/usr/bin/env bash
# The one prepared check for a lent GPU machine, and the bundle it runs. A GPU machine is lent by chance, bare (its
# driver, the CUDA 13 toolkit, python3 with torch and the cuDNN/cuBLAS/NCCL wheels; no package registry) and for
# minutes: everything is built here, and the device run only unpacks and checks.
#
#   scripts/gpu_check.sh --prepare [--verify]   here: build for sm_90 and pack the bundle (lib/gpu_bundle.sh):
#                                               .gpu_bundle/terngrad-gpu-bundle.tar.xz (git-ignored, <= 40 MiB);
#                                               --verify unpacks it into an empty folder and runs every program
#                                               with only the bundle's libraries (ctest label gpu_bundle)
#   scripts/gpu_check.sh --verify               the same check of an existing bundle
#   scripts/gpu_check.sh                        the device run (carry .gpu_bundle): one command of at most 9
#                                               minutes, see below
#   scripts/gpu_check.sh --bin-dir DIR          the device run with the programs of a build tree instead of the
#                                               bundle (DIR/terngrad-train, DIR/tests/...): what --self-test uses,
#                                               and the fallback of a build on the GPU machine, which has CUDA but
#                                               not the CPU side's packages, so only cuda_ops_check builds there:
#                                               unpack the bundle (tar -xJf) into U, then cmake -DTG_CUDA=ON
#                                               -DCMAKE_CUDA_ARCHITECTURES=90 -DTG_GPU_CHECK_ONLY=ON -DTG_DEPS_DIR=U
#                                               (fmt/spdlog headers) and --target cuda_ops_check
#   scripts/gpu_check.sh --self-test            the device run's logic without a GPU (ctest label scripts): the
#                                               bookkeeping's verdicts, and a real run here that must end FAIL
#
# The device run, sections in order of value, each with a cap (the seconds it may take) and an estimate on an H200
# (none has run on one yet: the estimates count process starts, library loading and the work), all inside one
# deadline, TG_GPU_CHECK_SECONDS (default 435 s: the caps below sum to it, so every section runs when each keeps
# to its cap; a command that ignores its TERM is killed 2 s later; the whole command, with the bundle's unpacking,
# stays under 8 minutes). A section the deadline leaves under 5 s is SKIPPED, and so is one whose command the
# deadline cut short (its limit was below its cap); a command that runs past its section's own cap, or past its
# share of it, FAILs naming that limit. The speed sections (terngrad, net:*, pipeline) end SLOW when their runs
# are correct and a measured ratio misses its target: a PASS there means the target was met.
#   section           cap  estimate  what
#   env                20     8 s    GPU, driver, nvcc, torch, the bundle's manifest, where cuDNN/cuBLAS/NCCL were
#                                    found (toolkit, system or python3's wheels, lib/cuda_libs.sh) and the versions
#                                    and files actually loaded (cuda_ops_check --versions); FAIL without a GPU, a
#                                    library or a new enough glibc, or with a cuDNN built for another CUDA major
#                                    version than the bundle's runtime, and then every GPU section is SKIPPED
#   ops:GROUP          77    45 s    cuda_ops_check, one process per group: conv fc bn optim reduce amp codec pool
#                                    lrn concat (caps 12 8 8 6 6 8 10 8 6 5)
#   gtest:NAME        108    70 s    the CUDA and NCCL GoogleTest programs (the NCCL group of one process on the one
#                                    GPU): cuda_backend 25, cuda_mixed_precision 12, codec_ops 7, codec_range 3,
#                                    ternary_codec 10, scaler_bucket 8, backend_ops_table 10, coded_update 8, padding
#                                    8, nccl 12, loopback_communicator 5 (2 ranks on two streams of the GPU: the
#                                    host's bits)
#   lenet              28    20 s    20 fp32 LeNet steps twice on the GPU (equal parameter digests) and once on the
#                                    CPU; the first 3 cross-entropies agree within 1e-3 relative; host
#                                    synchronisations per steady step (<= 1)
#   terngrad_lenet     28    20 s    the same with TernGrad (--grad_bits 1), 2 replicas on the one GPU (--device
#                                    cuda:0 --num_gpus 2: the loopback groups on the device, the side stream, the
#                                    abort gate and the health watch): equal digests twice, the first 3
#                                    cross-entropies within 1e-3 of the CPU's 2 replicas, and step 3's exchange redone
#                                    on the CPU from the GPU's gradients (exchange_replay): the same codes bit for bit
#   variants           34    30 s    runs that must work on the GPU: the hierarchical exchange and error feedback (2
#                                    workers, TernGrad), --allow_tf32, --deterministic=false, --conv_search (10
#                                    steps each)
#   sanitizer          20    15 s    compute-sanitizer --tool memcheck over a small cuda_ops_check pass (codec, amp,
#                                    pool, concat), each group a share of the cap; compute-sanitizer from PATH,
#                                    else beside nvcc, CUDA_HOME/bin or /usr/local/cuda/bin
#   terngrad           30    25 s    TernGrad against fp32 gradients, 2 workers on the one GPU (the exchange's cost;
#                                    target <= 1.05, else SLOW); examples/sec is device time (the trainer's step timer)
#   net:resnet50       80    60 s    ResNet-50 (batch 256): the PyTorch AMP peer (a 25 s cap, run once), then
#                                    terngrad-train in fp16, bf16, fp32 (--conv_search: the peer has cudnn.benchmark);
#                                    both sides the true median of the same 10 timed steps after 5; a precision
#                                    without time left makes the section SKIPPED; each run's device memory after its
#                                    first step against its memory plan (FAIL beyond the plan + 1.5 GiB, or below
#                                    0.8x it); target: fp16 >= 1.0x the peer's img/s, else SLOW; device launches
#                                    per steady step printed (the backend's counter: our kernels, cuDNN/cuBLAS calls)
#   pipeline           10     8 s    images/s the input pipeline sustains on JPEG TFRecords made on the spot (ResNet-
#                                    50 preprocessing, all cores): whether the card would starve (target: above
#                                    ResNet-50's fp16 img/s when that ran, else SLOW)
#   net:inception_v3   (50)          Inception-v3 (batch 128) as ResNet-50: not in the default run (its cap is not in
#                                    the deadline); TG_GPU_CHECK_SECTIONS=net:inception_v3 asks for it
# A CUDA program that fails is rerun once with TG_CUDA_SYNC=1 (the PyTorch peer is not: the variable means nothing
# to it). NVIDIA_TF32_OVERRIDE is cleared (an inherited one would change the fp32 math the tolerances assume). The
# summary's last lines are "correctness: PASS|FAIL|INCOMPLETE (...)" (the sections other than the speed ones: what
# the GPU path's status flips on) and "gpu_check: PASS", "gpu_check: SLOW (n speed targets missed: ...)",
# "gpu_check: PARTIAL (n sections skipped: ...)" or "gpu_check: FAIL (...)" (lib/gpu_check_sections.sh); exit 0, 4,
# 3 or 1. At most 3 files under $OUT: summary.txt, gpu_check.log (everything
# printed) and logs.tar.gz (each section's logs and metrics).
# Environment: OUT, GPU_BUNDLE (the archive), BUILD_DIR (--prepare), JOBS, TG_GPU_CHECK_SECTIONS (names or
# prefixes to run, e.g. "env ops:codec lenet"; default all but net:inception_v3), TG_GPU_CHECK_SECONDS.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/cuda_libs.sh
source "$ROOT/scripts/lib/cuda_libs.sh"
# shellcheck source=lib/gpu_bundle.sh
source "$ROOT/scripts/lib/gpu_bundle.sh"
# shellcheck source=lib/gpu_check_sections.sh
source "$ROOT/scripts/lib/gpu_check_sections.sh"
GPU_BUNDLE=${GPU_BUNDLE:-$ROOT/.gpu_bundle/terngrad-gpu-bundle.tar.xz}
# Each section's cap in seconds (the table above); the default run's caps sum to at most the default deadline
# (--self-test checks it). net:inception_v3 runs only when asked for.
GC_DEFAULT_SECONDS=435
declare -A CAP=([env]=20 [ops:conv]=12 [ops:fc]=8 [ops:bn]=8 [ops:optim]=6 [ops:reduce]=6 [ops:amp]=8 [ops:codec]=10
  [ops:pool]=8 [ops:lrn]=6 [ops:concat]=5 [gtest:cuda_backend_test]=25 [gtest:cuda_mixed_precision_test]=12
  [gtest:codec_ops_test]=7 [gtest:codec_range_test]=3 [gtest:ternary_codec_test]=10 [gtest:scaler_bucket_test]=8
  [gtest:backend_ops_table_test]=10 [gtest:coded_update_test]=8 [gtest:padding_test]=8
  [gtest:nccl_communicator_test]=12 [gtest:loopback_communicator_test]=5 [lenet]=28 [terngrad_lenet]=28 [variants]=34 [sanitizer]=20 [terngrad]=30
  [net:resnet50]=80 [pipeline]=10)
declare -A OPTIONAL_CAP=([net:inception_v3]=50)
# The variants section's runs: a name, then its flags (--self-test runs each one step on the CPU: the flags parse).
VARIANTS=("hierarchical --num_nodes 2 --grad_bits 1 --exchange hierarchical"
  "error_feedback --num_nodes 2 --grad_bits 1 --error_feedback" "tf32 --num_nodes 1 --allow_tf32=true"
  "nondeterministic --num_nodes 1 --deterministic=false" "conv_search --num_nodes 1 --conv_search=true")
# The TernGrad LeNet runs (the section adds --batch_size and --max_steps) and the step whose exchange the first GPU
# run writes for exchange_replay (--self-test replays a CPU run's with the same flags).
TERNGRAD_LENET=(--net lenet --dataset fashion_mnist --num_nodes 2 --grad_bits 1 --clip_factor 2.5)
REPLAY_STEP=3

# cuda_mismatch VERSIONS_LOG: one line when the cuDNN or the NCCL that cuda_ops_check --versions loaded was built for
# another CUDA major version than the bundle's runtime (a cu12 wheel found first on a CUDA 13 machine), else nothing.
cuda_mismatch() {
  local runtime cudnn_rt nccl_cuda out=""
  runtime=$(sed -n 's/^CUDA runtime \([0-9]*\)\..*/\1/p' "$1" | head -1)
  [[ -n $runtime ]] || return 0
  cudnn_rt=$(sed -n 's/^cuDNN .*for CUDA runtime \([0-9]*\)).*/\1/p' "$1" | head -1)
  if [[ -n $cudnn_rt ]] && ((cudnn_rt / 1000 != runtime)); then
    out="the cuDNN loaded was built for CUDA $((cudnn_rt / 1000)), the bundle's runtime is CUDA $runtime ($(sed -n 's/^cuDNN .*: //p' "$1" | head -1))"
  fi
  nccl_cuda=$(sed -n 's/^NCCL .*for CUDA \([0-9]*\)\.[0-9]*).*/\1/p' "$1" | head -1)
  if [[ -n $nccl_cuda ]] && ((nccl_cuda != runtime)); then
    out="${out:+$out; }the NCCL loaded was built for CUDA $nccl_cuda, the bundle's runtime is CUDA $runtime ($(sed -n 's/^NCCL .*: //p' "$1" | head -1))"
  fi
  [[ -z $out ]] || echo "$out"
}

usage() {  # [STATUS]
  sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit "${1:-2}"
}

prepare=0 verify=0 self_test=0 bin_dir=""
while (($#)); do
  case $1 in
    --prepare) prepare=1 ;;
    --verify) verify=1 ;;
    --self-test) self_test=1 ;;
    --bin-dir) bin_dir=${2:-} && shift ;;
    -h | --help) usage 0 ;;
    *) echo "gpu_check: unknown argument '$1'" >&2 && usage ;;
  esac
  shift
done

if ((self_test)); then
  # shellcheck source=lib/gpu_check_self_test.sh
  source "$ROOT/scripts/lib/gpu_check_self_test.sh"
  gc_self_test
  exit $?
fi
if ((prepare || verify)); then
  if ((prepare)); then
    build=${BUILD_DIR:-}
    if [[ -z $build ]]; then build=$ROOT/build && gb_build_has_sm90 "$build" || build=$ROOT/build-gpu; fi
    gb_prepare "$build" "$GPU_BUNDLE" || exit 1
    exclude="$(git -C "$ROOT" rev-parse --git-path info/exclude 2> /dev/null)"
    [[ -n $exclude && $exclude != /* ]] && exclude="$ROOT/$exclude"
    if [[ -n $exclude ]] && ! grep -qsx '/.gpu_bundle/' "$exclude" && ! git -C "$ROOT" check-ignore -q .gpu_bundle; then
      mkdir -p "$(dirname "$exclude")" && echo '/.gpu_bundle/' >> "$exclude"
    fi
  fi
  if ((verify)); then gb_verify "$GPU_BUNDLE" || exit 1; fi
  exit 0
fi

# ---- the device run ----------------------------------------------------------------------------------------------
OUT_DIR=${OUT:-$ROOT/build-gpu/gpu_check}
WORK=$(mktemp -d /tmp/tg_gpu_check.XXXXXX)
mkdir -p "$OUT_DIR" "$WORK/logs"
exec > >(tee -a "$OUT_DIR/gpu_check.log") 2>&1
finish() {  # the summary and the logs' tarball, whatever ended the run
  local rc
  gc_summary "$OUT_DIR/summary.txt"
  rc=$?
  tar -czf "$OUT_DIR/logs.tar.gz" -C "$WORK" logs 2> /dev/null
  rm -rf "$WORK"
  exit $rc
}
trap finish EXIT
trap 'echo "gpu_check: interrupted"; exit 1' INT TERM
gc_init "${TG_GPU_CHECK_SECONDS:-$GC_DEFAULT_SECONDS}"
GC_SPEED="terngrad net pipeline"
unset NVIDIA_TF32_OVERRIDE
LOGS=$WORK/logs
wanted() {  # NAME: whether TG_GPU_CHECK_SECTIONS (names or prefixes) includes it
  local s
  [[ -z ${TG_GPU_CHECK_SECTIONS:-} ]] && [[ $1 != net:inception_v3 ]] && return 0
  for s in $TG_GPU_CHECK_SECTIONS; do [[ $1 == "$s" || $1 == "$s":* ]] && return 0; done
  return 1
}
echo "== gpu_check $(date -u +%FT%TZ) in $ROOT"

# The programs: the bundle unpacked, or a build tree (--bin-dir).
BIN="" TESTS="" PEERS=$ROOT/bench LIBPATH=""
if [[ -n $bin_dir ]]; then
  BIN=$(cd "$bin_dir" && pwd) TESTS=$BIN/tests
  echo "programs from the build tree $BIN"
elif gb_unpack "$GPU_BUNDLE" "$WORK/bundle"; then
  BIN=$WORK/bundle/bin TESTS=$WORK/bundle/bin/tests PEERS=$WORK/bundle/bench
  LIBPATH=$(gb_library_path "$WORK/bundle")
  export LD_LIBRARY_PATH=$LIBPATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  sed 's/^/   bundle: /' "$WORK/bundle/MANIFEST"
fi

# ---- env ---------------------------------------------------------------------------------------------------------------
GPU_OK=0
if wanted env && gc_section env "${CAP[env]}"; then
  why=""
  if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 | sed 's/^/   gpu: /'
  else
    echo "   gpu: nvidia-smi not found"
  fi
  echo "   nvcc: $(nvcc --version 2> /dev/null | tail -1 || echo none)"
  echo "   torch: $(python3 -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda, "cuDNN",
    torch.backends.cudnn.version())' 2>&1 | tail -1)"
  echo "   glibc: $(ldd --version 2>&1 | head -1)"
  if [[ -z $BIN ]]; then
    why="no bundle at $GPU_BUNDLE (run scripts/gpu_check.sh --prepare on the build machine and carry .gpu_bundle)"
  else
    if [[ -n $LIBPATH ]]; then
      for lib in "${!TG_CUDA_LIB_PATH[@]}"; do echo "   found $lib: ${TG_CUDA_LIB_PATH[$lib]} (${TG_CUDA_LIB_FROM[$lib]})"; done
      ((${#TG_CUDA_LIB_MISSING[@]})) && why="missing ${TG_CUDA_LIB_MISSING[*]} (looked in $TG_CUDA_LIB_WHERE)"
      need=$(sed -n 's/^glibc_needed GLIBC_//p' "$WORK/bundle/MANIFEST")
      have=$(ldd --version 2>&1 | head -1 | grep -oE '[0-9]+\.[0-9]+$')
      if [[ -n $need && -n $have && $(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1) != "$need" ]]; then
        why="${why:+$why; }the bundle needs glibc $need, this machine has $have"
      fi
    fi
    if [[ -f $WORK/bundle/MANIFEST ]] && command -v nvidia-smi > /dev/null; then
      cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2> /dev/null | head -1 | tr -d ' ')
      archs=$(sed -n 's/^cuda_architectures //p' "$WORK/bundle/MANIFEST")
      if arch_note=$(gb_arch_check "$archs" "$cap"); then
        [[ -n $arch_note ]] && echo "   $arch_note"
      else
        why="${why:+$why; }$arch_note"
      fi
    fi
    "$BIN/cuda_ops_check" --versions > "$LOGS/versions.log" 2>&1 || why="${why:+$why; }cuda_ops_check --versions failed"
    sed 's/^/   /' "$LOGS/versions.log"
    mismatch=$(cuda_mismatch "$LOGS/versions.log")
    [[ -n $mismatch ]] && why="${why:+$why; }$mismatch"
    devices=$(sed -n 's/^CUDA devices: \([0-9]*\).*/\1/p' "$LOGS/versions.log")
    if [[ ${devices:-0} -lt 1 ]]; then
      why="${why:+$why; }no CUDA device ($(grep -m1 '^CUDA devices' "$LOGS/versions.log" || echo 'no answer'))"
    fi
  fi
  if [[ -z $why ]]; then GPU_OK=1 && gc_pass "$(grep -m1 'CUDA devices' "$LOGS/versions.log")"; else gc_fail "$why"; fi
fi
# A GPU section: wanted, and a GPU with the programs is there (else SKIPPED, naming why).
gpu_section() {  # NAME CAP
  wanted "$1" || return 1
  if ((!GPU_OK)); then
    gc_skip_section "$1" "no usable GPU (see env)"
    return 1
  fi
  gc_section "$1" "$2"
}

# ---- ops groups ------------------------------------------------------------------------------------------------------
for g in conv fc bn optim reduce amp codec pool lrn concat; do
  gpu_section "ops:$g" "${CAP[ops:$g]}" || continue
  gc_run "$LOGS/ops_$g.log" "$BIN/cuda_ops_check" --group "$g"
  sed 's/^/   /' "$LOGS/ops_$g.log"
  fails=$(grep -cE ' FAIL' "$LOGS/ops_$g.log")
  skips=$(grep -c ' SKIP:' "$LOGS/ops_$g.log")
  case $GC_RC in
    0) gc_pass "$(grep -cE ' PASS' "$LOGS/ops_$g.log") lines$( ((skips)) && echo ", $skips dtype lines skipped")" ;;
    124) gc_timed_out "cuda_ops_check --group $g" ;;
    *) gc_fail "exit $GC_RC, $fails FAIL lines$(gc_rerun_text)" ;;
  esac
done

# ---- GoogleTest ------------------------------------------------------------------------------------------------------
declare -A GTEST_FILTER=([codec_ops_test]="*Cuda*:*CUDA*" [codec_range_test]="*Cuda*"
  [ternary_codec_test]="*Cuda*:*CUDA*"
  [scaler_bucket_test]="*Cuda*" [backend_ops_table_test]="*Cuda*" [coded_update_test]="*Cuda*"
  [padding_test]="*cuda*:*Cuda*" [loopback_communicator_test]="*Cuda*")
for t in cuda_backend_test cuda_mixed_precision_test codec_ops_test codec_range_test ternary_codec_test \
  scaler_bucket_test backend_ops_table_test coded_update_test padding_test nccl_communicator_test loopback_communicator_test; do
  gpu_section "gtest:$t" "${CAP[gtest:$t]}" || continue
  if [[ ! -x $TESTS/$t ]]; then
    gc_skip "$TESTS/$t is not there"
    continue
  fi
  gc_run "$LOGS/gtest_$t.log" "$TESTS/$t" --gtest_filter="${GTEST_FILTER[$t]:-*}"
  grep -E '^\[  (FAILED|PASSED|SKIPPED) ' "$LOGS/gtest_$t.log" | sort | uniq -c | sed 's/^/   /' | tail -8
  n_passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$LOGS/gtest_$t.log" | tail -1)
  n_skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$LOGS/gtest_$t.log" | tail -1)
  if ((GC_RC == 124)); then gc_timed_out "$t"
  elif ((GC_RC != 0)); then gc_fail "exit $GC_RC$(gc_rerun_text)"
  elif [[ ${n_passed:-0} == 0 && ${n_skipped:-0} -gt 0 ]]; then gc_fail "every test SKIPPED although a GPU is there"
  elif [[ ${n_passed:-0} == 0 ]]; then gc_fail "no test ran (filter ${GTEST_FILTER[$t]:-*})"
  else gc_pass "${n_passed:-0} passed${n_skipped:+, $n_skipped skipped}"; fi
done

# ---- trainer runs ------------------------------------------------------------------------------------------------------
# train NAME LIMIT ARGS...: one terngrad-train run (synthetic input) into $LOGS/NAME.log, per-step metrics in
# $LOGS/NAME.jsonl (LOG_EVERY, default 1); sets GC_RC. LIMIT bounds this run only (the section's GC_LIMIT is
# untouched: a local of this function, which gc_run reads).
train() {
  local name=$1
  local GC_LIMIT=$2
  shift 2
  gc_run "$LOGS/$name.log" "$BIN/terngrad-train" --benchmark_mode --train_dir "$WORK/runs/$name" \
    --log_every "${LOG_EVERY:-1}" --save_iter 100000000 --metrics_jsonl "$LOGS/$name.jsonl" "$@"
}
digest() { grep -oE 'parameter digest [0-9a-fx]+' "$LOGS/$1.log" | tail -1 | awk '{print $3}'; }
# json_values NAME KEY: KEY of every per-step line of NAME's metrics, one a line.
json_values() { grep '"step"' "$LOGS/$1.jsonl" 2> /dev/null | grep -oE "\"$2\": ?[-0-9.e+naif]+" | sed 's/.*: *//'; }
# steady_syncs NAME: the most host synchronisations per step (the steps' own, the log step's reads excluded) of any
# window after the first.
steady_syncs() { json_values "$1" host_syncs | tail -n +2 | sort -g | tail -1; }
# memory_check NAME: "used planned" bytes from NAME's log (the trainer's line after its first step: what the run took
# of the device against its plan); nothing when the line is missing.
memory_check() {
  sed -n 's/.* took [^(]*(\([0-9]*\) bytes) of device memory .*; planned [^(]*(\([0-9]*\) bytes).*/\1 \2/p' "$LOGS/$1.log" | head -1
}
# rate NAME FROM: the true median examples/sec of steps FROM.. (one step per log line).
rate() { json_values "$1" examples_per_sec | tail -n +"$2" | gc_median; }
# first_losses_agree A B: whether the first 3 cross-entropies of runs A and B agree within 1e-3 relative.
first_losses_agree() {
  paste -d' ' <(json_values "$1" entropy_loss | head -3) <(json_values "$2" entropy_loss | head -3) |
    awk 'NF == 2 {d = $1 - $2; if (d < 0) d = -d; m = $2 < 0 ? -$2 : $2; if (m < 1) m = 1; if (d > 1e-3 * m) bad++; n++}
         END {exit !(n == 3 && !bad)}'
}
# twin_check NAME ARGS...: NAME_cuda1 and NAME_cuda2 (this one logging every 5 steps, so its windows count the host
# synchronisations of 4 steady steps and a log step's) on the GPU, NAME_cpu on the CPU, each a third of the
# section's limit (computed once); then the section's verdict: equal GPU digests, the CPU's first losses, <= 1 host
# synchronisation per steady GPU step. With TWIN_REPLAY=1 the first GPU run also writes its step-3 exchange
# (--exchange_dump) and exchange_replay redoes it on the CPU from the GPU's gradients: the same codes, bit for bit.
# With TWIN_REPLICAS=R the runs have R replicas: on the GPU all on cuda:0 (loopback groups), on the CPU --cpu_replicas.
twin_check() {
  local name=$1 third=$((GC_LIMIT / 3)) ok=1 timed_out="" d1 d2 syncs replay="" dump=() dir
  local gpu=(--device cuda) cpu=(--device cpu)
  if [[ -n ${TWIN_REPLICAS:-} ]]; then
    gpu=(--device cuda:0 --num_gpus "$TWIN_REPLICAS") cpu=(--device cpu --cpu_replicas "$TWIN_REPLICAS")
  fi
  shift
  if [[ ${TWIN_REPLAY:-0} == 1 ]]; then
    dir=$WORK/dump_$name && mkdir -p "$dir" && dump=(--exchange_dump "$dir" --exchange_dump_step "$REPLAY_STEP")
  fi
  train "${name}_cuda1" "$third" "$@" "${gpu[@]}" "${dump[@]}" ||
    { ok=0 && ((GC_RC == 124)) && timed_out+=" ${name}_cuda1"; }
  if ((${#dump[@]} && ok)); then
    GC_NO_RERUN=1 GC_LIMIT=10 gc_run "$LOGS/${name}_replay.log" "$BIN/exchange_replay" "$dir"
    replay=$GC_RC
    sed 's/^/   /' "$LOGS/${name}_replay.log"
  fi
  LOG_EVERY=5 train "${name}_cuda2" "$third" "$@" "${gpu[@]}" ||
    { ok=0 && ((GC_RC == 124)) && timed_out+=" ${name}_cuda2"; }
  train "${name}_cpu" "$third" "$@" "${cpu[@]}" || { ok=0 && ((GC_RC == 124)) && timed_out+=" ${name}_cpu"; }
  d1=$(digest "${name}_cuda1") d2=$(digest "${name}_cuda2")
  echo "   digests ${d1:-?} ${d2:-?}; first losses cuda [$(json_values "${name}_cuda1" entropy_loss | head -3 |
    tr '\n' ' ')] cpu [$(json_values "${name}_cpu" entropy_loss | head -3 | tr '\n' ' ')]"
  syncs=$(steady_syncs "${name}_cuda2")
  if [[ -n $timed_out ]]; then gc_timed_out "${timed_out# }"
  elif ((!ok)); then gc_fail "a run failed (logs.tar.gz: ${name}_*.log)$(gc_rerun_text)"
  elif [[ -n $replay && $replay != 0 ]]; then
    gc_fail "the CPU replay of the GPU exchange of step 3 differs or failed (exit $replay; logs: ${name}_replay.log)"
  elif [[ -z $d1 || $d1 != "$d2" ]]; then gc_fail "the GPU runs end with different digests ($d1 vs $d2)"
  elif ! first_losses_agree "${name}_cuda1" "${name}_cpu"; then gc_fail "first losses differ from the CPU's (1e-3 relative)"
  elif awk -v s="${syncs:-9}" 'BEGIN {exit !(s > 1)}'; then gc_fail "${syncs:-no} host syncs per steady step (<= 1)"
  else
    [[ -n $replay ]] && replay="; the exchange of step 3 replayed on the CPU bit for bit"
    gc_pass "digest $d1 twice; first losses within 1e-3 of the CPU's; ${syncs} host syncs per steady step$replay"
  fi
}

if gpu_section lenet "${CAP[lenet]}"; then
  twin_check lenet --net lenet --dataset fashion_mnist --batch_size 64 --max_steps 20 --num_nodes 1 --grad_bits 32
fi

if gpu_section terngrad_lenet "${CAP[terngrad_lenet]}"; then
  TWIN_REPLAY=1 TWIN_REPLICAS=2 twin_check terngrad_lenet "${TERNGRAD_LENET[@]}" --batch_size 64 --max_steps 20
fi

if gpu_section variants "${CAP[variants]}"; then
  share=$((GC_LIMIT / ${#VARIANTS[@]})) bad="" cut=""
  common=(--net lenet --dataset fashion_mnist --batch_size 64 --max_steps 10 --device cuda)
  for v in "${VARIANTS[@]}"; do
    read -r -a args <<< "$v"
    if train "variant_${args[0]}" "$share" "${common[@]}" "${args[@]:1}"; then
      loss=$(json_values "variant_${args[0]}" entropy_loss | tail -1)
      echo "   ${args[0]}: last cross-entropy ${loss:-?}"
      awk -v l="${loss:-nan}" 'BEGIN {exit !(l + 0 == l && l > 0 && l < 10)}' || bad+=" ${args[0]}: loss ${loss:-none};"
    elif ((GC_RC == 124)); then cut+=" ${args[0]}"
    else bad+=" ${args[0]} exit $GC_RC$(gc_rerun_text);"; fi
  done
  if [[ -n $bad ]]; then gc_fail "${bad# }"
  elif [[ -n $cut ]]; then gc_timed_out "${cut# }"
  else gc_pass "hierarchical, error feedback, --allow_tf32, --deterministic=false, --conv_search: 10 steps each, finite losses"; fi
fi

# ---- sanitizer ---------------------------------------------------------------------------------------------------------
# compute-sanitizer: on PATH, else beside nvcc, in CUDA_HOME/bin or /usr/local/cuda/bin (a bare machine's toolkit).
find_sanitizer() {
  local c nvcc_dir=""
  command -v compute-sanitizer 2> /dev/null && return 0
  command -v nvcc > /dev/null 2>&1 && nvcc_dir=$(dirname "$(command -v nvcc)")
  for c in ${nvcc_dir:+"$nvcc_dir/compute-sanitizer"} ${CUDA_HOME:+"$CUDA_HOME/bin/compute-sanitizer"} \
    /usr/local/cuda/bin/compute-sanitizer; do
    [[ -x $c ]] && echo "$c" && return 0
  done
  return 1
}
if gpu_section sanitizer "${CAP[sanitizer]}"; then
  if ! sanitizer=$(find_sanitizer); then
    gc_skip "compute-sanitizer not found (PATH, beside nvcc, CUDA_HOME/bin, /usr/local/cuda/bin)"
  else
    bad=0 groups=(codec amp pool concat) section_end=$(($(date +%s) + GC_LIMIT))
    for i in "${!groups[@]}"; do
      g=${groups[$i]}
      share=$(((section_end - $(date +%s)) / (${#groups[@]} - i)))  # each group a share of what is left
      GC_LIMIT=$share gc_run "$LOGS/sanitizer_$g.log" "$sanitizer" --tool memcheck --error-exitcode 9 \
        "$BIN/cuda_ops_check" --small --group "$g"
      rc=$GC_RC
      echo "   memcheck $g: exit $rc in at most ${share} s, $(grep -cE '^========= (Invalid|Program hit|Error)' "$LOGS/sanitizer_$g.log") errors"
      ((rc != 0)) && bad=1 && failed_group=$g && break
    done
    if ((bad && rc == 124)); then gc_timed_out "memcheck of --group $failed_group"
    elif ((bad)); then gc_fail "memcheck of --group $failed_group: exit $rc (logs.tar.gz: sanitizer_$failed_group.log)"
    else gc_pass "no memcheck error in codec, amp, pool, concat (--small; $sanitizer)"; fi
  fi
fi

# ---- speed -------------------------------------------------------------------------------------------------------------
if gpu_section terngrad "${CAP[terngrad]}"; then
  common=(--net alexnet --dataset imagenet --batch_size 256 --num_nodes 2 --max_steps 15 --device cuda)
  half=$((GC_LIMIT / 2)) r32="" rtg=""
  train alexnet_fp32grad "$half" "${common[@]}" --grad_bits 32 && r32=$(rate alexnet_fp32grad 6)
  rc32=$GC_RC
  train alexnet_terngrad "$half" "${common[@]}" --grad_bits 1 && rtg=$(rate alexnet_terngrad 6)
  if [[ -n $r32 && -n $rtg ]]; then
    ratio=$(awk -v a="$r32" -v b="$rtg" 'BEGIN {printf "%.3f", a / b}')
    what="AlexNet b256, 2 workers: fp32 gradients $r32 img/s, TernGrad $rtg img/s: step x$ratio"
    if awk -v r="$ratio" 'BEGIN {exit !(r <= 1.05)}'; then gc_pass "$what (target <= 1.05 met)"
    else gc_slow "$what (target <= 1.05 missed)"; fi
  elif ((rc32 == 124 || GC_RC == 124)); then gc_timed_out "an AlexNet run"
  else
    gc_fail "a run failed (logs.tar.gz: alexnet_*.log)$(gc_rerun_text)"
  fi
fi

declare -A NET_BATCH=([resnet50]=256 [inception_v3]=128)
for net in resnet50 inception_v3; do
  batch=${NET_BATCH[$net]}
  gpu_section "net:$net" "${CAP[net:$net]:-${OPTIONAL_CAP[net:$net]}}" || continue
  line="" bad="" missing="" slower=""
  section_end=$(($(date +%s) + GC_LIMIT))
  # The peer: once (TG_CUDA_SYNC means nothing to it), at most 25 s.
  GC_NO_RERUN=1 GC_LIMIT=$((25 < GC_LIMIT ? 25 : GC_LIMIT)) gc_run "$LOGS/peer_$net.log" python3 \
    "$PEERS/torch_amp_peer.py" --net "$net" --batch "$batch" --precision fp16 bf16 fp32 --warmup 5 --steps 10
  peer_rc=$GC_RC
  declare -A peer=()
  for p in fp16 bf16 fp32; do
    peer[$p]=$(sed -n "s/^torch_amp_peer $net $p batch=[0-9]* images\/s=\([0-9.]*\).*/\1/p" "$LOGS/peer_$net.log")
    [[ -z ${peer[$p]} ]] && missing+=" torch $p (exit $peer_rc);"
  done
  grep -m1 skipped "$LOGS/peer_$net.log" | sed 's/^/   /'
  for p in fp16 bf16 fp32; do
    left=$((section_end - $(date +%s)))
    ((left >= GC_MIN_SECONDS)) || { missing+=" ours $p: no time left;"; continue; }
    if train "${net}_$p" "$left" --net "$net" --dataset imagenet --batch_size "$batch" --max_steps 15 \
      --num_nodes 1 --device cuda --precision "$p" --conv_search=true; then
      ours=$(rate "${net}_$p" 6)
      [[ $net == resnet50 && $p == fp16 ]] && RESNET_FP16_RATE=$ours
      # Device launches per steady step (the backend's own counter: our kernels and cuDNN/cuBLAS compute calls).
      launches=$(json_values "${net}_$p" device_launches | tail -n +6 | gc_median)
      line+=" $p ${ours} img/s, ${launches:-?} launches/step"
      if [[ -n ${peer[$p]} ]]; then
        vs=$(awk -v a="$ours" -v b="${peer[$p]}" 'BEGIN {printf "%.2f", a / b}')
        line+=" (torch ${peer[$p]}: x$vs)"
        # The target: ResNet-50 in fp16 at least the PyTorch AMP peer's img/s.
        [[ $net == resnet50 && $p == fp16 ]] && awk -v r="$vs" 'BEGIN {exit !(r < 1.0)}' && slower+=" fp16 x$vs of torch (target >= 1.0);"
      fi
      # The memory plan against the device: what the run took by its first step, beside what it planned; beyond
      # the plan only cuDNN's workspace (at most 1 GiB) and the libraries' state may come (1.5 GiB in all).
      read -r used planned <<< "$(memory_check "${net}_$p")"
      if [[ -z ${used:-} ]]; then missing+=" ours $p: no memory line;"
      else
        line+=" memory $(awk -v u="$used" -v p="$planned" 'BEGIN {printf "%.2f of %.2f GiB planned", u / 2^30, p / 2^30}')"
        awk -v u="$used" -v p="$planned" 'BEGIN {exit !(u <= p + 1.5 * 2^30 && u >= 0.8 * p)}' ||
          bad+=" $p: took $used bytes of device memory, planned $planned;"
      fi
      line+=";"
    elif ((GC_RC == 124)); then missing+=" ours $p: cut at the section's end;"
    else
      bad+=" $p exit $GC_RC$(gc_rerun_text);"
    fi
  done
  echo "   $net b$batch:$line"
  # PASS only with every comparison made; what did not run (time, the peer) makes it SKIPPED: the verdict PARTIAL.
  if [[ -n $bad ]]; then gc_fail "${bad# }${line:+ ran:$line}"
  elif [[ -n $missing ]]; then gc_skip "not measured:${missing}${line:+ ran:$line}"
  elif [[ -n $slower ]]; then gc_slow "${slower# } ran:$line"
  else gc_pass "${line# }"; fi
done

if wanted pipeline && gc_section pipeline "${CAP[pipeline]}"; then
  gc_run "$LOGS/pipeline.log" "$BIN/pipeline_check" --net resnet50 ${TG_PIPELINE_ARGS:---seconds 5}
  sed 's/^/   /' "$LOGS/pipeline.log"
  images=$(grep -oE '[0-9.]+ images/s' "$LOGS/pipeline.log" | tail -1)
  if ((GC_RC == 0)) && [[ -n ${RESNET_FP16_RATE:-} && -n $images ]] &&
    awk -v a="${images% images/s}" -v b="$RESNET_FP16_RATE" 'BEGIN {exit !(a < b)}'; then
    gc_slow "$images, below ResNet-50's fp16 ${RESNET_FP16_RATE} img/s: the card would starve"
  elif ((GC_RC == 0)); then gc_pass "$images${RESNET_FP16_RATE:+ (ResNet-50 fp16: $RESNET_FP16_RATE img/s)}"
  elif ((GC_RC == 124)); then gc_timed_out "pipeline_check"
  else gc_fail "exit $GC_RC"; fi
fi
exit 0

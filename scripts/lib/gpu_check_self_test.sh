# shellcheck shell=bash
# scripts/gpu_check.sh --self-test (sourced by it; ctest gpu_check_self_test): what the device run decides, checked on
# a machine without a GPU.
#   1. the bookkeeping (lib/gpu_check_sections.sh): PASS only when every section passed; PARTIAL naming the skipped
#      ones; FAIL naming the failed ones; a section past the deadline is SKIPPED; a failing command is rerun once
#      with TG_CUDA_SYNC=1 (a timed-out one is not, nor one run with GC_NO_RERUN=1); a command past its section's cap
#      FAILs, one the deadline cut short is SKIPPED, one past its share of the cap FAILs naming the share; a speed
#      section that missed its target is SLOW (exit 4) and the correctness line leaves it out; the default sections'
#      caps fit the default deadline; the true
#      median (mean of the middle two for an even count);
#      the CUDA libraries' search (lib/cuda_libs.sh) in a python3 wheel tree of its own layout;
#   2. a real device run here with the build tree's programs (BUILD_DIR, --bin-dir): without a GPU the environment
#      section FAILs naming why, every GPU section is SKIPPED with the reason, the CPU's input-pipeline section runs,
#      the last line is "gpu_check: FAIL (...)" (never PASS), the exit status 1, and at most 6 files land in $OUT;
#   3. a device run without a bundle: FAIL, naming where the bundle was looked for.
# Prints one line per check and "gpu_check --self-test: PASS (n checks)" or the failures; returns 0 or 1.

gc_self_test() {
  local root work failures=0 checks=0 out rc line
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  work=$(mktemp -d /tmp/tg_gpu_self_test.XXXXXX)
  expect() {  # WHAT CONDITION-RESULT(0/1) DETAIL
    checks=$((checks + 1))
    if [[ $2 == 0 ]]; then echo "  ok   $1"; else echo "  FAIL $1: $3" && failures=$((failures + 1)); fi
  }
  # ---- 1. bookkeeping, each scenario in a subshell with its own state --------------------------------------------
  out=$( (gc_init 100 && gc_section a 10 && gc_pass && gc_section b 10 && gc_pass "2 lines" && gc_summary "$work/s1") )
  rc=$?
  line=$(tail -1 <<< "$out")
  [[ $line == "gpu_check: PASS" && $(tail -1 "$work/s1") == "$line" ]]
  expect "all sections passed: PASS, also in the summary file" $? "$line (exit $rc)"
  [[ $rc == 0 ]]
  expect "PASS exits 0" $? "exit $rc"

  out=$( (gc_init 100 && gc_section a 10 && gc_pass && gc_skip_section b "no tool" &&
    gc_section c 10 && gc_skip "not installed" && gc_summary "$work/s2") )
  rc=$?
  line=$(tail -1 <<< "$out")
  [[ $line == "gpu_check: PARTIAL (2 sections skipped: b, c)" && $rc == 3 ]]
  expect "skipped sections: PARTIAL naming them, exit 3" $? "$line (exit $rc)"

  out=$( (gc_init 100 && gc_section a 10 && gc_fail "bad bits" && gc_skip_section b "no GPU" &&
    gc_section c 10 && gc_pass && gc_summary "$work/s3") )
  rc=$?
  line=$(tail -1 <<< "$out")
  [[ $line == "gpu_check: FAIL (1 section failed: a; 1 skipped: b)" && $rc == 1 ]]
  expect "a failed section: FAIL naming it and the skipped one, exit 1" $? "$line (exit $rc)"
  grep -q 'bad bits' <<< "$out"
  expect "the summary table gives each section's detail" $? "$out"

  out=$( (gc_init 3 && { gc_section late 60 || true; } && gc_summary "$work/s4") )
  line=$(tail -1 <<< "$out")
  [[ $line == "gpu_check: PARTIAL (1 section skipped: late)" ]] && grep -q 'deadline' <<< "$out"
  expect "a section past the deadline is SKIPPED, naming the deadline" $? "$out"

  out=$( (gc_init 100 && gc_summary "$work/s5") )
  [[ $(tail -1 <<< "$out") == "gpu_check: FAIL (no section ran)" ]]
  expect "no section at all: FAIL" $? "$out"

  out=$( (gc_init 100 && gc_section r 20 > /dev/null &&
    gc_run "$work/rerun.log" bash -c 'echo "sync=${TG_CUDA_SYNC:-0}"; [[ ${TG_CUDA_SYNC:-0} == 1 ]]' > /dev/null
    echo "rc=$GC_RC rerun=$GC_RERUN_RC"; cat "$work/rerun.log.sync") )
  [[ $out == *"rc=1 rerun=0"* && $out == *"sync=1"* ]]
  expect "a failing command is rerun once with TG_CUDA_SYNC=1" $? "$out"

  # shellcheck disable=SC2034 # gc_run's limit
  out=$( (gc_init 100 && gc_section t 20 > /dev/null && GC_LIMIT=1 &&
    gc_run "$work/timeout.log" sleep 5 > /dev/null
    echo "rc=$GC_RC rerun=[$GC_RERUN_RC]") )
  [[ $out == "rc=124 rerun=[]" ]]
  expect "a timed-out command is not rerun" $? "$out"

  out=$( (gc_init 100 && gc_section r 20 > /dev/null && GC_NO_RERUN=1 gc_run "$work/norerun.log" false > /dev/null
    echo "rc=$GC_RC rerun=[$GC_RERUN_RC]") )
  [[ $out == "rc=1 rerun=[]" ]]
  expect "GC_NO_RERUN=1 (the PyTorch peer): a failing command is not rerun" $? "$out"

  out=$( (gc_init 100 && gc_section own 10 > /dev/null && gc_timed_out "prog" > /dev/null && gc_summary "$work/s6") )
  [[ $(tail -1 <<< "$out") == "gpu_check: FAIL (1 section failed: own)" && $out == *"timed out after 10 s"* ]]
  expect "a command past its section's own cap FAILs" $? "$out"
  out=$( (gc_init 8 && gc_section cut 60 > /dev/null && gc_timed_out "prog" > /dev/null && gc_summary "$work/s7") )
  [[ $(tail -1 <<< "$out") == "gpu_check: PARTIAL (1 section skipped: cut)" && $out == *"cut by the 8 s deadline"* ]]
  expect "a command the deadline cut short is SKIPPED (PARTIAL), not FAIL" $? "$out"

  # shellcheck disable=SC2034 # GC_SPEED is read by gc_summary
  out=$( (gc_init 100 && GC_SPEED="terngrad net" && gc_section lenet 10 > /dev/null && gc_pass > /dev/null &&
    gc_section terngrad 10 > /dev/null && gc_slow "step x1.31 (target <= 1.05 missed)" > /dev/null &&
    gc_summary "$work/s8") )
  rc=$?
  [[ $(tail -1 <<< "$out") == "gpu_check: SLOW (1 speed target missed: terngrad)" && $rc == 4 &&
    $(tail -2 <<< "$out" | head -1) == "correctness: PASS (1 sections)" ]]
  expect "a speed target missed: SLOW (exit 4), the correctness sections still PASS" $? "$out (exit $rc)"
  # shellcheck disable=SC2034 # GC_SPEED is read by gc_summary
  out=$( (gc_init 100 && GC_SPEED="terngrad net" && gc_section lenet 10 > /dev/null && gc_fail "digests differ" > /dev/null &&
    gc_section net:resnet50 10 > /dev/null && gc_pass > /dev/null && gc_summary "$work/s9") )
  [[ $(tail -2 <<< "$out" | head -1) == "correctness: FAIL (lenet)" ]]
  expect "a failed correctness section: the correctness line FAILs naming it" $? "$out"
  # shellcheck disable=SC2034 # gc_run's limit, for this run only
  out=$( (gc_init 100 && gc_section share 20 > /dev/null && GC_LIMIT=1 gc_run "$work/share.log" sleep 5 > /dev/null;
    gc_timed_out "the first of three runs" > /dev/null && gc_summary "$work/s10") )
  [[ $out == *"the first of three runs timed out after 1 s (its share of the section's 20 s cap)"* ]]
  expect "a run past its share of the section's cap FAILs naming the share, not the cap" $? "$out"

  local total=0 name
  for name in "${!CAP[@]}"; do total=$((total + CAP[$name])); done
  ((total <= GC_DEFAULT_SECONDS && ${#CAP[@]} >= 25))
  expect "the default sections' caps sum to at most the ${GC_DEFAULT_SECONDS} s deadline" $? "caps sum to $total s"

  out=$(gb_arch_check "80;90" "9.0") && [[ -z $out ]] && out=$(gb_arch_check "90" "10.0") && [[ $out == note:* ]] &&
    ! out=$(gb_arch_check "90" "8.0") && [[ $out == *"older than all of them"*"CMAKE_CUDA_ARCHITECTURES=80"* ]] &&
    ! gb_arch_check "" "9.0" > /dev/null && ! gb_arch_check "90" "" > /dev/null
  expect "a bundle for another GPU: the same architecture runs, a newer GPU is a note, an older one FAILs naming why" \
    $? "$out"

  [[ $(printf '4\n1\n3\n2\n' | gc_median) == 2.5 && $(printf '5\n1\n3\n' | gc_median) == 3.0 ]]
  expect "the median of an even count is the mean of the middle two" $? "$(printf '4\n1\n3\n2\n' | gc_median)"

  # LIBRARY|its versions line built for CUDA 12|built for CUDA 13|its path in the first: the CUDA 12 one is named
  # (env FAILs on it), the CUDA 13 one passes; both libraries of another CUDA at once are both named, in one line.
  local runtime='CUDA runtime 13.0 (linked statically, built with 13.0)' lib line12 line13 path
  while IFS='|' read -r lib line12 line13 path; do
    printf '%s\n%s\n' "$runtime" "$line12" > "$work/$lib-12.log"
    printf '%s\n%s\n' "$runtime" "$line13" > "$work/$lib-13.log"
    out=$(cuda_mismatch "$work/$lib-12.log")
    [[ $out == "the $lib loaded was built for CUDA 12, the bundle's runtime is CUDA 13 ($path)" &&
      -z $(cuda_mismatch "$work/$lib-13.log") ]]
    expect "$lib built for another CUDA major version: named (env FAILs on it); the matching one passes" $? "$out"
  done << 'VERSIONS'
cuDNN|cuDNN 9.3.0 (built with 9.19.0, for CUDA runtime 12060): /w/nvidia/cudnn/lib/libcudnn.so.9|cuDNN 9.19.0 (built with 9.19.0, for CUDA runtime 13010): /usr/local/cuda/lib/libcudnn.so.9|/w/nvidia/cudnn/lib/libcudnn.so.9
NCCL|NCCL 2.21.5 (built with 2.28.9, for CUDA 12.4): /w/nvidia/nccl/lib/libnccl.so.2|NCCL 2.28.9 (built with 2.28.9, for CUDA 13.0): /usr/local/cuda/lib/libnccl.so.2|/w/nvidia/nccl/lib/libnccl.so.2
VERSIONS
  { cat "$work/cuDNN-12.log" && tail -1 "$work/NCCL-12.log"; } > "$work/both.log"
  out=$(cuda_mismatch "$work/both.log")
  [[ $out == *"the cuDNN loaded was built for CUDA 12"*"; the NCCL loaded was built for CUDA 12"* ]]
  expect "a cuDNN and an NCCL of another CUDA are both named, in one line" $? "$out"

  # The CUDA libraries' search finds a file in a python3 wheel tree of a layout of its own, says so, and names a
  # library it cannot find with the places it looked.
  mkdir -p "$work/site/nvidia/cu13/lib" && touch "$work/site/nvidia/cu13/lib/libtgwheeltest.so.9"
  out=$( (PYTHONPATH="$work/site" && export PYTHONPATH && tg_cuda_lib_search libtgwheeltest.so.9 libtgabsent.so.1 &&
    echo "found=${TG_CUDA_LIB_PATH[libtgwheeltest.so.9]:-} from=${TG_CUDA_LIB_FROM[libtgwheeltest.so.9]:-}" &&
    echo "missing=${TG_CUDA_LIB_MISSING[*]} where=$TG_CUDA_LIB_WHERE") )
  [[ $out == *"found=$work/site/nvidia/cu13/lib/libtgwheeltest.so.9 from=python3 wheel"* &&
    $out == *"missing=libtgabsent.so.1 "*"$work/site/nvidia"* ]]
  expect "CUDA libraries: the wheel tree is searched, a missing one named with where it was looked for" $? "$out"

  # ---- 2. the device run here, without a GPU ------------------------------------------------------------------------
  local build=${BUILD_DIR:-$root/build}
  if [[ ! -x $build/cuda_ops_check || ! -x $build/pipeline_check ]]; then
    expect "device run without a GPU" 1 "no cuda_ops_check and pipeline_check in $build (BUILD_DIR): build first"
  elif [[ $("$build/cuda_ops_check" --versions 2> /dev/null | sed -n 's/^CUDA devices: \([0-9]*\).*/\1/p') -gt 0 ]]; then
    echo "  note this machine has a GPU: the missing-GPU path is not exercised"
  else
    out=$(OUT="$work/out" TG_GPU_CHECK_SECTIONS="env sanitizer ops:codec gtest:codec_ops_test lenet net:resnet50 pipeline" \
      TG_PIPELINE_ARGS="--images 64 --batch 16 --seconds 1 --threads 2 --readers 1" \
      bash "$root/scripts/gpu_check.sh" --bin-dir "$build" 2>&1)
    rc=$?
    line=$(tail -1 "$work/out/summary.txt" 2> /dev/null)
    [[ $line == "gpu_check: FAIL (1 section failed: env;"* && $rc == 1 ]]
    expect "no GPU: the run FAILs at env, exit 1" $? "$line (exit $rc)"
    grep -E '^  env +FAIL' "$work/out/summary.txt" | grep -q 'no CUDA device'
    expect "env names the missing device" $? "$(grep env "$work/out/summary.txt")"
    [[ $(grep -cE 'SKIPPED .*no usable GPU' "$work/out/summary.txt") == 5 ]]
    expect "the 5 GPU sections asked for are SKIPPED, naming why" $? "$(cat "$work/out/summary.txt")"
    grep -qE '^  pipeline +PASS .*images/s' "$work/out/summary.txt"
    expect "the input-pipeline section runs on the CPU" $? "$(grep pipeline "$work/out/summary.txt")"
    ! grep -q 'gpu_check: PASS' "$work/out/gpu_check.log"
    expect "never PASS without a GPU" $? "$line"
    [[ $(find "$work/out" -type f | wc -l) -le 6 && -f $work/out/logs.tar.gz ]]
    expect "at most 6 files in \$OUT (summary, log, logs.tar.gz)" $? "$(ls "$work/out")"
  fi

  # The variants section's flags parse and run (one CPU step each: the GPU is what the device run adds).
  if [[ -x $build/terngrad-train ]]; then
    local v args bad_variant=""
    for v in "${VARIANTS[@]}"; do
      read -r -a args <<< "$v"
      "$build/terngrad-train" --benchmark_mode --net lenet --dataset fashion_mnist --batch_size 16 --max_steps 1 \
        --threads 1 --save_iter 100000000 --train_dir "$work/variant_${args[0]}" "${args[@]:1}" \
        > "$work/variant.log" 2>&1 || bad_variant+=" ${args[0]}: $(tail -1 "$work/variant.log")"
    done
    [[ -z $bad_variant ]]
    expect "the variants section's flag sets run (one CPU step each)" $? "$bad_variant"
    # The TernGrad LeNet section's dump and replay, on the CPU: the flags parse, the replay finds the same codes.
    if [[ -x $build/exchange_replay ]]; then
      mkdir -p "$work/dump"
      "$build/terngrad-train" --benchmark_mode "${TERNGRAD_LENET[@]}" --cpu_replicas 2 --batch_size 16 \
        --max_steps "$REPLAY_STEP" --threads 1 --save_iter 100000000 --train_dir "$work/replay_run" \
        --exchange_dump "$work/dump" --exchange_dump_step "$REPLAY_STEP" > "$work/replay.log" 2>&1 &&
        "$build/exchange_replay" "$work/dump" >> "$work/replay.log" 2>&1
      expect "the TernGrad LeNet flags' exchange dump replays on the CPU (exit 0)" $? "$(tail -1 "$work/replay.log")"
    fi
  fi

  # ---- 3. no bundle ---------------------------------------------------------------------------------------------------
  out=$(OUT="$work/out3" GPU_BUNDLE="$work/none.tar.xz" TG_GPU_CHECK_SECTIONS=env bash "$root/scripts/gpu_check.sh" 2>&1)
  rc=$?
  grep -E '^  env +FAIL' "$work/out3/summary.txt" 2> /dev/null | grep -q "no bundle at $work/none.tar.xz" && [[ $rc == 1 ]]
  expect "no bundle: FAIL naming where it was looked for" $? "$(cat "$work/out3/summary.txt" 2> /dev/null) $out"

  rm -rf "$work"
  if ((failures)); then
    echo "gpu_check --self-test: FAIL ($failures of $checks checks)"
    return 1
  fi
  echo "gpu_check --self-test: PASS ($checks checks)"
}

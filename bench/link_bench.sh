#!/usr/bin/env bash
# link_bench.sh: data-parallel training of 2 workers across an emulated slow link, terngrad against PyTorch
# DDP (gloo), in the same conditions, each next to its own compute-only step. See bench/README.md, "Emulated
# link".
#
# Two emulated machines (bench/lib/netns_link.sh: a namespace each, joined through a bridge; both directions of
# each port shaped at RATE). One process per machine, each pinned to its own core, one thread each:
#   - ours: terngrad-train under mpirun (rank 0 in the first namespace, rank 1 started in the second by an rsh
#     agent that runs `ip netns exec`), for each method (fp32, fp16, terngrad, powersgd: rank 2 after 2 fp32
#     steps, as the peer's);
#   - ours, compute only: the same two processes with `--exchange none` (no collective), where the trainer has
#     it; else the stand-in, labelled so: two single-worker trainers (`--num_nodes 1`, the same per-worker batch),
#     one per namespace, at once, pinned the same way;
#   - DDP: bench/ddp_peer.py, one rank per namespace, for each method (fp32, fp16, powersgd);
#   - DDP, compute only: ddp_peer.py --method none (no DDP, no process group), one per namespace, at once.
# The link overhead of a system is its step minus its own compute-only step. Raw results, with their
# provenance, go to a results file (bench/lib/results.sh); the table is rendered from it by
# scripts/check_readme_results.py. All traffic stays on the emulated link.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: bench/link_bench.sh [options] RATE [RATE...]

  RATE             a tc rate (100mbit, 1gbit, 2.5gbit, 10gbit; units bit kbit mbit gbit tbit) or `none`
                   (unshaped veth)
  -b BUILD_DIR     build folder with terngrad-train (default: build)
  -n NETS          comma-separated: lenet, alexnet, resnet50 (default: lenet,alexnet)
  -m METHODS       ours: comma-separated fp32, fp16, terngrad, powersgd (default: fp32, fp16, terngrad)
  -P PEER_METHODS  DDP: comma-separated fp32, fp16, powersgd (default: all three)
  -B BATCHES       per-worker batch per net, e.g. lenet=3584,alexnet=40 (defaults below)
  -s STEPS         steps per run (default 12); the first -w are warm-up, the rest are timed
  -w WARMUP        untimed first steps (default 2)
  -r REPEATS       run the whole matrix this many times, interleaved (default 3; a speed comparison in the
                   READMEs needs at least 3)
  -d DELAY_MS      one-way delay added by netem on each direction (default 0: none)
  -x "FLAGS"       extra terngrad-train flags, passed through (e.g. "--exchange allreduce8")
  -I ISA           native (default) or avx2: every run restricted to AVX2 (bench/lib/results.sh
                   results_restrict_isa: ours and PyTorch's oneDNN, our own loops, PyTorch's ATen and MKL)
  -o FILE          the results file (default bench/results/link.tsv)
  --no-peer        leave out the PyTorch DDP runs (no rows for them)
  --no-pin         do not pin each process to its own core
  --comm-bench     also run BUILD_DIR/bench/comm_bench across each link (output on stdout)
  -h, --help       this text

Per-worker batches (compute ~1 s/step on 1 thread of a 2-core machine): lenet 3584, alexnet 40, resnet50 6.
Every run: 1 worker and 1 thread per process, `--benchmark_mode`; process k pinned to core k-1 (taskset).
A DDP run whose peer is missing (no PyTorch with gloo) or fails writes a row saying so. Needs root, ip, tc,
taskset, mpirun and python3 (PyTorch + torchvision for the peer: bench/setup_peers.sh).
EOF
}

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib/bench.sh
source "$HERE/lib/bench.sh" # tg_die, results_*, bench_options
# shellcheck source=lib/netns_link.sh
source "$HERE/lib/netns_link.sh"
# shellcheck source=lib/scratch.sh
source "$HERE/lib/scratch.sh"
# shellcheck source=lib/rank_pinning.sh
source "$HERE/lib/rank_pinning.sh"

# ---- arguments -------------------------------------------------------------------------------------------
BUILD_DIR=build
NETS=lenet,alexnet
METHODS=fp32,fp16,terngrad
PEER_METHODS=fp32,fp16,powersgd
BATCHES=""
STEPS=12
WARMUP=2
DELAY_MS=0
EXTRA=""
OUT=bench/results/link.tsv
PEER=1
PIN=1
COMM_BENCH=0
REPEATS=3
ISA=native
RATES=()
bench_options -b=BUILD_DIR -n=NETS -m=METHODS -P=PEER_METHODS -B=BATCHES -s=STEPS -w=WARMUP -r=REPEATS -d=DELAY_MS \
  -x=EXTRA -o=OUT -I=ISA --no-peer:PEER=0 --no-pin:PIN=0 --comm-bench:COMM_BENCH=1 @RATES -- "$@"

# Refusals first, before anything is created.
bench_link_refusals "ip tc mpirun python3 taskset" "1gbit or none" "100mbit, 1gbit, 10gbit (>= 8kbit)" "${RATES[@]}"
[[ "$STEPS" =~ ^[0-9]+$ && "$WARMUP" =~ ^[0-9]+$ ]] || tg_die "-s and -w take integers"
[[ "$REPEATS" =~ ^[1-9][0-9]*$ ]] || tg_die "-r takes a positive integer"
[ "$WARMUP" -ge 1 ] || tg_die "-w must be >= 1 (the first step is always a warm-up)"
[ "$STEPS" -ge $((WARMUP + 2)) ] || tg_die "-s $STEPS: need at least 2 timed steps after -w $WARMUP warm-up steps"
[[ "$DELAY_MS" =~ ^[0-9]+(\.[0-9]+)?$ ]] || tg_die "-d takes milliseconds (a number)"
results_restrict_isa "$ISA" || tg_die "-I: unknown ISA '$ISA' (native, avx2)"
TRAIN=$BUILD_DIR/terngrad-train
[ -x "$TRAIN" ] || tg_die "no $TRAIN (build it: cmake --build $BUILD_DIR --target terngrad-train; or pass -b)"
TRAIN=$(cd "$(dirname "$TRAIN")" && pwd)/terngrad-train
COMM=$(cd "$BUILD_DIR" && pwd)/bench/comm_bench
if [ "$COMM_BENCH" = 1 ] && [ ! -x "$COMM" ]; then
  tg_die "--comm-bench: no $COMM (configure with -DTG_BUILD_BENCH=ON and build comm_bench)"
fi
# shellcheck source=lib/peer_python.sh
source "$HERE/lib/peer_python.sh"
PYTHON=$(peer_python)  # PyPI's PyTorch by default; TG_PEER=debian: Debian's 1.13
IFS=, read -r -a NET_LIST <<<"$NETS"
IFS=, read -r -a METHOD_LIST <<<"$METHODS"
IFS=, read -r -a PEER_LIST <<<"$PEER_METHODS"
read -r -a EXTRA_FLAGS <<<"$EXTRA"
for n in "${NET_LIST[@]}"; do
  case "$n" in lenet | alexnet | resnet50) ;; *) tg_die "unknown net '$n' (lenet, alexnet, resnet50)" ;; esac
done
for m in "${METHOD_LIST[@]}"; do
  case "$m" in fp32 | fp16 | terngrad | powersgd) ;; *) tg_die "unknown method '$m' (fp32, fp16, terngrad, powersgd)" ;; esac
done
for m in "${PEER_LIST[@]}"; do
  case "$m" in fp32 | fp16 | powersgd) ;; *) tg_die "unknown peer method '$m' (fp32, fp16, powersgd)" ;; esac
done
# A missing peer is not a refusal: its rows say so.
PEER_MISSING=""
if [ "$PEER" = 1 ] && ! "$PYTHON" -c 'import torch, torchvision, torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null; then
  PEER_MISSING="no PyTorch with gloo and torchvision in $PYTHON (bench/setup_peers.sh)"
  echo "link_bench.sh: $PEER_MISSING: the DDP rows will say so" >&2
fi
CORES=$(nproc)
if [ "$PIN" = 1 ] && [ "$CORES" -lt 2 ]; then
  echo "link_bench.sh: $CORES core: the 2 processes share it (not pinned)" >&2
  PIN=0
fi
# Ours compute-only: the trainer's `--exchange none` keeps the 2-process layout with no collective.
OURS_COMPUTE="exchange none"
# (--summary exits before the flags are checked: ask the help text.)
"$TRAIN" --help-markdown 2>/dev/null | grep -E -- '^\| `--exchange` .*\bnone\b' >/dev/null || OURS_COMPUTE="stand-in: 2 independent processes"

declare -A DEFAULT_BATCH=([lenet]=3584 [alexnet]=40 [resnet50]=6)
batch_of() { bench_batch "$1" "${DEFAULT_BATCH[$1]:-}"; }
dataset_of() {
  case "$1" in
    lenet) echo fashion_mnist ;;
    *) echo imagenet ;;
  esac
}

# ---- the emulated link ------------------------------------------------------------------------------------
bench_scratch link_bench

netlink_create "tglb$$" 2 "$TMP/netns_agent.sh"
NS1=$(netlink_ns 1)
NS2=$(netlink_ns 2)
IP1=$(netlink_ip 1)
IF=$NETLINK_IF

# Process k (0-based: the MPI rank) on core k; with --no-pin, anywhere.
PINNER=$TMP/pin_rank.sh
write_rank_pinner "$PINNER"

# --bind-to none: both "hosts" are this machine (Open MPI would bind both ranks to core 0); pin_rank.sh pins.
netlink_mpirun 2
MPIRUN=("${NETLINK_MPIRUN[@]}")
# -I avx2: the restriction reaches rank 1 on the other "host" too.
if [ -n "${ONEDNN_MAX_CPU_ISA:-}" ]; then MPIRUN+=(-x ONEDNN_MAX_CPU_ISA); fi
MPIRUN+=("$PINNER")

# Watches the chief's metrics file and reads the link's byte counters when the warm-up's last step and the
# run's last step are logged (the exchange runs at the end of each step; a 10 ms poll is well inside the
# ~1 s compute that follows). Writes "rx tx steps" to OUT.
SAMPLER=$TMP/wire_sampler.py
cat >"$SAMPLER" <<'EOF'
import json, sys, time
metrics, iface, first, last, out, timeout = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], float(sys.argv[6])
base = "/sys/class/net/%s/statistics/" % iface
def counters():
    with open(base + "rx_bytes") as rx, open(base + "tx_bytes") as tx:
        return int(rx.read()), int(tx.read())
pos, pending, start, deadline = 0, "", None, time.time() + timeout
while time.time() < deadline:
    try:
        with open(metrics) as f:
            f.seek(pos)
            pending += f.read()
            pos = f.tell()
    except FileNotFoundError:
        pass
    while "\n" in pending:
        line, pending = pending.split("\n", 1)
        try:
            step = json.loads(line).get("step")
        except ValueError:
            continue
        if step == first:
            start = counters()
        elif step == last and start is not None:
            end = counters()
            with open(out, "w") as f:
                f.write("%d %d %d\n" % (end[0] - start[0], end[1] - start[1], last - first))
            sys.exit(0)
    time.sleep(0.01)
sys.exit(1)
EOF

# Median sec_per_batch of the steps after the warm-up, and the trainer's bytes per step (moved into a rank,
# payload) from the chief's metrics JSON lines.
metrics_summary() {
  python3 - "$1" "$WARMUP" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
steps = [r for r in rows if "step" in r and "summary" not in r and r["step"] > int(sys.argv[2])]
if not steps:
    sys.exit(1)
last = steps[-1]
print("%.6f %d %d %d" % (statistics.median(r["sec_per_batch"] for r in steps), len(steps), last["bytes_exchanged"],
                         last.get("payload_bytes", 0)))
EOF
}

TABLE=$TMP/table.tsv
printf 'rep\tload1\trate\tmodel\tsystem\tmode\tmethod\tbatch_per_worker\ttimed_steps\tmedian_s\tbytes_trainer\tpayload_trainer\twire_rx_per_step\twire_tx_per_step\tstatus\tnote\n' >"$TABLE"
HEADER=$TMP/header
results_header link "$BUILD_DIR" "$0" "${ARGS[@]}" >"$HEADER"
peer_header_line "$PYTHON" >>"$HEADER"
{
  echo "# pinning: $([ "$PIN" = 1 ] && echo "process k on core k-1 of $CORES (taskset)" || echo none)"
  echo "# ours compute-only: $OURS_COMPUTE"
  echo "# steps: $STEPS per run, $WARMUP warm-up; delay ${DELAY_MS} ms; extra trainer flags: ${EXTRA:-none}"
} >>"$HEADER"
REP=1
LOAD=0
# record rate model system mode method batch steps median bytes payload rx tx status note
record() {
  local IFS=$'\t'
  echo "$REP$IFS$LOAD$IFS$*" >>"$TABLE"
}
note_load() { LOAD=$(cut -d' ' -f1 /proc/loadavg); }

RUN=0
fail_log() {
  echo "link_bench.sh: $1 failed; last lines of its log:" >&2
  tail -n 15 "$2" >&2 || true
}

trainer_flags() { # net batch_per_process bits -> the flags of one terngrad-train process
  local net=$1 b=$2 bits=$3
  echo --benchmark_mode --net "$net" --dataset "$(dataset_of "$net")" --threads 1 --batch_size "$b" \
    --grad_bits "$bits" --max_steps "$STEPS" --log_every 1 --save_iter 100000000 --log_level warn
}

# terngrad-train on 2 processes across the link; mode "step" (METHOD's exchange) or "compute" (--exchange none).
run_ours() {
  local rate=$1 net=$2 method=$3 b=$4 mode=${5:-step} bits clip=() xflags=()
  case "$method" in
    fp32) bits=32 ;;
    fp16) bits=16 ;;
    terngrad)
      bits=1
      clip=(--clip_factor 2.5)
      ;;
    powersgd) # the peer's PowerSGDState: rank 2, start_powerSGD_iter 2
      bits=32
      xflags=(--exchange powersgd --powersgd_rank 2 --fp32_warmup_steps 2)
      ;;
  esac
  [ "$mode" = compute ] && xflags=(--exchange none)
  RUN=$((RUN + 1))
  note_load
  local dir=$TMP/run$RUN log=$TMP/run$RUN.log flags
  mkdir -p "$dir"
  read -r -a flags <<<"$(trainer_flags "$net" $((2 * b)) "$bits")"
  ip netns exec "$NS1" python3 "$SAMPLER" "$dir/metrics.jsonl" "$IF" "$WARMUP" "$STEPS" "$dir/wire" $((STEPS * 120 + 300)) &
  local sampler=$!
  local rc=0
  run timeout $((STEPS * 120 + 300)) "${MPIRUN[@]}" "$TRAIN" "${flags[@]}" --num_nodes 1 "${clip[@]}" "${xflags[@]}" \
    --metrics_jsonl "$dir/metrics.jsonl" --train_dir "$dir/train" "${EXTRA_FLAGS[@]}" >"$log" 2>&1 || rc=$?
  # The sampler ends on the last step's line; if the run failed, it would wait for its timeout: end it.
  local _
  for _ in $(seq 50); do
    kill -0 "$sampler" 2>/dev/null || break
    sleep 0.1
  done
  kill "$sampler" 2>/dev/null || true
  local wrc=0
  wait "$sampler" || wrc=$?
  local s rx=0 tx=0 n=1 note=""
  [ "$mode" = compute ] && note=$OURS_COMPUTE
  if [ "$rc" = 0 ] && s=$(metrics_summary "$dir/metrics.jsonl"); then
    [ "$wrc" = 0 ] && read -r rx tx n <"$dir/wire"
    read -r med steps bytes payload <<<"$s"
    record "$rate" "$net" ours "$mode" "$method" "$b" "$steps" "$med" "$bytes" "$payload" $((rx / n)) $((tx / n)) ok "$note"
  else
    fail_log "terngrad-train $net $method ($mode) at $rate" "$log"
    record "$rate" "$net" ours "$mode" "$method" "$b" 0 - - - - - failed "exit $rc: $(why "$log")"
  fi
  rm -rf "$dir"
}

# The stand-in for ours compute-only: one single-worker trainer per namespace, at once, pinned as the ranks.
run_ours_standin() {
  local net=$1 b=$2
  RUN=$((RUN + 1))
  note_load
  local dir=$TMP/run$RUN rc=0 k pids=() flags
  mkdir -p "$dir"
  read -r -a flags <<<"$(trainer_flags "$net" "$b" 32)"
  for k in 1 2; do
    pin $((k - 1)) ip netns exec "$(netlink_ns "$k")" "$TRAIN" "${flags[@]}" --num_nodes 1 \
      --metrics_jsonl "$dir/metrics$k.jsonl" --train_dir "$dir/train$k" "${EXTRA_FLAGS[@]}" >"$dir/log$k" 2>&1 &
    pids+=("$!")
  done
  for k in "${pids[@]}"; do
    wait "$k" || rc=$?
  done
  local s
  if [ "$rc" = 0 ] && s=$(metrics_summary "$dir/metrics1.jsonl"); then
    read -r med steps _ _ <<<"$s"
    record - "$net" ours compute - "$b" "$steps" "$med" - - - - ok "$OURS_COMPUTE"
  else
    fail_log "ours compute-only $net" "$dir/log1"
    record - "$net" ours compute - "$b" 0 - - - - - failed "exit $rc: $(why "$dir/log1")"
  fi
  rm -rf "$dir"
}

# PyTorch DDP, one rank per namespace, each pinned to its core.
run_ddp() {
  local rate=$1 net=$2 method=$3 b=$4
  if [ -n "$PEER_MISSING" ]; then
    record "$rate" "$net" ddp step "$method" "$b" 0 - - - - - missing "$PEER_MISSING"
    return
  fi
  RUN=$((RUN + 1))
  note_load
  local out=$TMP/ddp$RUN.json log0=$TMP/ddp$RUN.0.log log1=$TMP/ddp$RUN.1.log port=$((29500 + RUN))
  local common=(--net "$net" --batch "$b" --method "$method" --steps $((STEPS - WARMUP)) --warmup "$WARMUP" --iface "$IF")
  local limit=$((STEPS * 300 + 300))
  pin 1 ip netns exec "$NS2" env MASTER_ADDR="$IP1" MASTER_PORT="$port" RANK=1 WORLD_SIZE=2 GLOO_SOCKET_IFNAME="$IF" \
    timeout "$limit" "$PYTHON" "$HERE/ddp_peer.py" "${common[@]}" >"$log1" 2>&1 &
  local p1=$!
  local rc0=0 rc1=0
  run pin 0 ip netns exec "$NS1" env MASTER_ADDR="$IP1" MASTER_PORT="$port" RANK=0 WORLD_SIZE=2 GLOO_SOCKET_IFNAME="$IF" \
    timeout "$limit" "$PYTHON" "$HERE/ddp_peer.py" "${common[@]}" --json_out "$out" >"$log0" 2>&1 || rc0=$?
  # Rank 1 would wait for a failed rank 0 until gloo's timeout (30 min): end it.
  [ "$rc0" = 0 ] || kill "$p1" 2>/dev/null || true
  wait "$p1" || rc1=$?
  if [ "$rc0" = 0 ] && [ "$rc1" = 0 ] && [ -s "$out" ]; then
    local med rx tx
    read -r med rx tx < <(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print("%.6f %d %d" % (j["median_s"], j["wire_rx_per_step"], j["wire_tx_per_step"]))' "$out")
    record "$rate" "$net" ddp step "$method" "$b" $((STEPS - WARMUP)) "$med" - - "$rx" "$tx" ok ""
  else
    fail_log "DDP $net $method at $rate (rank 0 exit $rc0, rank 1 exit $rc1)" "$log0"
    tail -n 5 "$log1" >&2 || true
    record "$rate" "$net" ddp step "$method" "$b" 0 - - - - - failed \
      "rank 0 exit $rc0, rank 1 exit $rc1: $(why "$log0")"
  fi
}

# PyTorch compute only: ddp_peer.py --method none in each namespace at once, pinned as the DDP ranks.
run_ddp_compute() {
  local net=$1 b=$2
  if [ -n "$PEER_MISSING" ]; then
    record - "$net" ddp compute - "$b" 0 - - - - - missing "$PEER_MISSING"
    return
  fi
  RUN=$((RUN + 1))
  note_load
  local k rc=0 pids=() dir=$TMP/ddpc$RUN
  mkdir -p "$dir"
  for k in 1 2; do
    pin $((k - 1)) ip netns exec "$(netlink_ns "$k")" env RANK=$((k - 1)) timeout $((STEPS * 300 + 300)) "$PYTHON" \
      "$HERE/ddp_peer.py" --net "$net" --batch "$b" --method none --steps $((STEPS - WARMUP)) --warmup "$WARMUP" \
      --json_out "$dir/out$k.json" >"$dir/log$k" 2>&1 &
    pids+=("$!")
  done
  for k in "${pids[@]}"; do
    wait "$k" || rc=$?
  done
  if [ "$rc" = 0 ] && [ -s "$dir/out1.json" ]; then
    local med
    med=$(python3 -c 'import json,sys; print("%.6f" % json.load(open(sys.argv[1]))["median_s"])' "$dir/out1.json")
    record - "$net" ddp compute - "$b" $((STEPS - WARMUP)) "$med" - - - - ok "no DDP, no process group"
  else
    fail_log "PyTorch compute-only $net" "$dir/log1"
    record - "$net" ddp compute - "$b" 0 - - - - - failed "exit $rc: $(why "$dir/log1")"
  fi
  rm -rf "$dir"
}

# ---- the runs ---------------------------------------------------------------------------------------------
echo "# link_bench: $(date -u '+%Y-%m-%d %H:%M UTC'), terngrad $(git -C "$HERE" rev-parse --short HEAD 2>/dev/null || echo '?')," \
  "$CORES cores, ISA $(results_isa), load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
echo "# nets $NETS, ours $METHODS, DDP $([ "$PEER" = 1 ] && echo "$PEER_METHODS" || echo off), $STEPS steps ($WARMUP warm-up)," \
  "delay ${DELAY_MS} ms, ours compute-only: $OURS_COMPUTE, extra flags: ${EXTRA:-none}" >&2
for REP in $(seq "$REPEATS"); do
  echo "# repetition $REP of $REPEATS" >&2
  for net in "${NET_LIST[@]}"; do
    b=$(batch_of "$net")
    echo "# compute-only $net (batch $b per worker), ours and PyTorch's ..." >&2
    netlink_shape none
    if [ "$OURS_COMPUTE" = "exchange none" ]; then
      run_ours - "$net" fp32 "$b" compute
    else
      run_ours_standin "$net" "$b"
    fi
    [ "$PEER" = 1 ] && run_ddp_compute "$net" "$b"
  done
  for rate in "${RATES[@]}"; do
    netlink_shape "$rate" "$DELAY_MS" || tg_die "could not shape the link at $rate"
    if [ "$COMM_BENCH" = 1 ] && [ "$REP" = 1 ]; then
      echo "## comm_bench across the link: rate $rate, delay ${DELAY_MS} ms, load $(cut -d' ' -f1-3 /proc/loadavg)"
      run timeout 1800 "${MPIRUN[@]}" "$COMM" --reps 3 --sizes_mb 1,16,64,256 --late_ms 1000 2>&1 || echo "link_bench.sh: comm_bench failed" >&2
    fi
    for net in "${NET_LIST[@]}"; do
      b=$(batch_of "$net")
      for method in "${METHOD_LIST[@]}"; do
        echo "# $rate $net ours $method (batch $b per worker) ..." >&2
        run_ours "$rate" "$net" "$method" "$b"
      done
      if [ "$PEER" = 1 ]; then
        for method in "${PEER_LIST[@]}"; do
          echo "# $rate $net DDP $method (batch $b per worker) ..." >&2
          run_ddp "$rate" "$net" "$method" "$b"
        done
      fi
    done
  done
done

# ---- the results file and its table -----------------------------------------------------------------------
results_commit "$HEADER" "$TABLE" "$OUT"
python3 "$HERE/../scripts/check_readme_results.py" --render "$OUT" || true

#!/usr/bin/env bash
# link_bench.sh: data-parallel training of 2 workers across an emulated slow link, terngrad against PyTorch
# DDP (gloo), in the same conditions. See bench/README.md, "Emulated link (issue 8)".
#
# Two network namespaces joined by a veth pair (10.77.0.1/24 and 10.77.0.2/24, interface tglink0 in both);
# each direction is shaped at RATE by a token bucket (tbf) on the sending end, optionally behind a netem delay.
# One process per namespace: terngrad-train under mpirun (rank 0 in the first namespace, rank 1 started in
# the second by an rsh agent that runs `ip netns exec`), then bench/ddp_peer.py (one DDP rank per namespace).
# All traffic stays on the veth: the namespaces have nothing else but their loopback.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: bench/link_bench.sh [options] RATE [RATE...]

  RATE             a tc rate (100mbit, 1gbit, 2.5gbit, 10gbit; units bit kbit mbit gbit tbit) or `none`
                   (unshaped veth)
  -b BUILD_DIR     build folder with terngrad-train (default: build)
  -n NETS          comma-separated: lenet, alexnet, resnet50 (default: lenet,alexnet)
  -m METHODS       ours: comma-separated fp32, fp16, terngrad (default: all three)
  -P PEER_METHODS  DDP: comma-separated fp32, fp16, powersgd (default: all three)
  -B BATCHES       per-worker batch per net, e.g. lenet=3584,alexnet=40 (defaults below)
  -s STEPS         steps per run (default 12); the first -w are warm-up, the rest are timed
  -w WARMUP        untimed first steps (default 2)
  -r REPEATS       run the whole matrix this many times, interleaved; the table shows medians (default 1)
  -d DELAY_MS      one-way delay added by netem on each direction (default 0: none)
  -x "FLAGS"       extra terngrad-train flags, passed through (e.g. "--exchange allreduce8")
  -o FILE          also write the raw results as TSV to FILE
  --no-peer        skip the PyTorch DDP runs
  --no-compute     skip the single-worker compute-only baselines
  --comm-bench     also run BUILD_DIR/bench/comm_bench across each link
  -h, --help       this text

Per-worker batches (compute ~1 s/step on 1 thread of the 2-core development machine, measured):
lenet 3584, alexnet 40, resnet50 6. Every run: 1 worker and 1 thread per process, `--benchmark_mode`.
Shaping: tbf rate RATE, burst max(RATE x 1 ms, 128 KiB), latency 5 ms (the queue a switch port would
hold); with -d, `netem delay D ms` is the root qdisc and tbf its child. Needs root, ip, tc, mpirun and
python3 (PyTorch + torchvision for the peer: bench/setup_peers.sh).
EOF
}

die() {
  echo "link_bench.sh: $*" >&2
  exit 1
}

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
OUT=""
PEER=1
COMPUTE=1
COMM_BENCH=0
REPEATS=1
RATES=()
while [ $# -gt 0 ]; do
  case "$1" in
    -h | --help)
      usage
      exit 0
      ;;
    -b | -n | -m | -P | -B | -s | -w | -r | -d | -x | -o)
      [ $# -ge 2 ] || die "$1 needs a value (--help)"
      case "$1" in
        -b) BUILD_DIR=$2 ;;
        -n) NETS=$2 ;;
        -m) METHODS=$2 ;;
        -P) PEER_METHODS=$2 ;;
        -B) BATCHES=$2 ;;
        -s) STEPS=$2 ;;
        -w) WARMUP=$2 ;;
        -r) REPEATS=$2 ;;
        -d) DELAY_MS=$2 ;;
        -x) EXTRA=$2 ;;
        -o) OUT=$2 ;;
      esac
      shift 2
      ;;
    --no-peer)
      PEER=0
      shift
      ;;
    --no-compute)
      COMPUTE=0
      shift
      ;;
    --comm-bench)
      COMM_BENCH=1
      shift
      ;;
    -*) die "unknown option $1 (--help)" ;;
    *)
      RATES+=("$1")
      shift
      ;;
  esac
done

# Refusals first, before anything is created.
[ "$(id -u)" = 0 ] || die "needs root (network namespaces, tc)"
for tool in ip tc mpirun python3; do
  command -v "$tool" >/dev/null 2>&1 || die "needs $tool on PATH"
done
[ ${#RATES[@]} -gt 0 ] || die "no RATE given (e.g. 1gbit or none; --help)"

# tc rate -> bits per second (integer), or "none".
rate_bits() {
  local r=$1 num unit mult
  if [ "$r" = none ]; then
    echo none
    return
  fi
  [[ "$r" =~ ^([0-9]+(\.[0-9]+)?)([kmgt]?)bit$ ]] || return 1
  num=${BASH_REMATCH[1]}
  unit=${BASH_REMATCH[3]}
  case "$unit" in
    "") mult=1 ;;
    k) mult=1000 ;;
    m) mult=1000000 ;;
    g) mult=1000000000 ;;
    t) mult=1000000000000 ;;
  esac
  awk -v n="$num" -v m="$mult" 'BEGIN { v = n * m; if (v < 8000) exit 1; printf "%.0f\n", v }'
}
for r in "${RATES[@]}"; do
  rate_bits "$r" >/dev/null || die "bad rate '$r': expected a tc rate such as 100mbit, 1gbit, 10gbit (>= 8kbit), or none"
done
[[ "$STEPS" =~ ^[0-9]+$ && "$WARMUP" =~ ^[0-9]+$ ]] || die "-s and -w take integers"
[[ "$REPEATS" =~ ^[1-9][0-9]*$ ]] || die "-r takes a positive integer"
[ "$WARMUP" -ge 1 ] || die "-w must be >= 1 (the first step is always a warm-up)"
[ "$STEPS" -ge $((WARMUP + 2)) ] || die "-s $STEPS: need at least 2 timed steps after -w $WARMUP warm-up steps"
[[ "$DELAY_MS" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "-d takes milliseconds (a number)"
TRAIN=$BUILD_DIR/terngrad-train
[ -x "$TRAIN" ] || die "no $TRAIN (build it: cmake --build $BUILD_DIR --target terngrad-train; or pass -b)"
TRAIN=$(cd "$(dirname "$TRAIN")" && pwd)/terngrad-train
COMM=$(cd "$BUILD_DIR" && pwd)/bench/comm_bench
if [ "$COMM_BENCH" = 1 ] && [ ! -x "$COMM" ]; then
  die "--comm-bench: no $COMM (configure with -DTG_BUILD_BENCH=ON and build comm_bench)"
fi
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PYTHON=${PYTHON:-/usr/bin/python3}
IFS=, read -r -a NET_LIST <<<"$NETS"
IFS=, read -r -a METHOD_LIST <<<"$METHODS"
IFS=, read -r -a PEER_LIST <<<"$PEER_METHODS"
read -r -a EXTRA_FLAGS <<<"$EXTRA"
for n in "${NET_LIST[@]}"; do
  case "$n" in lenet | alexnet | resnet50) ;; *) die "unknown net '$n' (lenet, alexnet, resnet50)" ;; esac
done
for m in "${METHOD_LIST[@]}"; do
  case "$m" in fp32 | fp16 | terngrad) ;; *) die "unknown method '$m' (fp32, fp16, terngrad)" ;; esac
done
for m in "${PEER_LIST[@]}"; do
  case "$m" in fp32 | fp16 | powersgd) ;; *) die "unknown peer method '$m' (fp32, fp16, powersgd)" ;; esac
done
if [ "$PEER" = 1 ]; then
  "$PYTHON" -c 'import torch, torchvision, torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null ||
    die "the DDP peer needs PyTorch with gloo and torchvision in $PYTHON (bench/setup_peers.sh), or --no-peer"
fi

batch_of() {
  local net=$1 kv
  for kv in ${BATCHES//,/ }; do
    if [ "${kv%%=*}" = "$net" ]; then
      [[ "${kv#*=}" =~ ^[1-9][0-9]*$ ]] || die "-B $kv: the batch must be a positive integer"
      echo "${kv#*=}"
      return
    fi
  done
  case "$net" in
    lenet) echo 3584 ;;
    alexnet) echo 40 ;;
    resnet50) echo 6 ;;
  esac
}
dataset_of() {
  case "$1" in
    lenet) echo fashion_mnist ;;
    *) echo imagenet ;;
  esac
}

# ---- the emulated link ------------------------------------------------------------------------------------
NS1=tglb$$a
NS2=tglb$$b
IF=tglink0
IP1=10.77.0.1
IP2=10.77.0.2
TMP=$(mktemp -d "/tmp/link_bench.$$.XXXXXX")

ns_exists() { [ -e "/var/run/netns/$1" ]; }

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  local ns pids
  for ns in "$NS1" "$NS2"; do
    ns_exists "$ns" || continue
    # Everything this script started runs inside its namespaces: end those processes, by id.
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    if [ -n "$pids" ]; then
      # shellcheck disable=SC2086
      kill -TERM $pids 2>/dev/null || true
      sleep 1
      pids=$(ip netns pids "$ns" 2>/dev/null || true)
      # shellcheck disable=SC2086
      [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
    fi
    ip netns del "$ns" 2>/dev/null || true
  done
  rm -rf "$TMP"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Long commands run in the background while the script waits: bash runs a trap only once the foreground
# command has finished, but interrupts a `wait` at once.
run() {
  "$@" &
  wait "$!"
}

ip netns add "$NS1"
ip netns add "$NS2"
ip link add "${NS1}x" type veth peer name "${NS2}y"
ip link set "${NS1}x" netns "$NS1"
ip link set "${NS2}y" netns "$NS2"
ip -n "$NS1" link set "${NS1}x" name "$IF"
ip -n "$NS2" link set "${NS2}y" name "$IF"
ip -n "$NS1" addr add "$IP1/24" dev "$IF"
ip -n "$NS2" addr add "$IP2/24" dev "$IF"
for ns in "$NS1" "$NS2"; do
  ip -n "$ns" link set lo up
  ip -n "$ns" link set "$IF" up
done

# Shapes both directions (each end's egress) at $1 (or removes the shaping for `none`).
shape() {
  local rate=$1 bits burst ns
  bits=$(rate_bits "$rate")
  for ns in "$NS1" "$NS2"; do
    tc -n "$ns" qdisc del dev "$IF" root 2>/dev/null || true
    local parent=(root handle 1:)
    if [ "$DELAY_MS" != 0 ]; then
      tc -n "$ns" qdisc add dev "$IF" root handle 1: netem delay "${DELAY_MS}ms" limit 100000 2>/dev/null ||
        die "-d needs the netem qdisc, which this kernel lacks (CONFIG_NET_SCH_NETEM)"
      parent=(parent 1:1 handle 10:)
    fi
    if [ "$bits" != none ]; then
      # burst: 1 ms at the rate, at least 128 KiB (two 64 KiB GSO packets); latency 5 ms of queue.
      burst=$(awk -v b="$bits" 'BEGIN { v = b / 8 / 1000; if (v < 131072) v = 131072; printf "%.0f\n", v }')
      tc -n "$ns" qdisc add dev "$IF" "${parent[@]}" tbf rate "$rate" burst "$burst" latency 5ms
    fi
  done
}

wire() { # rx and tx bytes of rank 0's end of the link
  ip netns exec "$NS1" cat "/sys/class/net/$IF/statistics/rx_bytes" "/sys/class/net/$IF/statistics/tx_bytes" | paste -sd' '
}

# The rsh agent Open MPI starts remote daemons with: `agent [ssh options] HOST COMMAND...`.
AGENT=$TMP/netns_agent.sh
cat >"$AGENT" <<EOF
#!/bin/sh
# link_bench's rsh agent for mpirun: runs the command in the namespace that owns HOST.
while [ \$# -gt 0 ]; do
  case "\$1" in
    -l|-p|-o|-i|-F|-E|-J|-b|-c|-D|-e|-m|-O|-Q|-R|-S|-W|-w|-L) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
[ \$# -ge 2 ] || { echo "link_bench agent: usage: agent [options] host command..." >&2; exit 2; }
host=\$1
shift
case "\$host" in
  $IP1) ns=$NS1 ;;
  $IP2) ns=$NS2 ;;
  *) echo "link_bench agent: unknown host \$host" >&2; exit 2 ;;
esac
exec ip netns exec "\$ns" /bin/sh -c "\$*"
EOF
chmod +x "$AGENT"

# Rank 0 in the first namespace; --bind-to none: both "hosts" are this machine (the default would bind
# both ranks to core 0).
HOSTS="$IP1,$IP2"
MPIRUN=(ip netns exec "$NS1" mpirun --allow-run-as-root -np 2 --host "$HOSTS" --bind-to none
  --mca plm_rsh_agent "$AGENT" --mca btl "tcp,self" --mca btl_tcp_if_include 10.77.0.0/24
  --mca oob_tcp_if_include 10.77.0.0/24)

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

RESULTS=$TMP/results.tsv
printf 'rep\tload1\trate\tmodel\timpl\tmethod\tbatch_per_worker\ttimed_steps\tmedian_s\tbytes_trainer\tpayload_trainer\twire_rx_per_step\twire_tx_per_step\tstatus\n' >"$RESULTS"
REP=1
LOAD=0
record() { # rate model impl method batch steps median bytes payload rx tx status
  local IFS=$'\t'
  echo "$REP$IFS$LOAD$IFS$*" >>"$RESULTS"
}
note_load() { LOAD=$(cut -d' ' -f1 /proc/loadavg); }

RUN=0
fail_log() {
  echo "link_bench.sh: $1 failed; last lines of its log:" >&2
  tail -n 15 "$2" >&2 || true
}

# terngrad-train on 2 processes across the link.
run_ours() {
  local rate=$1 net=$2 method=$3 b=$4 bits clip=()
  case "$method" in
    fp32) bits=32 ;;
    fp16) bits=16 ;;
    terngrad)
      bits=1
      clip=(--clip_factor 2.5)
      ;;
  esac
  RUN=$((RUN + 1))
  note_load
  local dir=$TMP/run$RUN log=$TMP/run$RUN.log
  mkdir -p "$dir"
  ip netns exec "$NS1" python3 "$SAMPLER" "$dir/metrics.jsonl" "$IF" "$WARMUP" "$STEPS" "$dir/wire" $((STEPS * 120 + 300)) &
  local sampler=$!
  local rc=0
  run timeout $((STEPS * 120 + 300)) "${MPIRUN[@]}" "$TRAIN" --benchmark_mode --net "$net" --dataset "$(dataset_of "$net")" \
    --num_nodes 1 --threads 1 --batch_size $((2 * b)) --grad_bits "$bits" "${clip[@]}" --max_steps "$STEPS" \
    --log_every 1 --save_iter 100000000 --metrics_jsonl "$dir/metrics.jsonl" --train_dir "$dir/train" \
    --log_level warn "${EXTRA_FLAGS[@]}" >"$log" 2>&1 || rc=$?
  # The sampler ends on the last step's line; if the run failed, it would wait for its timeout: end it.
  local _
  for _ in $(seq 50); do
    kill -0 "$sampler" 2>/dev/null || break
    sleep 0.1
  done
  kill "$sampler" 2>/dev/null || true
  local wrc=0
  wait "$sampler" || wrc=$?
  local s rx=0 tx=0 n=1
  if [ "$rc" = 0 ] && s=$(metrics_summary "$dir/metrics.jsonl"); then
    [ "$wrc" = 0 ] && read -r rx tx n <"$dir/wire"
    read -r med steps bytes payload <<<"$s"
    record "$rate" "$net" ours "$method" "$b" "$steps" "$med" "$bytes" "$payload" $((rx / n)) $((tx / n)) ok
  else
    fail_log "terngrad-train $net $method at $rate" "$log"
    record "$rate" "$net" ours "$method" "$b" 0 0 0 0 0 0 failed
  fi
  rm -rf "$dir"
}

# PyTorch DDP, one rank per namespace.
run_ddp() {
  local rate=$1 net=$2 method=$3 b=$4
  RUN=$((RUN + 1))
  note_load
  local out=$TMP/ddp$RUN.json log0=$TMP/ddp$RUN.0.log log1=$TMP/ddp$RUN.1.log port=$((29500 + RUN))
  local common=(--net "$net" --batch "$b" --method "$method" --steps $((STEPS - WARMUP)) --warmup "$WARMUP" --iface "$IF")
  local limit=$((STEPS * 300 + 300))
  ip netns exec "$NS2" env MASTER_ADDR="$IP1" MASTER_PORT="$port" RANK=1 WORLD_SIZE=2 GLOO_SOCKET_IFNAME="$IF" \
    timeout "$limit" "$PYTHON" "$HERE/ddp_peer.py" "${common[@]}" >"$log1" 2>&1 &
  local p1=$!
  local rc0=0 rc1=0
  run ip netns exec "$NS1" env MASTER_ADDR="$IP1" MASTER_PORT="$port" RANK=0 WORLD_SIZE=2 GLOO_SOCKET_IFNAME="$IF" \
    timeout "$limit" "$PYTHON" "$HERE/ddp_peer.py" "${common[@]}" --json_out "$out" >"$log0" 2>&1 || rc0=$?
  # Rank 1 would wait for a failed rank 0 until gloo's timeout (30 min): end it.
  [ "$rc0" = 0 ] || kill "$p1" 2>/dev/null || true
  wait "$p1" || rc1=$?
  if [ "$rc0" = 0 ] && [ "$rc1" = 0 ] && [ -s "$out" ]; then
    local med rx tx
    read -r med rx tx < <(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print("%.6f %d %d" % (j["median_s"], j["wire_rx_per_step"], j["wire_tx_per_step"]))' "$out")
    record "$rate" "$net" ddp "$method" "$b" $((STEPS - WARMUP)) "$med" - - "$rx" "$tx" ok
  else
    fail_log "DDP $net $method at $rate (rank 0 exit $rc0, rank 1 exit $rc1)" "$log0"
    tail -n 5 "$log1" >&2 || true
    record "$rate" "$net" ddp "$method" "$b" 0 0 - - 0 0 failed
  fi
}

# One worker, no exchange: the compute a step costs, with one process alone and with two processes at once
# (one per namespace, as the 2-worker runs place them; on 2 cores they share the machine as those do).
run_compute() {
  local net=$1 b=$2 procs=$3
  RUN=$((RUN + 1))
  note_load
  local dir=$TMP/run$RUN rc=0 k pids=()
  mkdir -p "$dir"
  local cmd=("$TRAIN" --benchmark_mode --net "$net" --dataset "$(dataset_of "$net")" --num_nodes 1 --threads 1
    --batch_size "$b" --grad_bits 32 --max_steps "$STEPS" --log_every 1 --save_iter 100000000 --log_level warn
    "${EXTRA_FLAGS[@]}")
  for k in $(seq "$procs"); do
    local ns=$NS1
    [ "$k" = 2 ] && ns=$NS2
    ip netns exec "$ns" "${cmd[@]}" --metrics_jsonl "$dir/metrics$k.jsonl" --train_dir "$dir/train$k" \
      >"$dir/log$k" 2>&1 &
    pids+=("$!")
  done
  for k in "${pids[@]}"; do
    wait "$k" || rc=$?
  done
  local s name="compute only (1 process)"
  [ "$procs" = 2 ] && name="compute only (2 processes at once)"
  if [ "$rc" = 0 ] && s=$(metrics_summary "$dir/metrics1.jsonl"); then
    read -r med steps _ _ <<<"$s"
    record - "$net" compute "$name" "$b" "$steps" "$med" 0 0 0 0 ok
  else
    fail_log "$name $net" "$dir/log1"
    record - "$net" compute "$name" "$b" 0 0 0 0 0 0 failed
  fi
  rm -rf "$dir"
}

# ---- the runs ---------------------------------------------------------------------------------------------
echo "# link_bench: $(date -u '+%Y-%m-%d %H:%M UTC'), terngrad $(git -C "$HERE" rev-parse --short HEAD 2>/dev/null || echo '?')," \
  "$(nproc) cores, ISA $(grep -o 'avx512f\|avx2' /proc/cpuinfo | sort -u | paste -sd' '), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# nets $NETS, ours $METHODS, DDP $([ "$PEER" = 1 ] && echo "$PEER_METHODS" || echo off), $STEPS steps ($WARMUP warm-up)," \
  "delay ${DELAY_MS} ms, extra flags: ${EXTRA:-none}"
for REP in $(seq "$REPEATS"); do
  [ "$REPEATS" = 1 ] || echo "# repetition $REP of $REPEATS" >&2
  if [ "$COMPUTE" = 1 ]; then
    for net in "${NET_LIST[@]}"; do
      echo "# compute-only $net (batch $(batch_of "$net")), 1 and 2 processes ..." >&2
      run_compute "$net" "$(batch_of "$net")" 1
      run_compute "$net" "$(batch_of "$net")" 2
    done
  fi
  for rate in "${RATES[@]}"; do
    shape "$rate"
    if [ "$COMM_BENCH" = 1 ] && [ "$REP" = 1 ]; then
      echo "## comm_bench across the link: rate $rate, delay ${DELAY_MS} ms, load $(cut -d' ' -f1-3 /proc/loadavg)"
      before=$(wire)
      run timeout 1800 "${MPIRUN[@]}" "$COMM" --reps 3 --sizes_mb 1,16,64,256 --late_ms 1000 2>&1 || echo "link_bench.sh: comm_bench failed" >&2
      after=$(wire)
      echo "(rank 0's end of the link: rx+tx $(awk -v a="$before" -v b="$after" 'BEGIN { split(a, x, " "); split(b, y, " "); printf "%.1f MB\n", (y[1] - x[1] + y[2] - x[2]) / 1e6 }'))"
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

# ---- the table --------------------------------------------------------------------------------------------
python3 - "$RESULTS" <<'EOF'
import collections, csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
groups = collections.OrderedDict()
for r in rows:
    groups.setdefault((r["rate"], r["model"], r["impl"], r["method"]), []).append(r)
def med(rs, field):
    v = [float(r[field]) for r in rs if r[field] not in ("-", "")]
    return statistics.median(v) if v else None
ok = {k: [r for r in rs if r["status"] == "ok"] for k, rs in groups.items()}
ref = {(k[0], k[1], k[2]): med(rs, "median_s") for k, rs in ok.items() if k[3] == "fp32" and rs}
print("| rate | model | method | batch/worker | median s/step (runs: min-max) | bytes/step, trainer (moved into a rank) "
      "| bytes/step on the wire (into rank 0) | vs our fp32 | vs DDP fp32 | load avg |")
print("|---|---|---|---|---|---|---|---|---|---|")
for k, rs in groups.items():
    rate, model, impl, method = k
    name = {"ours": "terngrad " + method, "ddp": "DDP " + method}.get(impl, method)
    good = ok[k]
    if not good:
        print("| %s | %s | %s | %s | failed (%d runs) | | | | | |" % (rate, model, name, rs[0]["batch_per_worker"], len(rs)))
        continue
    t = med(good, "median_s")
    times = sorted(float(r["median_s"]) for r in good)
    spread = " (%d: %.3f-%.3f)" % (len(times), times[0], times[-1]) if len(times) > 1 else ""
    fails = " (%d failed)" % (len(rs) - len(good)) if len(rs) > len(good) else ""
    def up(other):
        x = ref.get((rate, model, other))
        return "%.2fx" % (x / t) if x and impl != "compute" else "-"
    trainer = "%.2f MB" % (med(good, "bytes_trainer") / 1e6) if impl == "ours" else "-"
    wire = "%.2f MB" % (med(good, "wire_rx_per_step") / 1e6) if impl != "compute" else "-"
    print("| %s | %s | %s | %s | %.3f%s%s | %s | %s | %s | %s | %.1f |" % (rate, model, name, good[0]["batch_per_worker"], t,
          spread, fails, trainer, wire, up("ours"), up("ddp"), med(good, "load1")))
EOF
if [ -n "$OUT" ]; then
  cp "$RESULTS" "$OUT"
  echo "raw results: $OUT"
fi

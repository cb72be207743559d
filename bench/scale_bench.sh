#!/usr/bin/env bash
# scale_bench.sh: data-parallel training over up to 8 emulated machines (network namespaces on one bridge, each
# with its own shaped link), P processes per machine and R --cpu_replicas per process, for every exchange of
# terngrad-train and PyTorch DDP (gloo) in the same namespaces, with each layout's compute-only step
# (--exchange none; DDP without communication) under the same CPU contention. See bench/README.md, "Scaling".
set -euo pipefail

usage() {
  cat <<'EOF'
usage: bench/scale_bench.sh [options] RATE [RATE...]

  RATE             a tc rate per machine (100mbit, 1gbit, 10gbit) or `none`
  -b BUILD_DIR     build folder with terngrad-train (default: build)
  -n NETS          comma-separated: lenet, alexnet (default: alexnet)
  -L LAYOUTS       comma-separated MxPxR: M machines, P processes each, R CPU replicas per process
                   (default: 2x1x1,2x2x1,4x2x1)
  -e EXCHANGES     comma-separated: fp32, fp16, allgather2, allgather2_ef (with --error_feedback),
                   allgather2_df (--decode_in_update=false: the average decoded into the gradient first),
                   allgather2_serial (--overlap=false: everything exchanged after backward), allreduce8,
                   hierarchical, hierarchical16 (with --local_bits 16), ddp (default: all but allgather2_ef,
                   allgather2_df, allgather2_serial and hierarchical16); the compute-only runs (ours: --exchange
                   none; DDP: --method none) always run
  -B BATCHES       per-worker batch per net, e.g. lenet=512,alexnet=8 (default: lenet=512, alexnet=8)
  -s STEPS         steps per run (default 8); the first -w are warm-up, the rest are timed
  -w WARMUP        untimed first steps (default 2)
  -r REPEATS       run the whole matrix this many times, interleaved; the table shows medians (default 3)
  -d DELAY_MS      one-way delay on every machine's link (netem; default 0)
  -o FILE          the results file (default bench/results/scale.tsv; provenance lines, then the raw table)
  -E NAME=VALUE    an environment variable for every process of ours (mpirun -x; repeatable), e.g.
                   TG_MPI_POLL_CAP_US=1000 to try another wait back-off
  --no-pin         leave placement to the OS (default: process g of the job on core g mod cores, its threads
                   there too; ours and DDP alike)
  -h, --help       this text

Every rank computes with 1 thread (R replicas: R threads per process); --benchmark_mode input. Per row: s/step
(median of the timed steps of process 0), the same layout's compute-only s/step, the link overhead (their
difference), bytes per step inside and between nodes (terngrad's counters, process 0's ranks), the bytes that
crossed machine 1's link per step (its veth counters, warm-up included, divided by the steps) and phase times
(the compute thread's, forward_backward_ms and optimizer_ms among them: with --decode_in_update the ternary
decode is inside optimizer_ms; comm_cpu_ms: the CPU time the collectives used per step, which a process with no
spare core pays out of its compute).
Needs root, ip, tc, mpirun, python3 (PyTorch for the DDP rows: bench/setup_peers.sh).
EOF
}

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib/bench.sh
source "$HERE/lib/bench.sh" # tg_die, results_*, bench_options
# shellcheck source=lib/netns_link.sh
source "$HERE/lib/netns_link.sh"
# shellcheck source=lib/scratch.sh
source "$HERE/lib/scratch.sh"

BUILD_DIR=build
NETS=alexnet
LAYOUTS=2x1x1,2x2x1,4x2x1
EXCHANGES=fp32,fp16,allgather2,allreduce8,hierarchical,ddp
BATCHES=""
STEPS=8
WARMUP=2
REPEATS=3
DELAY_MS=0
OUT=""
PIN=1
OUR_ENV=()
RATES=()
our_env() { # -E NAME=VALUE: mpirun -x NAME=VALUE for every process of ours
  [ $# -ge 1 ] || tg_die "-E needs NAME=VALUE (--help)"
  [[ "$1" =~ ^[A-Za-z_][A-Za-z0-9_]*=.*$ ]] || tg_die "-E $1: expected NAME=VALUE"
  OUR_ENV+=(-x "$1")
}
bench_options -b=BUILD_DIR -n=NETS -L=LAYOUTS -e=EXCHANGES -B=BATCHES -s=STEPS -w=WARMUP -r=REPEATS -d=DELAY_MS \
  -o=OUT "-E=our_env()" --no-pin:PIN=0 @RATES -- "$@"

# ---- refusals, before anything is created --------------------------------------------------------------------
bench_link_refusals "ip tc mpirun python3 taskset" 1gbit "100mbit, 1gbit, 10gbit" "${RATES[@]}"
[[ "$STEPS" =~ ^[0-9]+$ && "$WARMUP" =~ ^[1-9][0-9]*$ ]] || tg_die "-s and -w take integers (-w >= 1)"
[ "$STEPS" -ge $((WARMUP + 2)) ] || tg_die "-s $STEPS: need at least 2 timed steps after -w $WARMUP warm-up steps"
[[ "$REPEATS" =~ ^[1-9][0-9]*$ ]] || tg_die "-r takes a positive integer"
[[ "$DELAY_MS" =~ ^[0-9]+(\.[0-9]+)?$ ]] || tg_die "-d takes milliseconds"
TRAIN=$BUILD_DIR/terngrad-train
[ -x "$TRAIN" ] || tg_die "no $TRAIN (build it, or pass -b)"
TRAIN=$(cd "$(dirname "$TRAIN")" && pwd)/terngrad-train
IFS=, read -r -a NET_LIST <<<"$NETS"
IFS=, read -r -a LAYOUT_LIST <<<"$LAYOUTS"
IFS=, read -r -a EXCHANGE_LIST <<<"$EXCHANGES"
MAX_NODES=1
for l in "${LAYOUT_LIST[@]}"; do
  [[ "$l" =~ ^([1-8])x([1-9][0-9]*)x([1-9][0-9]*)$ ]] || tg_die "layout '$l' is not MxPxR with M in 1..8"
  [ "${BASH_REMATCH[1]}" -le "$MAX_NODES" ] || MAX_NODES=${BASH_REMATCH[1]}
done
for n in "${NET_LIST[@]}"; do
  case "$n" in lenet | alexnet) ;; *) tg_die "unknown net '$n' (lenet, alexnet)" ;; esac
done
# Ours (ours() below turns each into terngrad-train flags), then the peer.
KNOWN_EXCHANGES=(fp32 fp16 allgather2 allgather2_ef allgather2_df allgather2_serial allreduce8 hierarchical
  hierarchical16 ddp)
PEER=0
for e in "${EXCHANGE_LIST[@]}"; do
  [[ " ${KNOWN_EXCHANGES[*]} " == *" $e "* ]] || tg_die "unknown exchange '$e' (${KNOWN_EXCHANGES[*]})"
  if [ "$e" = ddp ]; then PEER=1; fi
done
# shellcheck source=lib/peer_python.sh
source "$HERE/lib/peer_python.sh"
PYTHON=$(peer_python)  # PyPI's PyTorch by default; TG_PEER=debian: Debian's 1.13
PEER_OK=1
if [ "$PEER" = 1 ] && ! "$PYTHON" -c 'import torch, torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null; then
  PEER_OK=0
  echo "scale_bench.sh: PyTorch with gloo is missing in $PYTHON: the DDP rows say so (bench/setup_peers.sh)" >&2
fi

declare -A DEFAULT_BATCH=([lenet]=512 [alexnet]=8)
batch_of() { bench_batch "$1" "${DEFAULT_BATCH[$1]:-}"; }
dataset_of() { if [ "$1" = lenet ]; then echo fashion_mnist; else echo imagenet; fi; }

CORES=$(nproc --all)
[ -n "$OUT" ] || OUT=$HERE/results/scale.tsv
FAILED_LOGS=${OUT%.tsv}.failed-logs  # the logs of failed runs, kept for diagnosis
bench_scratch scale_bench
note_of() { # "failed:why_it_failed" -> "why it failed"; "ok" -> ""
  case "$1" in *:*) echo "${1#*:}" | tr '_' ' ' ;; *) echo "" ;; esac
}

netlink_create "tgsb$$" "$MAX_NODES"
AGENT=$TMP/agent.sh
netlink_mpi_agent "$AGENT"

# The pinning both systems get: process g of a job (its MPI or DDP rank) on cores [g*c, (g+1)*c) mod cores, c =
# its threads; more processes than cores share them round-robin.
PINNER=$TMP/pin.sh
cat >"$PINNER" <<EOF
#!/bin/sh
# scale_bench's placement: runs the command on the cores of its rank (OMPI_COMM_WORLD_RANK or RANK).
g=\${OMPI_COMM_WORLD_RANK:-\${RANK:-0}}
c=\${TG_PIN_THREADS:-1}
first=\$(( (g * c) % $CORES ))
last=\$(( first + c - 1 ))
[ \$last -lt $CORES ] || last=$((CORES - 1))
export OMP_PROC_BIND=close OMP_PLACES=cores
if [ "$PIN" = 1 ]; then exec taskset -c "\$first-\$last" "\$@"; fi
exec "\$@"
EOF
chmod +x "$PINNER"

# ---- one run of ours -----------------------------------------------------------------------------------------
# ours NET EXCHANGE M P R RATE -> "step_s sc en comm_blocked in_flight comm_cpu de fb opt intra inter veth params status"
ours() {
  local net=$1 ex=$2 m=$3 p=$4 r=$5 hosts="" k bits=1 exflag
  for k in $(seq "$m"); do hosts+="${hosts:+,}$(netlink_ip "$k"):$p"; done
  local extra=()
  case "$ex" in
    fp32) bits=32 exflag=auto ;;
    fp16) bits=16 exflag=auto ;;
    allgather2_ef) exflag=allgather2 extra=(--error_feedback) ;;
    allgather2_df) exflag=allgather2 extra=(--decode_in_update=false) ;;
    allgather2_serial) exflag=allgather2 extra=(--overlap=false) ;;
    hierarchical16) exflag=hierarchical extra=(--local_bits 16) ;;
    *) exflag=$ex ;;
  esac
  local workers=$((m * p * r)) batch
  batch=$(($(batch_of "$net") * workers))
  local metrics=$TMP/metrics.jsonl dir=$TMP/train log=$TMP/train.log before after
  # A launch can fail for reasons outside the run (an orted dying in hwloc's shared-memory setup was seen with
  # four "hosts" on one machine): such a run is retried once, and its log kept either way.
  local attempt ok=0
  for attempt in 1 2; do
    rm -rf "$metrics" "$dir"
    before=$(netlink_wire 1)
    if run ip netns exec "$(netlink_ns 1)" mpirun --allow-run-as-root -np $((m * p)) --host "$hosts" --bind-to none \
      --mca rtc ^hwloc --mca plm_rsh_agent "$AGENT" --mca btl "tcp,self,vader" --mca btl_tcp_if_include "$NETLINK_SUBNET" \
      --mca oob_tcp_if_include "$NETLINK_SUBNET" -x TG_PIN_THREADS="$r" "${OUR_ENV[@]}" \
      "$PINNER" "$TRAIN" --benchmark_mode --dataset "$(dataset_of "$net")" --net "$net" --batch_size "$batch" \
      --num_nodes "$r" --cpu_replicas "$r" --threads "$r" --ranks_per_node $((p * r)) --grad_bits "$bits" \
      --clip_factor 2.5 --exchange "$exflag" --max_steps "$STEPS" --log_every 1 --save_iter 1000000 \
      --metrics_jsonl "$metrics" --train_dir "$dir" "${extra[@]}" >"$log" 2>&1; then
      ok=1
      break
    fi
    mkdir -p "$FAILED_LOGS"
    cp "$log" "$FAILED_LOGS/$net-$ex-${m}x${p}x$r-try$attempt-$(date +%s).log"
  done
  if [ "$ok" = 0 ]; then
    echo "- - - - - - - - - - - - - failed:$(grep -v "^-*$" "$log" | grep -m1 -iE "error|not enough|abort|fail" | tr ' \t' '__' | cut -c1-100)"
    return
  fi
  after=$(netlink_wire 1)
  local params
  params=$(grep -o 'net [a-z0-9_]* ([0-9]* parameters)' "$log" | head -1 | tr -dc '0-9 ' | awk '{print $NF}')
  "$PYTHON" - "$metrics" "$WARMUP" "$STEPS" "$before" "$after" "${params:-0}" <<'EOF'
import json, statistics, sys
path, warmup, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
b, a = [int(x) for x in sys.argv[4].split()], [int(x) for x in sys.argv[5].split()]
lines = [json.loads(l) for l in open(path) if l.strip()]
timed = [l for l in lines if "step" in l and l["step"] > warmup]
med = statistics.median(l["sec_per_batch"] for l in timed)
mean = lambda k: 1000 * sum(l["time"][k] for l in timed) / len(timed)
veth = ((a[0] - b[0]) + (a[1] - b[1])) / steps
last = timed[-1]
print("%.4f %.1f %.1f %.1f %.1f %.1f %.1f %.1f %.1f %d %d %.0f %s ok" % (med, mean("scalers"), mean("encode"),
      mean("comm_blocked"), mean("comm_in_flight"), mean("comm_cpu"), mean("decode"), mean("forward_backward"),
      mean("optimizer_ema"), last["intra_node_bytes"],
      last["inter_node_bytes"], veth, sys.argv[6]))
EOF
}

# ddp NET METHOD M P -> the same fields (no phase times or counters); METHOD fp32 or none.
ddp() {
  local net=$1 method=$2 m=$3 p=$4 k g=0 pids=() before after json=$TMP/ddp.json
  rm -f "$json"
  [ "$PEER_OK" = 1 ] || {
    echo "- - - - - - - - - - - - - missing:PyTorch_with_gloo"
    return
  }
  before=$(netlink_wire 1)
  for k in $(seq "$m"); do
    for _ in $(seq "$p"); do
      local extra=()
      [ "$g" = 0 ] && extra=(--json_out "$json")
      ip netns exec "$(netlink_ns "$k")" env MASTER_ADDR="$(netlink_ip 1)" MASTER_PORT=29541 RANK=$g \
        WORLD_SIZE=$((m * p)) GLOO_SOCKET_IFNAME="$NETLINK_IF" OMP_NUM_THREADS=1 TG_PIN_THREADS=1 \
        "$PINNER" "$PYTHON" "$HERE/ddp_peer.py" --net "$net" --batch "$(batch_of "$net")" --method "$method" \
        --steps $((STEPS - WARMUP)) --warmup "$WARMUP" --iface "$NETLINK_IF" "${extra[@]}" >"$TMP/ddp_$g.log" 2>&1 &
      pids+=($!)
      g=$((g + 1))
    done
  done
  local ok=1 pid
  for pid in "${pids[@]}"; do wait "$pid" || ok=0; done
  after=$(netlink_wire 1)
  if [ "$ok" = 0 ] || [ ! -s "$json" ]; then
    echo "- - - - - - - - - - - - - failed:$(tail -1 "$TMP/ddp_0.log" | tr ' \t' '__' | cut -c1-80)"
    return
  fi
  "$PYTHON" - "$json" "$STEPS" "$before" "$after" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
b, a = [int(x) for x in sys.argv[3].split()], [int(x) for x in sys.argv[4].split()]
veth = ((a[0] - b[0]) + (a[1] - b[1])) / int(sys.argv[2])
print("%.4f - - - - - - - - - - %.0f %d ok" % (d["median_s"], veth, d.get("params", 0)))
EOF
}

# ---- the matrix ----------------------------------------------------------------------------------------------
HEADER=$TMP/header
TABLE=$TMP/table
results_header scale "$BUILD_DIR" "$0" "${ARGS[@]}" >"$HEADER"
peer_header_line "$PYTHON" >>"$HEADER"
echo "# options: steps $STEPS, warm-up $WARMUP, repeats $REPEATS, pin $PIN, delay ${DELAY_MS} ms" >>"$HEADER"
printf '%s\n' "rep	net	exchange	nodes	procs_per_node	replicas	ranks_per_node	rate	batch_per_worker	params	step_s	compute_s	overhead_s	step_over_compute	scalers_ms	encode_ms	comm_blocked_ms	comm_in_flight_ms	comm_cpu_ms	decode_ms	forward_backward_ms	optimizer_ms	intra_node_bytes	inter_node_bytes	machine1_link_bytes_per_step	status	note" >"$TABLE"
row() { # fields...: appends a TSV row
  local IFS=$'\t'
  echo "$*" >>"$TABLE"
}
for rep in $(seq "$REPEATS"); do
  for rate in "${RATES[@]}"; do
    netlink_shape "$rate" "$DELAY_MS" || tg_die "cannot shape the links at $rate"
    for net in "${NET_LIST[@]}"; do
      for layout in "${LAYOUT_LIST[@]}"; do
        IFS=x read -r m p r <<<"$layout"
        base=(row "$rep" "$net")
        none_fields=$(ours "$net" none "$m" "$p" "$r")
        read -r comp _ <<<"$none_fields"
        for ex in none "${EXCHANGE_LIST[@]}"; do
          [ "$ex" != ddp ] || continue
          if [ "$ex" = none ]; then
            fields=$none_fields
          else
            fields=$(ours "$net" "$ex" "$m" "$p" "$r")
          fi
          read -r step sc en cb cf cc de fb opt intra inter veth params status <<<"$fields"
          over=$(awk -v s="$step" -v c="$comp" 'BEGIN { if (s == "-" || c == "-") print "-"; else printf "%.4f", s - c }')
          ratio=$(awk -v s="$step" -v c="$comp" 'BEGIN { if (s == "-" || c == "-") print "-"; else printf "%.3f", s / c }')
          "${base[@]}" "$ex" "$m" "$p" "$r" $((p * r)) "$rate" "$(batch_of "$net")" "$params" "$step" "$comp" "$over" \
            "$ratio" "$sc" "$en" "$cb" "$cf" "$cc" "$de" "$fb" "$opt" "$intra" "$inter" "$veth" "${status%%:*}" "$(note_of "$status")"
          echo "scale_bench: $net $layout $rate $ex: $step s/step (compute-only $comp, $status)" >&2
        done
        if [ "$PEER" = 1 ] && [ "$r" = 1 ]; then
          ddp_none=$(ddp "$net" none "$m" "$p")
          read -r dcomp _ <<<"$ddp_none"
          for method in none fp32; do
            fields=$ddp_none
            [ "$method" = none ] || fields=$(ddp "$net" "$method" "$m" "$p")
            read -r step _ _ _ _ _ _ _ _ _ _ veth params status <<<"$fields"
            over=$(awk -v s="$step" -v c="$dcomp" 'BEGIN { if (s == "-" || c == "-") print "-"; else printf "%.4f", s - c }')
            ratio=$(awk -v s="$step" -v c="$dcomp" 'BEGIN { if (s == "-" || c == "-") print "-"; else printf "%.3f", s / c }')
            "${base[@]}" "ddp_$method" "$m" "$p" 1 "$p" "$rate" "$(batch_of "$net")" "$params" "$step" "$dcomp" "$over" \
              "$ratio" - - - - - - - - - - "$veth" "${status%%:*}" "$(note_of "$status")"
            echo "scale_bench: $net $layout $rate ddp $method: $step s/step (compute-only $dcomp, $status)" >&2
          done
        fi
      done
    done
  done
done
results_commit "$HEADER" "$TABLE" "$OUT"
"$PYTHON" "$HERE/../scripts/check_readme_results.py" --render "$OUT"

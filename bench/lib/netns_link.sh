# netns_link.sh: N emulated machines on one switch, for the link benchmarks (bench/link_bench.sh; a scale
# benchmark of up to 8 nodes uses the same calls). Sourced; needs root, ip and tc.
#
# Node k (1..N) is the network namespace `${NETLINK_PREFIX}k` with one interface `tglink0`, address 10.77.0.k/24,
# and its loopback; nothing else, so no traffic can leave. The switch is a bridge `tgbr0` in its own namespace
# `${NETLINK_PREFIX}h`, joined to every node by a veth pair (`tgp<k>` on the switch's side). Shaping at RATE
# (netlink_shape) acts on both directions of every node's port, as a NIC of that rate would: the node's
# egress on tglink0 (its upload) and the switch port's egress (its download), each a token bucket (tbf rate
# RATE, burst max(RATE x 1 ms, 128 KiB): the kernel timer and 64 KiB GSO packets; latency 5 ms: the queue a
# switch port holds), behind a netem delay when one is asked for.
#
#   netlink_create PREFIX N [AGENT] the namespaces, bridge and veths (call netlink_destroy on exit); with AGENT,
#                                   netlink_mpi_agent AGENT too
#   netlink_shape RATE [DELAY_MS]   RATE: a tc rate (100mbit, 1gbit, ...) or `none` (unshaped veths)
#   netlink_ns K / netlink_ip K     node k's namespace / address
#   netlink_hosts M                 the first M nodes' addresses, comma-separated (mpirun --host)
#   netlink_wire K                  node k's "rx_bytes tx_bytes" on tglink0
#   netlink_mpi_agent FILE [detach] writes an rsh agent for mpirun (--mca plm_rsh_agent FILE) that runs a
#                                   command in the namespace owning the host address it is given; `detach`: in a
#                                   session of its own, as on a machine reached by ssh (a signal to mpirun's
#                                   process group does not reach it; mpirun's end does, through its connection)
#   netlink_mpirun M                sets NETLINK_MPIRUN to the start of a command line: mpirun, from node 1, of one
#                                   process on each of the first M nodes through the last agent written, unbound
#                                   (--bind-to none: every "host" is this machine), its traffic on the emulated link
#   netlink_destroy                 ends every process inside the namespaces (by id), deletes them
#   netlink_rate_bits RATE          RATE in bits/s, `none`, or status 1 for a malformed rate
# shellcheck shell=bash

NETLINK_PREFIX=""
NETLINK_NODES=0
NETLINK_IF=tglink0
NETLINK_AGENT=""
export NETLINK_SUBNET=10.77.0.0/24  # for mpirun's btl/oob_tcp_if_include

netlink_ns() { echo "${NETLINK_PREFIX}$1"; }
netlink_ip() { echo "10.77.0.$1"; }
netlink_hub() { echo "${NETLINK_PREFIX}h"; }
netlink_hosts() {
  local k h=()
  for k in $(seq "$1"); do h+=("$(netlink_ip "$k")"); done
  (
    IFS=,
    echo "${h[*]}"
  )
}

netlink_rate_bits() {
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

netlink_create() {
  local k ns hub
  NETLINK_PREFIX=$1
  NETLINK_NODES=$2
  [[ "$NETLINK_NODES" =~ ^[1-9][0-9]*$ && "$NETLINK_NODES" -le 200 ]] || {
    echo "netns_link: node count '$NETLINK_NODES' is not in 1..200" >&2
    return 1
  }
  hub=$(netlink_hub)
  ip netns add "$hub"
  ip -n "$hub" link set lo up
  ip -n "$hub" link add tgbr0 type bridge
  ip -n "$hub" link set tgbr0 up
  for k in $(seq "$NETLINK_NODES"); do
    ns=$(netlink_ns "$k")
    ip netns add "$ns"
    ip -n "$hub" link add "tgp$k" type veth peer name "tgn$k"
    ip -n "$hub" link set "tgn$k" netns "$ns"
    ip -n "$ns" link set "tgn$k" name "$NETLINK_IF"
    ip -n "$hub" link set "tgp$k" master tgbr0
    ip -n "$hub" link set "tgp$k" up
    ip -n "$ns" addr add "$(netlink_ip "$k")/24" dev "$NETLINK_IF"
    ip -n "$ns" link set lo up
    ip -n "$ns" link set "$NETLINK_IF" up
  done || return
  [ -z "${3:-}" ] || netlink_mpi_agent "$3"
}

# Shapes one device's egress ($1 namespace, $2 device) at $3 (bits/s or none) behind a delay of $4 ms.
netlink_shape_dev() {
  local ns=$1 dev=$2 rate=$3 bits=$4 delay=$5 burst parent=(root handle 1:)
  tc -n "$ns" qdisc del dev "$dev" root 2>/dev/null || true
  if [ "$delay" != 0 ]; then
    tc -n "$ns" qdisc add dev "$dev" root handle 1: netem delay "${delay}ms" limit 100000 2>/dev/null || {
      echo "netns_link: a delay needs the netem qdisc, which this kernel lacks (CONFIG_NET_SCH_NETEM)" >&2
      return 1
    }
    parent=(parent 1:1 handle 10:)
  fi
  if [ "$bits" != none ]; then
    burst=$(awk -v b="$bits" 'BEGIN { v = b / 8 / 1000; if (v < 131072) v = 131072; printf "%.0f\n", v }')
    tc -n "$ns" qdisc add dev "$dev" "${parent[@]}" tbf rate "$rate" burst "$burst" latency 5ms
  fi
}

netlink_shape() {
  local rate=$1 delay=${2:-0} bits k
  bits=$(netlink_rate_bits "$rate") || {
    echo "netns_link: bad rate '$rate': expected a tc rate such as 100mbit, 1gbit, 10gbit (>= 8kbit), or none" >&2
    return 1
  }
  for k in $(seq "$NETLINK_NODES"); do
    netlink_shape_dev "$(netlink_ns "$k")" "$NETLINK_IF" "$rate" "$bits" "$delay" || return 1
    netlink_shape_dev "$(netlink_hub)" "tgp$k" "$rate" "$bits" "$delay" || return 1
  done
}

netlink_wire() {
  ip netns exec "$(netlink_ns "$1")" cat "/sys/class/net/$NETLINK_IF/statistics/rx_bytes" \
    "/sys/class/net/$NETLINK_IF/statistics/tx_bytes" | paste -sd' ' -
}

netlink_mpi_agent() {
  local file=$1 k cases="" detach=""
  NETLINK_AGENT=$file
  [ "${2:-}" = detach ] && detach="setsid "
  for k in $(seq "$NETLINK_NODES"); do cases+="  $(netlink_ip "$k")) ns=$(netlink_ns "$k") ;;"$'\n'; done
  cat >"$file" <<EOF
#!/bin/sh
# The rsh agent of mpirun for emulated machines (bench/lib/netns_link.sh): runs the command in the namespace
# that owns HOST. Usage: agent [ssh options] HOST COMMAND...
while [ \$# -gt 0 ]; do
  case "\$1" in
    -l|-p|-o|-i|-F|-E|-J|-b|-c|-D|-e|-m|-O|-Q|-R|-S|-W|-w|-L) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
[ \$# -ge 2 ] || { echo "netns_link agent: usage: agent [options] host command..." >&2; exit 2; }
host=\$1
shift
case "\$host" in
$cases  *) echo "netns_link agent: unknown host \$host" >&2; exit 2 ;;
esac
# The machines share this kernel's /dev/shm, /tmp and host name: Open MPI's shared-memory segments (vader) of
# processes with the same local rank on two machines would take the same file names, and so would the session
# folders (/tmp/ompi.HOST.UID/pid.N) where each machine's daemon keeps PMIx's shared-memory store (a daemon of one
# machine then failed with "PMIX ERROR ... dstore_base.c" and the job never started). Each machine gets its own
# folders, as a real one has, and PMIx keeps its store in the daemon's memory (gds hash), where a killed job
# leaves nothing behind.
mkdir -p "/dev/shm/\$ns" "/tmp/\$ns"
export OMPI_MCA_btl_vader_backing_directory="/dev/shm/\$ns" TMPDIR="/tmp/\$ns" PMIX_MCA_gds=hash
exec ${detach}ip netns exec "\$ns" /bin/sh -c "\$*"
EOF
  chmod +x "$file"
}

netlink_mpirun() {
  # shellcheck disable=SC2034 # read by the caller
  NETLINK_MPIRUN=(ip netns exec "$(netlink_ns 1)" mpirun --allow-run-as-root -np "$1" --host "$(netlink_hosts "$1")"
    --bind-to none --mca plm_rsh_agent "$NETLINK_AGENT" --mca btl "tcp,self" --mca btl_tcp_if_include "$NETLINK_SUBNET"
    --mca oob_tcp_if_include "$NETLINK_SUBNET")
}

netlink_destroy() {
  local k ns pids all=()
  [ -n "$NETLINK_PREFIX" ] || return 0
  for k in $(seq "$NETLINK_NODES"); do all+=("$(netlink_ns "$k")"); done
  all+=("$(netlink_hub)")
  for ns in "${all[@]}"; do
    [ -e "/var/run/netns/$ns" ] || continue
    # Everything the benchmark started runs inside its namespaces: end those processes, by id.
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
    rm -rf "/dev/shm/$ns" "/tmp/$ns"
  done
  NETLINK_PREFIX=""
}

# rank_pinning.sh: the pinning of a benchmark's processes, one core each, that ours and the peer get alike
# (sourced). The caller sets PIN (1: pin; 0, --no-pin: leave the processes anywhere) and CORES.
#   pin K COMMAND...          runs COMMAND on core K mod CORES (process K, 0-based)
#   write_rank_pinner FILE    writes FILE, a script that runs its arguments on core (MPI rank mod CORES), for
#                             mpirun to start each rank through
# shellcheck shell=bash

pin() {
  local k=$1
  shift
  if [ "$PIN" = 1 ]; then taskset -c $((k % CORES)) "$@"; else "$@"; fi
}

write_rank_pinner() {
  cat >"$1" <<EOF
#!/bin/sh
# Pins an MPI rank to core (rank mod $CORES), then runs the command.
[ "$PIN" = 1 ] || exec "\$@"
exec taskset -c \$((OMPI_COMM_WORLD_RANK % $CORES)) "\$@"
EOF
  chmod +x "$1"
}

// This process's place among the processes an MPI launcher started on its host, from the launcher's environment
// (Open MPI, MPICH / Intel MPI, MVAPICH, Slurm): its index (0 when not launched by one) and how many there are (1).
#pragma once

namespace tg {

int host_local_rank();
int host_local_size();

}  // namespace tg

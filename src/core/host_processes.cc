// The launchers' variables for a process's local rank and the local process count.
#include "terngrad/core/host_processes.h"

#include <algorithm>
#include <cstdlib>

namespace tg {

namespace {
int first_set(std::initializer_list<const char*> vars, int otherwise) {
  for (const char* var : vars)
    if (const char* v = std::getenv(var)) return std::atoi(v);
  return otherwise;
}
}  // namespace

int host_local_rank() {
  return std::max(
      0, first_set({"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "MV2_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}, 0));
}

int host_local_size() {
  return std::max(1, first_set({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "MV2_COMM_WORLD_LOCAL_SIZE",
                                "SLURM_NTASKS_PER_NODE"},
                               1));
}

}  // namespace tg

// Whether this process was started by an MPI launcher: the communicators (MPI is started only then) and the
// logging (no colour codes in the files a launcher collects the ranks' output into) ask it.
#pragma once

namespace tg {

// True when OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK is set (Open MPI, MPICH / Intel MPI, PMIx launchers).
bool launched_by_mpi();

}  // namespace tg

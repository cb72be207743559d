// Running a GoogleTest test on several MPI processes from a plain ctest run: the test re-launches its own
// binary under `mpirun --allow-run-as-root --oversubscribe -np N` with a filter naming itself and checks that
// every rank ran and passed it; under mpirun (launched_by_mpi()) the test body runs on every rank. Without an
// mpirun on PATH the test reports SKIPPED. The test binary's main() is run_all_tests_under_mpi_if_launched.
#pragma once

namespace tg::testing_mpi {

extern bool g_under_mpi;  // this process was started by mpirun (set by main)

// Runs the current test on `ranks` MPI processes and checks that every rank ran it and passed (GoogleTest
// failures are recorded in the current test; a missing mpirun is a GTEST_SKIP).
void launch_current_test_under_mpirun(int ranks);

// main() of such a test binary: sets g_under_mpi, initialises MPI when launched by mpirun (MpiEnvironment),
// runs every test, finalises MPI.
int run_all_tests_under_mpi_if_launched(int argc, char** argv);

}  // namespace tg::testing_mpi

// At the top of a test body: outside mpirun, launch this test on n ranks and return; under mpirun, go on.
#define TG_RUN_ON_N_MPI_RANKS(n)                              \
  do {                                                        \
    if (!::tg::testing_mpi::g_under_mpi) {                    \
      ::tg::testing_mpi::launch_current_test_under_mpirun(n); \
      return;                                                 \
    }                                                         \
  } while (0)

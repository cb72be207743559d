// The CPU threads a process may use when told "all cores" (--threads 0): OMP_NUM_THREADS when it is set (its
// first number), else the CPUs of the process's affinity mask (taskset, mpirun's binding, a cgroup's cpuset),
// else the machine's hardware threads; at least 1.
#pragma once

namespace tg {

int available_cores();

}  // namespace tg

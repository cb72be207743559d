// MachineLoad: how busy this machine is with other work when a run starts (the cores busy over a short window of
// /proc/stat, beside the load average and the runnable threads), and the --threads a CPU run should try beside it.
// The window, not the load average, decides: the load average still counts a run that just ended (the previous of
// two runs in a row) for a minute. A compute team of more threads than the cores
// left free loses far more than the share it takes: an OpenMP thread that waits at a barrier for a descheduled peer
// waits a whole time slice (on 2 cores with one busy process beside it, LeNet ran 5-11x slower at 2 threads than
// at 1). The trainer says so once at the start of a CPU run (warn_if_machine_is_busy).
#pragma once

#include <optional>
#include <string>

namespace tg {

struct MachineLoad {
  double busy = 0;   // cores busy (not idle nor waiting for I/O) over the window, less this process's own CPU time
  double load1 = 0;  // the 1-minute load average (said, not used)
  int cores = 0;     // the machine's online CPUs
};

// From /proc/stat read twice `window_s` apart and /proc/loadavg; nullopt where they cannot be read (not Linux). The
// calling thread sleeps through the window; what the process's other threads used meanwhile is not counted.
std::optional<MachineLoad> read_machine_load(double window_s = 0.2);
// The parse of /proc/loadavg's text ("0.52 0.58 0.59 3/412 12345").
std::optional<double> parse_load1(const std::string& loadavg);
// /proc/stat's aggregate "cpu" line: {total, idle (idle + iowait)} jiffies.
struct CpuTimes {
  unsigned long long total = 0, idle = 0;
};
std::optional<CpuTimes> parse_cpu_times(const std::string& stat);
// The cores busy between two readings of `cores` CPUs.
double busy_between(const CpuTimes& a, const CpuTimes& b, int cores);

// The cores other work keeps busy.
double busy_cores(const MachineLoad& m);
// The threads a run of `threads` per process x `processes` on this machine should try: the cores the other work
// leaves free, divided among the processes, at least 1; `threads` itself when they fit.
int threads_to_try(const MachineLoad& m, int threads, int processes);

// A run of `threads` per process (0: all cores, as --threads) x `processes` starting now: the machine's load and the
// threads that fit when they are fewer than the run's, measured over `window_s`; nullopt when they fit, when there
// is nothing fewer to try (one thread) or /proc cannot be read.
struct Crowding {
  MachineLoad load;
  int threads = 0;  // the run's, resolved
  int fit = 0;      // threads_to_try
};
std::optional<Crowding> crowding(int threads, int processes, double window_s);

}  // namespace tg

// core/machine_load.h: /proc's load figures parsed (and refused when malformed), the cores other work keeps busy,
// and the --threads that fit beside it; the machine's own figures read.
#include "terngrad/core/machine_load.h"

#include <gtest/gtest.h>

namespace tg {
namespace {

TEST(MachineLoad, ProcFilesAreParsedAndMalformedOnesRefused) {
  EXPECT_DOUBLE_EQ(parse_load1("1.52 0.58 0.59 3/412 12345\n").value(), 1.52);
  EXPECT_FALSE(parse_load1("").has_value());
  EXPECT_FALSE(parse_load1("busy 0.5").has_value());
  EXPECT_FALSE(parse_load1("-1 0 0").has_value());
  const auto t = parse_cpu_times("cpu  10 1 5 100 4 0 2 0 0 0\ncpu0 5 0 2 50 2 0 1 0 0 0\nprocs_running 3\n");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->total, 122u);
  EXPECT_EQ(t->idle, 104u);
  EXPECT_FALSE(parse_cpu_times("cpu0 1 2 3 4 5 6 7 8\n").has_value());  // no aggregate line
  EXPECT_FALSE(parse_cpu_times("cpu  1 2 3\n").has_value());
  // 2 cores, 100 jiffies of which 50 idle: one core busy; a counter that went back: nothing measured.
  EXPECT_DOUBLE_EQ(busy_between({1000, 500}, {1100, 550}, 2), 1.0);
  EXPECT_DOUBLE_EQ(busy_between({1100, 550}, {1000, 500}, 2), 0.0);
}

TEST(MachineLoad, ThreadsThatFitBesideTheOtherWork) {
  // Idle 2-core machine: 2 threads fit.
  EXPECT_EQ(threads_to_try({0.05, 1.9, 2}, 2, 1), 2);  // the load average of a run that just ended is not counted
  // One busy process beside: 1 thread.
  EXPECT_EQ(threads_to_try({1.0, 1.0, 2}, 2, 1), 1);
  // Two processes of this run on 8 cores with 4 busy: 2 threads each.
  EXPECT_EQ(threads_to_try({4.0, 4.0, 8}, 4, 2), 2);
  // Fully busy: at least 1.
  EXPECT_EQ(threads_to_try({8.0, 16.0, 8}, 4, 2), 1);
  // What fits is kept.
  EXPECT_EQ(threads_to_try({1.0, 1.0, 8}, 2, 2), 2);
}

TEST(MachineLoad, ThisMachinesFiguresAreRead) {
  const auto m = read_machine_load(0.05);
  ASSERT_TRUE(m.has_value()) << "/proc/loadavg or /proc/stat unreadable";
  EXPECT_GE(m->busy, 0.0);
  EXPECT_LE(m->busy, m->cores);
  EXPECT_GE(m->load1, 0.0);
  EXPECT_GE(m->cores, 1);
}

}  // namespace
}  // namespace tg

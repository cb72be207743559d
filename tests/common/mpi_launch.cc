// Re-launching the current test under mpirun (see mpi_launch.h).
#include "common/mpi_launch.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "common/files.h"
#include "terngrad/comm/mpi_communicator.h"

namespace tg::testing_mpi {

bool g_under_mpi = false;

namespace {

std::string self_path() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, n) : std::string();
}

int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

}  // namespace

void launch_current_test_under_mpirun(int ranks) {
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0) GTEST_SKIP() << "mpirun not found on PATH";
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string filter = std::string(info->test_suite_name()) + "." + info->name();
  char log_template[] = "/tmp/tg_mpi_test_XXXXXX";
  int fd = mkstemp(log_template);
  ASSERT_GE(fd, 0);
  close(fd);
  const std::string log = log_template;
  // 600 s only tells a hang from a slow run (ASan on a slow CPU), inside ctest's 900 s.
  const std::string cmd = "timeout 600 mpirun --allow-run-as-root --oversubscribe -np " + std::to_string(ranks) + " " +
                          self_path() + " --gtest_color=no --gtest_filter=" + filter + " > " + log + " 2>&1";
  const int rc = std::system(cmd.c_str());
  const std::string out = tg::testing::slurp(log);
  std::remove(log.c_str());
  EXPECT_EQ(rc, 0) << cmd << "\n" << out;
  // Guard against a vacuous pass (e.g. a filter matching nothing): each rank must report one passed test.
  EXPECT_EQ(count_of(out, "[  PASSED  ] 1 test."), ranks) << out;
}

int run_all_tests_under_mpi_if_launched(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  g_under_mpi = launched_by_mpi();
  std::unique_ptr<MpiEnvironment> env;
  if (g_under_mpi) env = std::make_unique<MpiEnvironment>();
  const int rc = RUN_ALL_TESTS();
  env.reset();
  return rc;
}

}  // namespace tg::testing_mpi

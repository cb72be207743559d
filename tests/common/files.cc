// Files and commands for tests (files.h).
#include "common/files.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>

namespace tg::testing {

namespace fs = std::filesystem;

fs::path temp_dir(const std::string& name) {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string suite = info ? info->test_suite_name() : "none";
  fs::path d = fs::temp_directory_path() / ("tg_" + suite + "_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void dump(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
  out.close();
  EXPECT_TRUE(out.good()) << "cannot write " << path;
}

fs::path fixture(const std::string& name) { return fs::path(TG_SOURCE_DIR) / "tests" / "data" / name; }

int run_command(const std::string& command, std::string* output) {
  const fs::path log = temp_dir("command") / "output";
  const int status = std::system((command + " > '" + log.string() + "' 2>&1").c_str());
  if (output) *output = slurp(log);
  fs::remove_all(log.parent_path());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace tg::testing

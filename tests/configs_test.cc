// Every ready-made flag file in configs/ is accepted by terngrad-train (unknown keys are errors) and builds
// its network: `terngrad-train --config FILE --summary` exits 0 and prints the parameter total.
#include <gtest/gtest.h>

#include <filesystem>

#include "common/files.h"

namespace {

namespace fs = std::filesystem;
using tg::testing::dump;
using tg::testing::run_command;
using tg::testing::temp_dir;

TEST(Configs, EveryFlagFileLoadsAndBuildsItsNetwork) {
  const fs::path dir = fs::path(TG_SOURCE_DIR) / "configs";
  const std::string bin = std::string(TG_BINARY_DIR) + "/terngrad-train";
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".ini") continue;
    ++files;
    std::string out;
    const std::string command = bin + " --config " + entry.path().string() + " --summary";
    EXPECT_EQ(run_command(command, &out), 0) << entry.path() << "\n" << out;
    EXPECT_NE(out.find("total parameters: "), std::string::npos) << entry.path() << "\n" << out;
  }
  EXPECT_GE(files, 12);
}

TEST(Configs, UnknownKeyIsRefused) {
  const fs::path f = temp_dir("bad") / "bad.ini";
  dump(f, "net = lenet\nlearning_rate = 0.1\n");  // the flag is initial_learning_rate
  std::string out;
  const std::string bin = std::string(TG_BINARY_DIR) + "/terngrad-train";
  EXPECT_NE(run_command(bin + " --config " + f.string() + " --summary", &out), 0);
  EXPECT_NE(out.find("learning_rate"), std::string::npos) << out;
  fs::remove_all(f.parent_path());
}

}  // namespace

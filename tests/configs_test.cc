// Every ready-made flag file in configs/ is accepted by terngrad-train (unknown keys are errors) and builds
// its network: `terngrad-train --config FILE --summary` exits 0 and prints the parameter total.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace {

namespace fs = std::filesystem;

int run(const std::string& cmd, std::string* out) {
  const std::string log = (fs::temp_directory_path() / ("tg_cfg_" + std::to_string(::getpid()))).string();
  const int rc = std::system((cmd + " > " + log + " 2>&1").c_str());
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  fs::remove(log);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

TEST(Configs, EveryFlagFileLoadsAndBuildsItsNetwork) {
  const fs::path dir = fs::path(TG_SOURCE_DIR) / "configs";
  const std::string bin = std::string(TG_BINARY_DIR) + "/terngrad-train";
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".ini") continue;
    ++files;
    std::string out;
    EXPECT_EQ(run(bin + " --config " + entry.path().string() + " --summary", &out), 0) << entry.path() << "\n" << out;
    EXPECT_NE(out.find("total parameters: "), std::string::npos) << entry.path() << "\n" << out;
  }
  EXPECT_GE(files, 10);
}

TEST(Configs, UnknownKeyIsRefused) {
  const fs::path f = fs::temp_directory_path() / ("tg_bad_" + std::to_string(::getpid()) + ".ini");
  std::ofstream(f) << "net = lenet\nlearning_rate = 0.1\n";  // the flag is initial_learning_rate
  std::string out;
  EXPECT_NE(run(std::string(TG_BINARY_DIR) + "/terngrad-train --config " + f.string() + " --summary", &out), 0);
  EXPECT_NE(out.find("learning_rate"), std::string::npos) << out;
  fs::remove(f);
}

}  // namespace

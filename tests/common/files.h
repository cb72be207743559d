// Files and commands for tests: a fresh temporary folder per test, whole-file read and write, the path of a
// fixture in tests/data/, and a shell command run with its output captured.
#pragma once

#include <filesystem>
#include <string>

namespace tg::testing {

// <tmp>/tg_<test suite>_<name>_<pid>: emptied if it exists, then created (a folder per suite, name, process).
std::filesystem::path temp_dir(const std::string& name);

// Whole files: slurp reads the bytes ("" if the file is missing), dump writes them (a failed write fails the
// test); fixture is tests/data/<name> of the source tree.
std::string slurp(const std::filesystem::path& path);
void dump(const std::filesystem::path& path, const std::string& bytes);
std::filesystem::path fixture(const std::string& name);

// Runs `command` with sh; its stdout and stderr go to *output. Returns the exit status (-1: killed by a signal).
int run_command(const std::string& command, std::string* output = nullptr);

}  // namespace tg::testing

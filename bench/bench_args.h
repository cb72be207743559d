// Command-line helpers the Google Benchmark programs of bench/ share (header-only: each program is one file).
#pragma once

#include <sstream>
#include <string>
#include <vector>

namespace tg {

// "1,2,,4" -> {"1", "2", "4"}: a comma-separated list, empty items dropped.
inline std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace tg

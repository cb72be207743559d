// read_file: a whole file's bytes (see the header).
#include "terngrad/core/read_file.h"

#include <fstream>
#include <iterator>

#include "terngrad/core/error.h"

namespace tg {

std::string read_file(const std::string& path, const std::string& hint) {
  std::ifstream in(path, std::ios::binary);
  if (!in) TG_THROW("{}: cannot open it{}", path, hint);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace tg

// read_file: a whole file's bytes, for the readers of small files (.npy arrays, JSON manifests); the writers' side is
// core/atomic_file.h.
#pragma once

#include <string>

namespace tg {

// The file's bytes; a file that cannot be opened is one error line: "<path>: cannot open it<hint>".
std::string read_file(const std::string& path, const std::string& hint = "");

}  // namespace tg

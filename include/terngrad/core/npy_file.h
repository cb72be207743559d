// NumPy .npy files (format 1.0: "\x93NUMPY", version 1.0, a uint16 little-endian header length, a Python dict
// literal {'descr': '<f4', 'fortran_order': False, 'shape': (N, K), } padded with spaces to a multiple of 64
// bytes and ended by '\n', then the C-order little-endian data), written atomically (core/atomic_file.h):
// numpy.load reads them as they are. terngrad-eval's --dump_logits / --dump_inputs / --dump_labels write them;
// read_npy_f32 reads f32 ones back (the exchange dumps' replay).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "terngrad/core/dtype.h"

namespace tg {

// The header of an array of `dtype` (f32, i32, u8, i8) and `shape`.
std::string npy_header(DType dtype, const std::vector<int64_t>& shape);

// Writes the array at `data` (product(shape) elements of dtype, C order) to path atomically; errors name the path.
void write_npy(const std::string& path, const void* data, DType dtype, const std::vector<int64_t>& shape);

// Reads an f32 array (format 1.0 or 2.0, '<f4', C order: what write_npy and numpy.save write). Errors name the path
// and what is wrong: not a .npy file, another dtype, Fortran order, a malformed shape, a short or long file.
struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<float> data;
};
NpyArray read_npy_f32(const std::string& path);

}  // namespace tg

// NumPy .npy format 1.0 writer (the format's description: numpy/lib/format.py).
#include "terngrad/core/npy_file.h"

#include <fmt/format.h>

#include "terngrad/core/atomic_file.h"
#include "terngrad/core/error.h"

namespace tg {

namespace {
const char* npy_descr(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "<f4";
    case DType::kI32:
      return "<i4";
    case DType::kU8:
      return "|u1";
    case DType::kI8:
      return "|i1";
    default:
      TG_THROW(".npy: dtype {} is not written (f32, i32, u8, i8 are)", dtype_name(dtype));
  }
}
}  // namespace

std::string npy_header(DType dtype, const std::vector<int64_t>& shape) {
  std::string dims;
  for (int64_t d : shape) dims += fmt::format("{}, ", d);
  if (shape.size() > 1) dims.resize(dims.size() - 2);  // (N, K); a 1-d shape keeps its comma: (N,)
  if (shape.size() == 1) dims.pop_back();
  std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", npy_descr(dtype), dims);
  const size_t prefix = 10;  // magic (6), version (2), header length (2)
  const size_t total = (prefix + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - prefix - dict.size() - 1, ' ');
  dict.push_back('\n');
  TG_CHECK(dict.size() <= 65535, ".npy header of {} bytes is too long", dict.size());
  std::string header("\x93NUMPY\x01\x00", 8);
  header.push_back(static_cast<char>(dict.size() & 0xff));
  header.push_back(static_cast<char>(dict.size() >> 8));
  return header + dict;
}

void write_npy(const std::string& path, const void* data, DType dtype, const std::vector<int64_t>& shape) {
  int64_t count = 1;
  for (int64_t d : shape) count *= d;
  AtomicFile file(path, AtomicFile::TempName::kBeside, size_t{1} << 20);
  file.write(npy_header(dtype, shape));
  file.write(data, static_cast<size_t>(count) * dtype_size(dtype));
  file.commit();
}

}  // namespace tg

// NumPy .npy format 1.0 writer and f32 reader (the format's description: numpy/lib/format.py).
#include "terngrad/core/npy_file.h"

#include <fmt/format.h>

#include <cctype>
#include <cstring>

#include "terngrad/core/atomic_file.h"
#include "terngrad/core/error.h"
#include "terngrad/core/read_file.h"

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

NpyArray read_npy_f32(const std::string& path) {
  const std::string bytes = read_file(path);
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0)
    TG_THROW("{}: not a .npy file (no \\x93NUMPY magic)", path);
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t header_len = 0, data_at = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8;
    data_at = 10 + header_len;
  } else if (major == 2 || major == 3) {
    TG_CHECK(bytes.size() >= 12, "{}: a .npy header cut short", path);
    for (int k = 0; k < 4; ++k) header_len |= static_cast<size_t>(static_cast<unsigned char>(bytes[8 + k])) << (8 * k);
    data_at = 12 + header_len;
  } else {
    TG_THROW("{}: .npy format version {} is not read (1, 2 and 3 are)", path, major);
  }
  TG_CHECK(data_at <= bytes.size(), "{}: the .npy header says {} bytes, the file has {}", path, header_len,
           bytes.size());
  const std::string dict = bytes.substr(data_at - header_len, header_len);
  auto value_of = [&](const char* key) {
    const size_t at = dict.find(key);
    TG_CHECK(at != std::string::npos, "{}: the .npy header has no {} ({})", path, key, dict);
    return at + std::strlen(key);
  };
  const size_t descr = value_of("'descr':");
  if (dict.find("'<f4'", descr) != dict.find_first_not_of(' ', descr))
    TG_THROW("{}: the array is not little-endian f32 ('<f4'): {}", path, dict);
  const size_t order = value_of("'fortran_order':");
  if (dict.compare(dict.find_first_not_of(' ', order), 5, "False") != 0)
    TG_THROW("{}: the array is in Fortran order (C order is read)", path);
  const size_t open = dict.find('(', value_of("'shape':")), close = dict.find(')', open);
  TG_CHECK(open != std::string::npos && close != std::string::npos, "{}: malformed .npy shape in {}", path, dict);
  NpyArray a;
  int64_t count = 1;
  for (size_t at = open + 1; at < close;) {
    const size_t digit = dict.find_first_of("0123456789", at);
    if (digit == std::string::npos || digit >= close) break;
    size_t end = digit;
    while (end < close && std::isdigit(static_cast<unsigned char>(dict[end]))) ++end;
    a.shape.push_back(std::stoll(dict.substr(digit, end - digit)));
    count *= a.shape.back();
    at = end;
  }
  const size_t want = static_cast<size_t>(count) * sizeof(float);
  if (bytes.size() - data_at != want)
    TG_THROW("{}: the .npy shape needs {} bytes of data, the file has {}", path, want, bytes.size() - data_at);
  a.data.resize(static_cast<size_t>(count));
  if (want > 0) std::memcpy(a.data.data(), bytes.data() + data_at, want);
  return a;
}

}  // namespace tg

// The .npy writer (core/npy_file.h): the exact header bytes numpy.load expects, and a file read back.
#include "terngrad/core/npy_file.h"

#include <gtest/gtest.h>

#include <cstring>

#include "common/files.h"
#include "terngrad/core/error.h"

namespace tg {
namespace {

// The dict literal of a header, up to its closing brace (the padding after it is checked apart).
std::string dict_of(const std::string& header) { return header.substr(10, header.find('}') - 10 + 1); }

TEST(NpyFile, HeaderIsVersion1PaddedTo64Bytes) {
  for (const auto& shape : std::vector<std::vector<int64_t>>{{}, {5}, {10000, 10}, {3, 28, 28, 1}}) {
    const std::string h = npy_header(DType::kF32, shape);
    EXPECT_EQ(h.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
    EXPECT_EQ(h.size() % 64, 0u);
    const size_t len = static_cast<uint8_t>(h[8]) | (static_cast<uint8_t>(h[9]) << 8);
    EXPECT_EQ(len + 10, h.size());
    EXPECT_EQ(h.back(), '\n');
  }
  EXPECT_EQ(dict_of(npy_header(DType::kF32, {10000, 10})),
            "{'descr': '<f4', 'fortran_order': False, 'shape': (10000, 10), }");
  EXPECT_EQ(dict_of(npy_header(DType::kI32, {5})), "{'descr': '<i4', 'fortran_order': False, 'shape': (5,), }");
  EXPECT_EQ(dict_of(npy_header(DType::kU8, {})), "{'descr': '|u1', 'fortran_order': False, 'shape': (), }");
  EXPECT_THROW(npy_header(DType::kF16, {2}), Error);
}

TEST(NpyFile, WritesHeaderThenData) {
  const auto dir = testing::temp_dir("npy");
  const std::string path = (dir / "x.npy").string();
  const float data[6] = {1, 2, 3, 4, 5, 6};
  write_npy(path, data, DType::kF32, {2, 3});
  const std::string bytes = testing::slurp(path);
  const std::string header = npy_header(DType::kF32, {2, 3});
  ASSERT_EQ(bytes.size(), header.size() + sizeof data);
  EXPECT_EQ(bytes.substr(0, header.size()), header);
  EXPECT_EQ(std::memcmp(bytes.data() + header.size(), data, sizeof data), 0);
  EXPECT_THROW(write_npy((dir / "no" / "x.npy").string(), data, DType::kF32, {6}), Error);
}

}  // namespace
}  // namespace tg

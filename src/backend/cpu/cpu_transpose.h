// The element bytes of a (rows x cols) matrix written transposed (cols x rows): how the CPU backend takes and gives
// the filter layout (ConvDesc::filter_ohwi) that it accepts but never prefers (cast_many's and
// unscale_and_check_many's transposing items, the convolutions' filter_ohwi). A plain loop: the CPU's own nets never
// ask for it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace tg::cpu {

inline void transpose_elements(const void* from, void* to, int64_t rows, int64_t cols, size_t element_bytes) {
  const auto* in = static_cast<const unsigned char*>(from);
  auto* out = static_cast<unsigned char*>(to);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      std::memcpy(out + static_cast<size_t>(c * rows + r) * element_bytes,
                  in + static_cast<size_t>(r * cols + c) * element_bytes, element_bytes);
}

}  // namespace tg::cpu

// The one bilinear resize of the project, TensorFlow 1's resize_bilinear convention (align_corners=false: source
// coordinate = dest * in / out, clamped to the last row and column), over interleaved HWC pixels of any element
// type read as float. `store(index, value)` writes output element `index` (its row-major HWC index): the float
// preprocessing stores the value, the uint8 converters round it to nearest and clamp (image_codec.h).
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace tg {

template <typename In, typename Store>
void bilinear_resize(const In* src, int in_h, int in_w, int channels, int out_h, int out_w, Store&& store) {
  const float sy = static_cast<float>(in_h) / out_h, sx = static_cast<float>(in_w) / out_w;
  const int C = channels;
  std::vector<int> xs0(out_w), xs1(out_w);
  std::vector<float> wxs(out_w);
  for (int x = 0; x < out_w; ++x) {
    const float fx = x * sx;
    xs0[x] = std::min(static_cast<int>(fx), in_w - 1);
    xs1[x] = std::min(xs0[x] + 1, in_w - 1);
    wxs[x] = fx - static_cast<float>(xs0[x]);
  }
  for (int y = 0; y < out_h; ++y) {
    const float fy = y * sy;
    const int y0 = std::min(static_cast<int>(fy), in_h - 1), y1 = std::min(y0 + 1, in_h - 1);
    const float wy = fy - static_cast<float>(y0);
    const In* r0 = src + static_cast<size_t>(y0) * in_w * C;
    const In* r1 = src + static_cast<size_t>(y1) * in_w * C;
    const size_t row = static_cast<size_t>(y) * out_w * C;
    for (int x = 0; x < out_w; ++x) {
      const float wx = wxs[x];
      for (int c = 0; c < C; ++c) {
        const float tl = static_cast<float>(r0[xs0[x] * C + c]), tr = static_cast<float>(r0[xs1[x] * C + c]);
        const float bl = static_cast<float>(r1[xs0[x] * C + c]), br = static_cast<float>(r1[xs1[x] * C + c]);
        const float top = tl + (tr - tl) * wx, bot = bl + (br - bl) * wx;
        store(row + static_cast<size_t>(x) * C + c, top + (bot - top) * wy);
      }
    }
  }
}

}  // namespace tg

// Synthetic images for the data tests: an H x W x C Image whose every pixel value comes from a function.
//   Image flat = image_of(2, 3, 1, [](int, int, int) { return 7; });
#pragma once

#include <cstdint>
#include <functional>

#include "terngrad/data/image_codec.h"

namespace tg::testing {

// pixel(y, x, k) is the value of channel k at row y, column x; pixels are stored (H, W, C).
Image image_of(int height, int width, int channels, const std::function<uint8_t(int y, int x, int k)>& pixel);

}  // namespace tg::testing

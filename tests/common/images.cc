// Synthetic images for the data tests (images.h).
#include "common/images.h"

namespace tg::testing {

Image image_of(int height, int width, int channels, const std::function<uint8_t(int y, int x, int k)>& pixel) {
  Image img;
  img.height = height;
  img.width = width;
  img.channels = channels;
  img.pixels.resize(img.size());
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x)
      for (int k = 0; k < channels; ++k) img.pixels[(size_t(y) * width + x) * channels + k] = pixel(y, x, k);
  return img;
}

}  // namespace tg::testing

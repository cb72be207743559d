// libFuzzer target: the image decoders on raw encoded bytes, dispatched by magic bytes (decode_image with an
// empty image/format: PNG signature, JPEG SOI), plus the explicit PNG and JPEG entry points and the
// requested channel conversions; a decoded image then goes through resize and every preprocessing kind.
// Seeds: tests/fuzz/corpus/image/ (PNG and JPEG files as the converters encode them).
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "terngrad/core/error.h"
#include "terngrad/data/image_codec.h"
#include "terngrad/data/preprocess.h"

namespace {
void preprocess_all(const tg::Image& img, uint32_t salt) {
  for (int k = 0; k < 4; ++k) {
    tg::PreprocessSpec spec;
    spec.kind = static_cast<tg::PreprocessKind>(k);
    spec.image_size = k == 0 ? 28 : 24;
    spec.channels = img.channels;
    spec.train = (salt + k) % 2 == 0;
    std::vector<float> out(static_cast<size_t>(spec.image_size) * spec.image_size * spec.channels);
    tg::AugmentRng rng(7, 0, 0, salt);
    try {
      tg::preprocess_image(img, spec, rng, out.data(), "fuzz");
    } catch (const tg::Error&) {
    }
  }
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tg::fuzz::quiet_logging();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  const int channels[3] = {0, 1, 3};
  const int want = channels[size % 3];
  try {
    tg::Image img = tg::decode_image(bytes, "", 0, 0, 0, want, "fuzz");
    if (img.size() != img.pixels.size()) __builtin_trap();
    if (img.height > 0 && img.width > 0) {
      tg::Image small = tg::resize_bilinear_u8(img, 1 + img.height % 17, 1 + img.width % 17);
      preprocess_all(small, static_cast<uint32_t>(size));
      preprocess_all(tg::convert_channels(small, small.channels == 1 ? 3 : 1), static_cast<uint32_t>(size) + 1);
    }
  } catch (const tg::Error&) {
  }
  // The explicit entry points: a PNG read as JPEG and vice versa must fail cleanly.
  try {
    tg::decode_png(bytes, want, "fuzz");
  } catch (const tg::Error&) {
  }
  try {
    tg::decode_jpeg(bytes, want, "fuzz");
  } catch (const tg::Error&) {
  }
  return 0;
}

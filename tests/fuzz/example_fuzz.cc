// libFuzzer target: one TFRecord payload as the input pipeline treats it: tf.Example parsing
// (parse_image_example, example_feature_keys), then decoding of image/encoded by its image/format with the
// record's height/width/channels (PNG, JPEG, RAW), then the preprocessing of the dataset kind picked by the
// label. Seeds: tests/fuzz/corpus/example/ (records of converter-written shards: PNG, JPEG, RAW).
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "terngrad/core/error.h"
#include "terngrad/data/example.h"
#include "terngrad/data/image_codec.h"
#include "terngrad/data/preprocess.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tg::fuzz::quiet_logging();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    tg::example_feature_keys(bytes, "fuzz");
  } catch (const tg::Error&) {
  }
  tg::ImageExample ex;
  try {
    ex = tg::parse_image_example(bytes, "fuzz");
  } catch (const tg::Error&) {
    return 0;
  }
  try {
    const uint64_t pick = static_cast<uint64_t>(ex.label);
    const int channels = pick % 3 == 0 ? 0 : (pick % 3 == 1 ? 1 : 3);
    tg::Image img = tg::decode_image(ex.encoded, ex.format, ex.height, ex.width, ex.channels, channels, "fuzz");
    tg::PreprocessSpec spec;
    spec.kind = static_cast<tg::PreprocessKind>(pick / 3 % 4);
    spec.image_size = spec.kind == tg::PreprocessKind::kMnist ? 28 : 24;
    spec.channels = img.channels;
    spec.train = (pick / 12) % 2 == 0;
    std::vector<float> out(static_cast<size_t>(spec.image_size) * spec.image_size * spec.channels);
    tg::AugmentRng rng(1, 0, 0, static_cast<uint32_t>(pick));
    tg::preprocess_image(img, spec, rng, out.data(), "fuzz");
  } catch (const tg::Error&) {
  }
  return 0;
}

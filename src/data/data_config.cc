// The input flags' table (DataConfig).
#include "terngrad/data/data_config.h"

#include "terngrad/data/tfrecord.h"

namespace tg {

namespace {
constexpr double kMaxThreads = 4096;
constexpr double kMaxShuffleBuffer = double(int64_t{1} << 30);

std::vector<Flag<DataConfig>> make_table() {
  using C = DataConfig;
  return {
      {"num_readers", &C::num_readers, "TFRecord reader threads", at_least(1).max(kMaxThreads)},
      {"num_preprocess_threads", &C::num_preprocess_threads, "decode/augment threads", at_least(1).max(kMaxThreads)},
      {"shuffle_buffer", &C::shuffle_buffer, "serialized records in the shuffle buffer",
       at_least(1).max(kMaxShuffleBuffer), kFlagResume},
      {"skip_corrupt_records", &C::skip_corrupt_records,
       "count (each bad record once), log (the first 10) and skip bad records instead of stopping", no_check(),
       kFlagSwitch},
      {"tfrecord_compression", &C::tfrecord_compression,
       "TF's `TFRecordOptions` GZIP/ZLIB shards are detected from their first bytes (a valid plain length CRC "
       "wins); offsets in messages then count in the uncompressed stream",
       one_of<TfRecordCompression>()},
      {"jpeg_dct", &C::jpeg_dct,
       "the IDCT; fast is what TF's `decode_jpeg` uses by default (`dct_method=''` → `JDCT_IFAST`), as the "
       "reference did",
       one_of<JpegDct>()},
      {"max_image_pixels", &C::max_image_pixels,
       "refuse an image with more pixels (64M), read from its JPEG/PNG header or RAW dims before anything is "
       "allocated",
       positive()},
      {"max_corrupt_fraction", &C::max_corrupt_fraction,
       "a pass over the data with more bad records than this fraction, or with no usable record, stops the run "
       "(one line naming `--data_dir`)",
       in_range(0, 1, "[]")},
  };
}
}  // namespace

const std::vector<Flag<DataConfig>>& data_flags() {
  static const std::vector<Flag<DataConfig>> table = make_table();
  return table;
}

std::vector<const char*> eval_data_flag_names() {
  return {"num_preprocess_threads", "skip_corrupt_records", "tfrecord_compression", "jpeg_dct",
          "max_image_pixels",       "max_corrupt_fraction"};
}

void DataConfig::apply_decode_defaults() const {
  set_data_flag_defaults(tfrecord_compression, jpeg_dct, max_image_pixels);
}

}  // namespace tg

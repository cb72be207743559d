// The input flags terngrad-train and terngrad-eval share (entries of their flag tables, core/flag_table.h):
// corrupt-record handling, TFRecord compression, the JPEG IDCT and the decode size limit. Any config struct
// with members of these names gets them: data_flags<TrainConfig>(), data_flags<EvalConfig>().
#pragma once

#include <vector>

#include "terngrad/core/flag_table.h"
#include "terngrad/data/image_codec.h"
#include "terngrad/data/tfrecord.h"

namespace tg {

template <typename C>
std::vector<Flag<C>> data_flags() {
  return {
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

}  // namespace tg

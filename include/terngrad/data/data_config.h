// DataConfig: the input settings terngrad-train and terngrad-eval share (readers, decode threads, shuffling,
// corrupt-record handling, TFRecord compression, the JPEG IDCT, the decode size limit), one struct owned by the
// data room with its flag sub-table (data_flags()). TrainConfig and EvalConfig derive from it, so their flag
// tables embed these entries (embed_flags, core/flag_table.h) and the input pipeline (PipelineOptions::data) and
// the evaluator take it whole: each default is written once, nothing is copied field by field.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "terngrad/core/flag_table.h"
#include "terngrad/data/image_codec.h"

namespace tg {

struct DataConfig {
  int num_readers = 2;             // TFRecord reader threads (training)
  int num_preprocess_threads = 2;  // decode/augment threads
  int64_t shuffle_buffer = 4096;   // serialized records in the shuffle buffer (training; <= 1: no shuffling)
  bool skip_corrupt_records = false;
  std::string tfrecord_compression = "auto";  // auto | none | gzip | zlib
  std::string jpeg_dct = "fast";              // fast (TF's decode_jpeg default) | accurate
  int64_t max_image_pixels = kDefaultMaxImagePixels;
  double max_corrupt_fraction = 0.01;  // more bad records in one pass over the data stop the run

  // The process-wide decode settings (--tfrecord_compression, --jpeg_dct, --max_image_pixels: what
  // set_data_flag_defaults sets). Throws naming a bad value's flag.
  void apply_decode_defaults() const;
};

// Every input flag, in the order the programs list them; shuffle_buffer is compared on resume.
const std::vector<Flag<DataConfig>>& data_flags();
// The names of the entries a reader of a subset exactly once (terngrad-eval) takes: no readers, no shuffling.
std::vector<const char*> eval_data_flag_names();

}  // namespace tg

// InputPipeline: sharded TFRecord files of image tf.Examples -> batches of preprocessed images for one worker.
//
//   readers (num_readers threads, one bounded queue each; a file is read by one reader)
//     -> sequencer (1 thread: merges the readers' records back into the epoch's file order, then the
//        bounded shuffle buffer of serialized records, shuffle_buffer records; train only)
//     -> preprocess (num_preprocess_threads threads: parse Example, check label, decode, augment)
//     -> reorder window (bounded) -> batcher (1 thread) -> prefetch queue (prefetch_batches batches)
//     -> next().
// The shuffle buffer holds serialized records rather than decoded images, as the reference's
// RandomShuffleQueue did: an ImageNet JPEG is ~110 KB, its 224x224x3 float image 600 KB.
//
// Determinism: the record sequence (file order per epoch, shuffle-buffer draws) and every augmentation draw
// come from Philox keyed by the seed and counters naming (epoch, file, record), and preprocessing results are
// put back in sequence order before batching, so the batches are the same whatever num_readers and
// num_preprocess_threads are.
//
// Sharding over workers: with at least as many files as workers, worker w reads files w, w + N, w + 2N, ...
// (sorted names); otherwise every worker reads every file and keeps record k of file f iff (k + f) % N == w.
// Either way each record belongs to exactly one worker. Training reshuffles this worker's file order every
// epoch and runs forever (the shuffle buffer mixes across epoch boundaries, as the reference's queue did).
//
// Eval (train = false): one pass over the worker's records, files in sorted order, records in file order,
// no shuffling, no augmentation, every record exactly once. The last batch may be partial: Batch::count
// says how many rows are valid (rows past count are zero images with label -1); after it next() returns
// false.
//
// Bad input: a corrupt record (CRC, truncation, not an Example, no image/encoded or label, label outside
// [0, num_classes), undecodable image, image smaller than the crop) stops the pipeline; next() then throws a
// tg::Error naming the file and byte offset. With skip_corrupt_records the record is counted once (by file
// and offset, however many epochs meet it), the first 10 are logged, and it is skipped; a truncated file or
// bad length CRC loses the rest of that file (counted as one bad record). Every pass over the worker's files
// is audited when its last record has been processed: a pass with no record at all (empty files), with no
// usable record, or with more than max_corrupt_fraction of its records bad stops the pipeline with one line
// naming --data_dir. Files that are all empty are refused at construction. A gray image where the dataset is
// in color (Fashion-MNIST shards read as cifar10) is not corruption but the wrong data: it always stops the
// pipeline (ImageNet's few grayscale JPEGs are converted; color images are converted to gray for MNIST).
//
// Memory is bounded: every queue has a fixed capacity. The destructor stops and joins every thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "terngrad/core/error.h"
#include "terngrad/data/data_config.h"
#include "terngrad/data/preprocess.h"

namespace tg {

struct PipelineOptions {
  std::string data_dir;
  std::string subset = "train";   // files "<data_dir>/<subset>-*"
  std::string dataset = "mnist";  // mnist, fashion_mnist, cifar10, imagenet
  // imagenet: the model's preprocessing (its registry entry: ModelInfo::imagenet_preprocessing)
  PreprocessKind imagenet_preprocessing = PreprocessKind::kInception;
  int image_size = 0;   // 0: dataset default (28, 24, 224)
  int batch_size = 64;  // this pipeline's batch (the trainer passes its worker's slice)
  bool train = true;
  // Readers (train), decode threads, shuffle buffer (train: serialized records, <= 1 disables shuffling),
  // corrupt records: the programs' input flags as they are (terngrad/data/data_config.h).
  DataConfig data;
  int prefetch_batches = 2;
  uint64_t seed = 0;
  int worker_index = 0;
  int num_workers = 1;
  int num_classes = 0;        // 0: dataset default (10, 10, 1001 with background 0)
  int64_t start_epoch = 0;    // first epoch (train: resume; changes file order and augmentation)
  uint64_t skip_records = 0;  // train: drop the first records of the sequence before decoding (resume
                              // at Batch::records_end of the last batch trained on)
};

struct Batch {
  int batch_size = 0, image_size = 0, channels = 0;
  int count = 0;                // valid rows (== batch_size except eval's last batch)
  int64_t epoch = 0;            // epoch of the last valid row
  uint64_t records_end = 0;     // records of the sequence consumed up to this batch, skipped corrupt ones
                                // included: the position to resume from (PipelineOptions::skip_records)
  std::vector<float> images;    // (batch_size, image_size, image_size, channels), NHWC
  std::vector<int32_t> labels;  // (batch_size); -1 in rows past count
};

// next() was waiting for a batch when the stop flag (set_stop_flag) became true.
class InputInterrupted : public Error {
 public:
  using Error::Error;
};

// "<data_dir>/<subset>-*" regular files, sorted by name. Throws tg::Error naming --data_dir/--subset when
// data_dir is empty, missing, or has no such file.
std::vector<std::string> list_data_files(const std::string& data_dir, const std::string& subset);

// Which files a worker reads and whether records are strided (see above). Exposed for tests.
struct ShardAssignment {
  std::vector<int> files;  // indices into the sorted file list
  bool strided = false;    // keep record k of file f iff (k + f) % num_workers == worker_index
};
ShardAssignment assign_shards(int num_files, int worker_index, int num_workers);

class InputPipeline {
 public:
  explicit InputPipeline(const PipelineOptions& options);  // validates options, lists files, starts threads
  ~InputPipeline();                                        // stops and joins every thread
  InputPipeline(const InputPipeline&) = delete;
  InputPipeline& operator=(const InputPipeline&) = delete;

  // Fills *batch (its buffers are reused). Train: always true. Eval: false once every batch was returned.
  // Throws tg::Error when a stage failed (bad record without skip_corrupt_records, I/O error).
  bool next(Batch* batch);
  // While *stop is true, next() does not wait for a batch (it polls every 100 ms) but throws InputInterrupted.
  void set_stop_flag(const std::atomic<bool>* stop);

  int64_t epoch() const;            // epoch of the last row handed out
  int64_t skipped_records() const;  // corrupt records skipped so far (skip_corrupt_records)
  int64_t records_delivered() const;
  const PipelineOptions& options() const;         // with defaults filled in
  const std::vector<std::string>& files() const;  // every file of the subset, sorted
  const ShardAssignment& assignment() const;

  struct State;

 private:
  std::unique_ptr<State> s_;
};

}  // namespace tg

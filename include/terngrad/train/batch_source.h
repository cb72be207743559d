// BatchSource: where the trainer's batches come from. The input pipeline over TFRecord shards
// (PipelineBatchSource, src/train/pipeline_batch_source.cc) or, for --benchmark_mode, synthetic input as the
// reference's: constant 0.5 images and random labels (SyntheticBatchSource).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "terngrad/core/tensor.h"

namespace tg {

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Fills images (B, S, S, C) f32 and labels (B) i32 on the host with the next training batch.
  virtual void next(const Tensor& images, const Tensor& labels) = 0;
  // Where the next batch starts, stored in checkpoints as the data cursor: records of the input sequence
  // consumed (pipeline) or batches handed out (synthetic). A source created at this cursor continues with
  // exactly the batches the uninterrupted run saw.
  virtual uint64_t cursor() const = 0;
  virtual uint64_t skipped_records() const { return 0; }
  // While *stop is true, next() may give up waiting for input by throwing InputInterrupted (the pipeline).
  virtual void set_stop_flag(const std::atomic<bool>* /*stop*/) {}
};

// Constant 0.5 images; labels from Philox keyed by (seed, batch index), so a resumed run sees the same ones.
class SyntheticBatchSource final : public BatchSource {
 public:
  // first_row: the global index of this process's first row in every batch (process rank x its batch), so a row's
  // label depends on the seed, the batch and its place in the global batch only, not on the process layout.
  SyntheticBatchSource(uint64_t seed, int64_t num_classes, uint64_t cursor = 0, uint64_t first_row = 0)
      : seed_(seed), num_classes_(num_classes), batches_(cursor), first_row_(first_row) {}
  void next(const Tensor& images, const Tensor& labels) override;
  uint64_t cursor() const override { return batches_; }

 private:
  uint64_t seed_;
  int64_t num_classes_;
  uint64_t batches_;
  uint64_t first_row_;
};

struct TrainConfig;
struct PipelineOptions;
// The training pipeline over `<data_dir>/<subset>-*` for process `rank` of `num_processes`, batches of
// `batch` examples, starting at `cursor` (a resumed run continues where the checkpoint left off).
std::unique_ptr<BatchSource> make_pipeline_batch_source(const TrainConfig& config, int rank, int num_processes,
                                                        int64_t batch, uint64_t cursor);

// Eval input: one pass over `<data_dir>/<subset>-*` in order, every record exactly once. next() fills up to
// `batch` rows and returns how many are valid (rows past it are zero images, label 0); 0 at the end.
class EvalBatchSource {
 public:
  virtual ~EvalBatchSource() = default;
  virtual int64_t next(const Tensor& images, const Tensor& labels) = 0;
  virtual int64_t skipped_records() const { return 0; }  // --skip_corrupt_records: distinct bad records
};
std::unique_ptr<EvalBatchSource> make_eval_batch_source(const PipelineOptions& options);

}  // namespace tg

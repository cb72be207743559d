// BatchSource over the data layer's InputPipeline (train: endless, shuffled, augmented; eval: one ordered
// pass). The cursor is the pipeline's record position (Batch::records_end): a resumed run re-creates the
// pipeline with skip_records = cursor, which drops those records after the shuffle buffer and before any
// decoding. The record order and every augmentation draw are keyed by the seed and the record, so the
// batches that follow are exactly those the uninterrupted run saw.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

#include "terngrad/data/input_pipeline.h"
#include "terngrad/data/preprocess.h"
#include "terngrad/models/registry.h"
#include "terngrad/train/batch_source.h"
#include "terngrad/train/train_config.h"

namespace tg {

namespace {
void copy_batch(const Batch& b, const Tensor& images, const Tensor& labels, int64_t rows) {
  TG_CHECK(static_cast<int64_t>(b.images.size()) == images.numel() && b.batch_size == labels.numel(),
           "pipeline batch {}x{}x{}x{} does not match the trainer's {}", b.batch_size, b.image_size, b.image_size,
           b.channels, images.shape().str());
  std::memcpy(images.raw(), b.images.data(), b.images.size() * sizeof(float));
  int32_t* y = labels.data<int32_t>();
  for (int64_t i = 0; i < labels.numel(); ++i) y[i] = i < rows ? b.labels[i] : 0;
}

class PipelineBatchSource final : public BatchSource {
 public:
  PipelineBatchSource(const PipelineOptions& o) : pipeline_(o), cursor_(o.skip_records) {
    if (cursor_ > 0) spdlog::info("input pipeline: resuming after the {} records already trained on", cursor_);
  }
  void next(const Tensor& images, const Tensor& labels) override {
    TG_CHECK(pipeline_.next(&batch_), "the training input pipeline of --data_dir '{}' ended",
             pipeline_.options().data_dir);
    copy_batch(batch_, images, labels, batch_.count);
    cursor_ = batch_.records_end;
  }
  uint64_t cursor() const override { return cursor_; }
  uint64_t skipped_records() const override { return static_cast<uint64_t>(pipeline_.skipped_records()); }
  void set_stop_flag(const std::atomic<bool>* stop) override { pipeline_.set_stop_flag(stop); }

 private:
  InputPipeline pipeline_;
  Batch batch_;
  uint64_t cursor_;
};

class PipelineEvalSource final : public EvalBatchSource {
 public:
  explicit PipelineEvalSource(const PipelineOptions& o) : pipeline_(o) {}
  int64_t next(const Tensor& images, const Tensor& labels) override {
    if (!pipeline_.next(&batch_)) return 0;
    copy_batch(batch_, images, labels, batch_.count);
    return batch_.count;
  }
  int64_t skipped_records() const override { return pipeline_.skipped_records(); }

 private:
  InputPipeline pipeline_;
  Batch batch_;
};
}  // namespace

std::unique_ptr<BatchSource> make_pipeline_batch_source(const TrainConfig& c, int rank, int num_processes,
                                                        int64_t batch, uint64_t cursor) {
  PipelineOptions o;
  o.data_dir = c.data_dir;
  o.subset = c.subset;
  o.dataset = c.dataset;
  o.imagenet_preprocessing = parse_enum<PreprocessKind>(find_model(c.net).imagenet_preprocessing);
  o.image_size = static_cast<int>(c.image_size);
  o.batch_size = static_cast<int>(batch);
  o.train = true;
  o.data = c;  // the input flags, as given (DataConfig)
  o.seed = c.seed;
  o.worker_index = rank;
  o.num_workers = num_processes;
  o.num_classes = static_cast<int>(c.num_classes);
  o.skip_records = cursor;
  return std::make_unique<PipelineBatchSource>(o);
}

std::unique_ptr<EvalBatchSource> make_eval_batch_source(const PipelineOptions& options) {
  PipelineOptions o = options;
  o.train = false;
  return std::make_unique<PipelineEvalSource>(o);
}

}  // namespace tg

// Evaluation of checkpoints: the model rebuilt from the header, the weights (or their moving averages) loaded,
// one pass over the subset counting top-1 and top-5 hits; the polling of a train_dir.
#include "terngrad/train/evaluator.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "terngrad/backend/backend.h"
#include "terngrad/core/json_writer.h"
#include "terngrad/core/npy_file.h"
#include "terngrad/data/dataset_info.h"
#include "terngrad/data/input_pipeline.h"
#include "terngrad/data/preprocess.h"
#include "terngrad/models/registry.h"
#include "terngrad/nn/net.h"
#include "terngrad/train/batch_source.h"
#include "terngrad/train/checkpoint.h"
#include "terngrad/train/checkpoint_model.h"
#include "terngrad/train/event_writer.h"
#include "terngrad/train/train_config.h"

namespace tg {

namespace {

// Adds to *top1 / *top5 the rows of logits (n, classes) whose label scores among the 1 / 5 highest.
void count_hits(const std::vector<float>& logits, const int32_t* labels, int64_t n, int64_t classes, int64_t* top1,
                int64_t* top5) {
  for (int64_t i = 0; i < n; ++i) {
    const float* row = logits.data() + i * classes;
    const float target = row[labels[i]];
    int64_t rank = 0;  // classes scoring strictly higher than the label (TF in_top_k)
    for (int64_t k = 0; k < classes; ++k) rank += row[k] > target;
    *top1 += rank < 1;
    *top5 += rank < 5;
  }
}

// The evaluated examples' preprocessed images, logits and labels, kept in memory and written at the end as .npy
// files (core/npy_file.h) where EvalOptions names them: images (examples, S, S, C) f32 NHWC, logits (examples,
// classes) f32, labels (examples) i32.
class EvalDumps {
 public:
  EvalDumps(const EvalOptions& o, const CheckpointMeta& m)
      : o_(o), image_shape_{m.image_size, m.image_size, m.channels}, classes_(m.num_classes) {}
  void add(const float* images, const float* logits, const int32_t* labels, int64_t n) {
    const int64_t image_numel = image_shape_[0] * image_shape_[1] * image_shape_[2];
    if (!o_.dump_inputs.empty()) images_.insert(images_.end(), images, images + n * image_numel);
    if (!o_.dump_logits.empty()) logits_.insert(logits_.end(), logits, logits + n * classes_);
    if (!o_.dump_labels.empty()) labels_.insert(labels_.end(), labels, labels + n);
  }
  void write(int64_t examples) const {
    if (!o_.dump_inputs.empty()) {
      write_npy(o_.dump_inputs, images_.data(), DType::kF32,
                {examples, image_shape_[0], image_shape_[1], image_shape_[2]});
      spdlog::info("wrote the {} input images to {} (--dump_inputs)", examples, o_.dump_inputs);
    }
    if (!o_.dump_logits.empty()) {
      write_npy(o_.dump_logits, logits_.data(), DType::kF32, {examples, classes_});
      spdlog::info("wrote the {} examples' logits to {} (--dump_logits)", examples, o_.dump_logits);
    }
    if (!o_.dump_labels.empty()) {
      write_npy(o_.dump_labels, labels_.data(), DType::kI32, {examples});
      spdlog::info("wrote the {} labels to {} (--dump_labels)", examples, o_.dump_labels);
    }
  }

 private:
  const EvalOptions& o_;
  int64_t image_shape_[3];  // S, S, C
  int64_t classes_;
  std::vector<float> images_, logits_;
  std::vector<int32_t> labels_;
};

// The trainer's --max_steps recorded in the checkpoint (0: none recorded).
int64_t trained_max_steps(const CheckpointReader& reader) {
  const auto it = reader.meta().flags.find("max_steps");
  if (it == reader.meta().flags.end()) return 0;
  TG_CHECK(!it->second.empty() && it->second.find_first_not_of("0123456789") == std::string::npos,
           "{}: flag max_steps '{}' is not a number; pass --max_steps", reader.path(), it->second);
  return std::stoll(it->second);
}

}  // namespace

EvalResult Evaluator::evaluate(const std::string& path) const {
  const EvalOptions& o = options_;
  CheckpointReader reader(path);
  const CheckpointMeta& m = reader.meta();
  auto be = make_backend(o.device, o);
  Net net;
  build_model(m.model, checkpoint_model_config(m), net);
  net.setup(*be, o.batch_size);
  ParameterStore store(net.param_specs(), net.state_specs(), *be);
  net.bind(store);
  load_checkpoint_weights(reader, *be, store, o.restore_avg_var);
  spdlog::info("Successfully loaded model from {} at step={} (parameter digest {}{})", path, m.step, m.parameter_digest,
               o.restore_avg_var ? ", using the moving averages" : "");

  EvalResult r;
  r.checkpoint = path;
  r.step = m.step;
  r.parameter_digest = m.parameter_digest;
  r.subset = o.subset.empty() ? dataset_info(m.dataset, o.data_dir).eval_subset : o.subset;
  PipelineOptions po;
  po.data_dir = o.data_dir;
  po.subset = r.subset;
  po.dataset = m.dataset;
  po.imagenet_preprocessing = parse_enum<PreprocessKind>(find_model(m.model).imagenet_preprocessing);
  po.image_size = static_cast<int>(m.image_size);
  po.batch_size = static_cast<int>(o.batch_size);
  po.data = o;  // the input flags as given
  po.num_classes = static_cast<int>(m.num_classes);
  auto source = make_eval_batch_source(po);

  // images (batch, image_size, image_size, channels) f32, labels (batch) i32, logits (batch, classes) f32
  Buffer images(host_allocator(),
                static_cast<size_t>(o.batch_size * m.image_size * m.image_size * m.channels) * sizeof(float));
  Buffer labels(host_allocator(), static_cast<size_t>(o.batch_size) * sizeof(int32_t));
  Tensor x(images.data(), Shape{o.batch_size, m.image_size, m.image_size, m.channels}, DType::kF32, Device::cpu());
  Tensor y(labels.data(), Shape{o.batch_size}, DType::kI32, Device::cpu());
  std::vector<float> logits(static_cast<size_t>(o.batch_size * m.num_classes));
  const Tensor host_logits(logits.data(), Shape{o.batch_size, m.num_classes}, DType::kF32, Device::cpu());
  EvalDumps dumps(o, m);
  int64_t batches = 0;
  for (;;) {
    const int64_t n = source->next(x, y);
    if (n == 0) break;
    net.forward(x, y, false);
    be->copy(host_logits, net.tensor(net.logits_name()));
    count_hits(logits, y.data<int32_t>(), n, m.num_classes, &r.top1, &r.top5);
    dumps.add(x.data<float>(), logits.data(), y.data<int32_t>(), n);
    r.examples += n;
    if (++batches % 100 == 0) spdlog::info("[{} batches, {} examples]", batches, r.examples);
  }
  TG_CHECK(r.examples > 0, "--data_dir {}: the subset '{}' has no examples", o.data_dir, r.subset);
  if (source->skipped_records() > 0)
    spdlog::warn("--skip_corrupt_records: skipped {} corrupt records", source->skipped_records());
  dumps.write(r.examples);
  return r;
}

void Evaluator::watch(const std::string& train_dir, const WatchOptions& watch,
                      const std::function<void(const EvalResult&)>& report) const {
  int64_t last_step = -1;
  bool said_waiting = false;
  for (;;) {
    const std::optional<std::string> latest = latest_checkpoint(train_dir);
    if (!latest) {
      TG_CHECK(!watch.run_once, "--checkpoint_dir {} has no checkpoint", train_dir);
      if (!said_waiting)
        spdlog::info(
            "waiting for a checkpoint in {} (looking every {} s; --run_once evaluates what is there and exits)",
            train_dir, watch.interval_secs);
      said_waiting = true;
      spdlog::default_logger()->flush();
    } else {
      const CheckpointReader reader(*latest);
      const int64_t step = reader.meta().step;
      if (step != last_step) {
        report(evaluate(*latest));
        last_step = step;
        const int64_t max_steps = watch.max_steps > 0 ? watch.max_steps : trained_max_steps(reader);
        if (watch.run_once || (max_steps > 0 && step >= max_steps)) return;
      }
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(watch.interval_secs));
  }
}

EvalOptions eval_options_of(const TrainConfig& run, const std::string& subset) {
  EvalOptions eo;
  static_cast<DataConfig&>(eo) = run;
  eo.data_dir = run.data_dir;
  eo.subset = subset;
  eo.device = run.device == "cpu" ? "cpu" : "cuda:0";
  eo.threads = run.threads;  // the run's other backend settings are not the evaluation's (their defaults)
  return eo;
}

void record_eval_result(const EvalResult& r, const std::string& dir, EventWriter& events, const std::string& flag) {
  std::filesystem::create_directories(dir);
  JsonObject line;
  line.add("step", r.step)
      .add("precision_at_1", r.precision_at_1())
      .add("recall_at_5", r.recall_at_5())
      .add("examples", r.examples)
      .add("checkpoint", r.checkpoint)
      .add("parameter_digest", r.parameter_digest);
  JsonLinesFile((std::filesystem::path(dir) / "eval.jsonl").string(), flag).write(line);
  events.scalars(r.step, {{"Accuracy @ 1", static_cast<float>(r.precision_at_1())},
                          {"Accuracy @ 5", static_cast<float>(r.recall_at_5())}});
}

}  // namespace tg

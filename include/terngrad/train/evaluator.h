// Evaluator: precision @ 1 and recall @ 5 of a checkpoint on a whole subset (read exactly once, in order), with
// the moving averages of the weights (the default) or the weights themselves. The model is rebuilt from the
// checkpoint's header (net, image size, classes, and the structure flags it was trained with).
// terngrad-eval is its front-end: it picks the checkpoints (one, the latest, or each new one while polling)
// and reports the results (a line on stdout, a JSON line and TensorBoard scalars in --eval_dir).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "terngrad/backend/backend_config.h"
#include "terngrad/data/data_config.h"

namespace tg {

// The input settings (decode threads, corrupt records, ...) are the programs' shared ones (DataConfig); the
// subset is read with them exactly once, in order. terngrad-eval's config derives from this struct.
struct EvalOptions : DataConfig, BackendConfig {  // --device and --threads of BackendConfig's flags
  std::string data_dir;
  std::string subset;  // default: the eval subset of the checkpoint's dataset
  int64_t batch_size = 100;
  bool restore_avg_var = true;  // evaluate the moving averages of the weights
  // When set, .npy files of every evaluated example (core/npy_file.h), written atomically after the pass
  // (kept in memory until then): the preprocessed images fed to the net (examples, S, S, C) f32 NHWC, the
  // logits (examples, classes) f32, the labels (examples) i32.
  std::string dump_inputs, dump_logits, dump_labels;
};

struct TrainConfig;
// The evaluation a training run makes of its own checkpoints (--eval_at_end, --eval_every): its data settings and
// threads, on `subset`, on the CPU or the first GPU as the run.
EvalOptions eval_options_of(const TrainConfig& run, const std::string& subset);

struct EvalResult {
  std::string checkpoint;  // its path
  int64_t step = 0;
  std::string parameter_digest;
  std::string subset;
  int64_t examples = 0;
  int64_t top1 = 0, top5 = 0;  // examples whose label scores among the 1 / 5 highest (TF in_top_k)
  double precision_at_1() const { return double(top1) / double(examples); }
  double recall_at_5() const { return double(top5) / double(examples); }
};

// Which checkpoints of a train_dir to evaluate: the latest once (run_once), or each new one, polling every
// interval_secs, until one of step >= max_steps (0: the trainer's --max_steps from the checkpoint).
struct WatchOptions {
  bool run_once = false;
  double interval_secs = 60;
  int64_t max_steps = 0;
};

class EventWriter;

// A result recorded in `dir` (created when missing): a line of dir/eval.jsonl and the TensorBoard scalars
// "Accuracy @ 1" and "Accuracy @ 5" at the checkpoint's step (terngrad-eval --eval_dir, terngrad-train
// --eval_at_end: what scripts/plot_runs.py draws). `flag` names the folder in errors.
void record_eval_result(const EvalResult& r, const std::string& dir, EventWriter& events, const std::string& flag);

class Evaluator {
 public:
  explicit Evaluator(EvalOptions options) : options_(std::move(options)) {}

  // Evaluates one checkpoint file; errors name it (or the data).
  EvalResult evaluate(const std::string& checkpoint_path) const;
  // Evaluates the checkpoints of train_dir as `watch` says, handing each result to `report`.
  void watch(const std::string& train_dir, const WatchOptions& watch,
             const std::function<void(const EvalResult&)>& report) const;

 private:
  EvalOptions options_;
};

}  // namespace tg

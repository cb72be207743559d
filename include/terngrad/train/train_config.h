// TrainConfig: every setting of terngrad-train, named as the reference's flags, with their defaults (the member
// initialisers, the one place they are written). Help, checks and what is saved: the flag table
// (train_flags.h); validate() runs its checks and those relating several flags before any work starts. The
// settings an area owns come from its sub-config, whose flag sub-table the train table embeds: the input
// (DataConfig, data room), the network (ModelFlags, models), the compression (CompressionFlags, compress), the
// exchange (ExchangeConfig), the optimizer and the learning-rate schedule (OptimizerFlags, LearningRateFlags, optim).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "terngrad/backend/backend_config.h"
#include "terngrad/compress/compression_policy.h"
#include "terngrad/core/dtype.h"
#include "terngrad/core/enum_names.h"
#include "terngrad/data/data_config.h"
#include "terngrad/data/dataset_info.h"
#include "terngrad/data/image_codec.h"
#include "terngrad/exchange/exchange_options.h"
#include "terngrad/models/registry.h"
#include "terngrad/optim/lr_schedule.h"
#include "terngrad/optim/optimizer.h"

namespace tg {

// --precision: the compute dtype of the nets (mixed precision; README "Mixed precision").
enum class Precision { kFp32, kFp16, kBf16 };
template <>
struct EnumNames<Precision> : EnumNamesBase {
  static constexpr const char* kFlag = "--precision";
  static constexpr EnumName<Precision> kList[] = {
      {Precision::kFp32, "fp32"}, {Precision::kFp16, "fp16"}, {Precision::kBf16, "bf16"}};
};

// --elastic_batch: what a resume on another number of workers (--allow_topology_change) keeps. kTotal: --batch_size
// is the total batch on every layout (each worker's share changes; the learning rate stays). kPerWorker: each
// worker's batch stays that of the run's first layout (--batch_size over its workers); the total grows and shrinks
// with the workers and the learning rate is scaled by the same factor (the linear scaling rule, Goyal et al. 2017),
// its schedule kept in steps.
enum class ElasticBatch { kTotal, kPerWorker };
template <>
struct EnumNames<ElasticBatch> : EnumNamesBase {
  static constexpr const char* kFlag = "--elastic_batch";
  static constexpr EnumName<ElasticBatch> kList[] = {{ElasticBatch::kTotal, "total"},
                                                     {ElasticBatch::kPerWorker, "per_worker"}};
};

// Where a run writes, and where terngrad-eval and terngrad-export look, unless told.
inline constexpr char kDefaultTrainDir[] = "/tmp/terngrad_train";

struct TrainConfig : DataConfig,
                     BackendConfig,
                     ModelFlags,
                     CompressionFlags,
                     ExchangeConfig,
                     OptimizerFlags,
                     LearningRateFlags {
  // where
  std::string train_dir = kDefaultTrainDir;
  std::string data_dir;
  std::string dataset = "fashion_mnist";
  std::string subset = "train";
  // --device, --threads, --allow_tf32, --deterministic, --conv_search: BackendConfig
  int num_gpus = 1;
  int num_nodes = -1;      // workers (towers) in this process; <= 0: num_gpus
  int cpu_replicas = 1;    // --device cpu: replicas (each its own thread and share of --threads) in this process
  int ranks_per_node = 0;  // ranks (replicas) per node; 0: the processes of one host form a node
  // Compute dtype: fp32 | fp16 (dynamic loss scaling) | bf16. Master weights, optimizer state, batch-norm
  // statistics, the loss and the exchanged gradients stay fp32; checkpoints hold fp32 only.
  std::string precision = "fp32";
  // Memory (nn/memory_plan.h): liveness | none; none | bn_relu. Neither changes the bits of a run.
  std::string memory_plan = "liveness";
  std::string recompute = "none";
  int num_processes = 1;  // MPI processes training together (set by the trainer, recorded in checkpoints)
  // model
  std::string net = "lenet";
  int64_t image_size = 0;   // 0: the dataset's default
  int64_t num_classes = 0;  // 0: the dataset's
  // --weight_decay, --dropout_keep_prob, --aux_logits, --zero_init_last_bn_gamma: ModelFlags
  float label_smoothing = -1.f;      // < 0: the network's default (ModelInfo::label_smoothing)
  std::string padding_style = "tf";  // PaddingStyle: tf, torch
  // optimisation
  int64_t batch_size = 64;  // total over all workers
  int64_t max_steps = 1000;
  // --optimizer, --momentum: OptimizerFlags; the learning-rate schedule's: LearningRateFlags
  float moving_average_decay = 0.9999f;
  // starting from other weights (trainer_pretrained.cc)
  std::string pretrained_model_checkpoint_path;  // a checkpoint of ours, or a train_dir (its latest)
  bool fine_tune = false;                        // ... all but the logits layers, which start afresh
  // resuming on another layout
  bool allow_topology_change = false;   // resume on another number of ranks (workers, processes, replicas)
  bool reset_rank_state = false;        // ... dropping the checkpoint's per-rank state (error feedback)
  std::string elastic_batch = "total";  // ElasticBatch
  int64_t base_workers = 0;             // the workers of the run's first layout (0: this one's; kept in checkpoints)
  // run
  uint64_t seed = 1;
  int64_t save_iter = 5000;
  double save_secs = 0;  // also a checkpoint when this many seconds passed since the last one (0: by steps only)
  int keep_checkpoints = 5;
  int64_t log_every = 10;
  std::string metrics_jsonl;
  std::string timeline;                // Chrome trace of the steps in timeline_steps
  std::string timeline_steps = "5-9";  // "A-B" or "A": 1-based steps, inclusive
  bool timeline_layers = false;        // each layer's forward and backward on the timeline
  bool benchmark_mode = false;
  int64_t check_replicas_every = 0;
  double collective_timeout = 600;       // s without progress (a collective or a step) before the run ends; 0: never
  int64_t generation = 0;                // an elastic run's generation (train/generation_fence.h); 0: not elastic
  std::string stop_file;                 // when it exists at a step's end, save and stop as on SIGINT
  int64_t quantization_error_every = 0;  // TernGrad: every N steps, the decoded average against fp32's (0: never)
  std::string exchange_dump;             // write one step's exchange into this folder (exchange/exchange_dump.h)
  int64_t exchange_dump_step = 1;        // ... of this 1-based step
  std::string eval_at_end;               // terngrad-train: evaluate the final checkpoint on this subset ("": no)
  int64_t eval_every = 0;                // evaluate the moving averages every N steps during training (0: never)
  double eval_secs = 0;                  // ... and when this many seconds of training passed since the last (0: never)
  std::string eval_subset;               // ... on <data_dir>/<eval_subset>-* ("": the dataset's, test or validation)
  bool evaluates_during_training() const { return eval_every > 0 || eval_secs > 0; }
  // The evaluations asked for: (flag, subset) of --eval_at_end and --eval_every/--eval_secs.
  std::vector<std::pair<std::string, std::string>> evaluation_subsets() const;
  // Throws, naming the flag and subset, when one of them has no files in --data_dir (checked by the trainer
  // before anything is created, as the training data is).
  void check_evaluation_data() const;
  // A --data_dir written by terngrad-data build-image-data describes its data (dataset.json; older ones only name
  // their classes, labels.txt): --num_classes must be their count + 1 (label 0 is the background class), and a
  // built-in --dataset must read images of the data's channel count. Throws naming both; nothing to check without
  // the files.
  void check_data_classes() const;
  // The dataset's facts: the table's entry, or a custom folder's description (data/dataset_info.h).
  DatasetInfo data_info() const { return dataset_info(dataset, data_dir); }
  // The flags the command line or --config gave, by name; unset: every flag counts as given (a program that
  // fills the config in code). A resumed run keeps the checkpoint's value of a flag not given (Trainer).
  std::optional<std::set<std::string>> given_flags;

  bool flag_given(const std::string& name) const { return !given_flags || given_flags->count(name) > 0; }

  int workers_per_process() const { return num_nodes > 0 ? num_nodes : num_gpus; }
  int64_t workers() const { return static_cast<int64_t>(workers_per_process()) * num_processes; }
  // The total batch of this layout (of `workers` workers) and the learning rate's factor (--elastic_batch;
  // base_workers resolved); keeps_worker_batch: --elastic_batch per_worker.
  bool keeps_worker_batch() const;
  int64_t total_batch_of(int64_t workers) const;
  int64_t total_batch() const;
  double learning_rate_scale() const;
  // --precision as a compute dtype (F32, F16, BF16); an unknown value is an error naming the accepted ones.
  DType compute_dtype() const;
  // Checks every value (the flag table's checks) and their consistency for `num_processes` processes; throws
  // naming the flag.
  void validate(int num_processes) const;
  // Fills the defaults that depend on the dataset and the network (image size, classes, label smoothing).
  void resolve_defaults();
  // The network's settings (call after resolve_defaults).
  ModelConfig model_config() const;
  // The effective configuration as flag name -> value (logged at start, stored in checkpoints): the table's
  // entries not marked kFlagNotSaved.
  std::map<std::string, std::string> to_flags() const;
};

}  // namespace tg

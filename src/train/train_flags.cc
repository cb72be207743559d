// The flag table of terngrad-train.
#include "terngrad/train/train_flags.h"

#include "terngrad/exchange/exchange_options.h"
#include "terngrad/nn/memory_plan.h"
#include "terngrad/optim/lr_schedule.h"
#include "terngrad/optim/optimizer.h"

namespace tg {

FlagCheck known_network() {
  FlagCheck c;
  c.parse = [](std::string_view text, std::string_view) { find_model(std::string(text)); };
  c.accepted = model_names;
  return c;
}

namespace {
// Upper bounds: sizes multiply into buffer sizes, and a value past them is a typo, not a plan.
constexpr double kMaxBatch = double(int64_t{1} << 24);
constexpr double kMaxImageSize = 4096;
constexpr double kMaxClasses = double(int64_t{1} << 24);
constexpr double kMaxWorkers = 4096;  // workers, GPUs, replicas, threads

FlagCheck at_most(double limit) { return no_check().max(limit); }

std::vector<Flag<TrainConfig>> make_table() {
  using C = TrainConfig;
  std::vector<Flag<C>> t = {
      {"train_dir", &C::train_dir,
       "checkpoints and the `checkpoint` index; an existing one is **resumed** (a train_dir of another "
       "net/dataset is refused)"},
      {"data_dir", &C::data_dir, "folder of `<subset>-*` TFRecord shards (required unless `--benchmark_mode`)"},
      {"dataset", &C::dataset,
       "sets classes, channels, examples per epoch; custom: those of `<data_dir>/dataset.json` (what "
       "`terngrad-data build-image-data` writes), the default for a folder that has one",
       one_of<Dataset>(), kFlagRun},
      {"subset", &C::subset, "training files `<data_dir>/<subset>-*`", no_check(), kFlagResume},
  };
  // The areas' sub-tables where the reference lists their flags (the device's, the network's, the optimizer and its
  // learning rate, compression and exchange), the input last.
  auto append = [&t](std::vector<Flag<C>> more) {
    for (Flag<C>& f : more) t.push_back(std::move(f));
  };
  append(embed_flags<C>(backend_flags(), {"device"}));
  append({
      {"num_gpus", &C::num_gpus,
       "GPUs of this process (`--device cuda`), or with `--device cuda:<k>` replicas sharing GPU k (exchanged on the "
       "device in-process, not through NCCL: one process only); workers are placed round-robin",
       at_least(1).max(kMaxWorkers), kFlagGpu},
      {"num_nodes", &C::num_nodes, "workers (virtual nodes, towers) in this process; -1: one per GPU",
       at_most(kMaxWorkers), kFlagResume},
  });
  append(embed_flags<C>(backend_flags(), {"threads", "allow_tf32", "deterministic", "conv_search"}));
  append({
      {"precision",
       &C::precision,
       "compute dtype: fp16 needs `--device cuda` (dynamic loss scaling), bf16 a GPU or a CPU with AVX512_BF16/AMX; "
       "weights, optimizer state, BN statistics, the loss and exchanged gradients stay fp32 (see Mixed precision)",
       one_of<Precision>(),
       kFlagRun | kFlagGpu,
       {{"fp16", "fp16"}}},
      {"memory_plan", &C::memory_plan,
       "liveness: a step's activations, their gradients and saved tensors share one arena, each buffer's bytes "
       "reused once its last reader is done (ReLU, dropout, add and flatten in place; a replica's workers share the "
       "arena); none: every tensor its own buffer for the whole step (debugging). The same bits either way",
       one_of<MemoryPlan>(), kFlagContinue},
      {"recompute", &C::recompute,
       "bn_relu: batch-norm and ReLU outputs are dropped after the forward and computed again, from the kept "
       "convolution output and the batch statistics, just before the first backward that reads them (less memory "
       "for a few percent of time; the same bits); none: keep them",
       one_of<Recompute>(), kFlagContinue},
      {"cpu_replicas", &C::cpu_replicas,
       "`--device cpu`: model replicas in this process, each on its own thread with `--threads` / replicas "
       "threads (e.g. one per socket); `--num_nodes` must be a multiple",
       at_least(1).max(kMaxWorkers)},
      {"ranks_per_node", &C::ranks_per_node,
       "ranks (replicas: GPUs or CPU replicas) per node, whole processes; 0: the processes of one host form a node "
       "(MPI's shared-memory split). Set it to emulate nodes on one machine",
       at_least(0).max(kMaxWorkers).note("0: one node per host")},
      {"num_processes", &C::num_processes, "MPI processes training together (set by the trainer)", no_check(),
       kFlagInternal | kFlagResume},
      {"net", &C::net, "the network (cifar10_alexnet: the reference's name of cifarnet)", known_network(), kFlagRun},
      {"image_size", &C::image_size,
       "square input size; 0: the network's or the dataset's (28, 24, 224; 299 for inception_v3; custom: the "
       "network's design size, or the images' own when smaller)",
       at_least(0).max(kMaxImageSize), kFlagRun},
      {"num_classes", &C::num_classes,
       "0: the dataset's (10, or 1001 for ImageNet and classes + 1 for custom: label 0 is background)",
       at_least(0).max(kMaxClasses), kFlagRun},
  });
  append(embed_flags<C>(model_flags(), {"weight_decay", "dropout_keep_prob"}));
  append({
      {"label_smoothing", &C::label_smoothing, "< 0: the network's default (0.1 for inception_v3, else 0)",
       below(1).note("negative: the network's default"), kFlagRun},
  });
  append(embed_flags<C>(model_flags(), {"aux_logits"}));
  append({
      {"padding_style", &C::padding_style,
       "how SAME layers pad: tf (the odd pixel after, the reference's) or torch (PyTorch's symmetric (k-1)/2, average "
       "pools counting the padding: what terngrad-import writes); recorded in the checkpoint, which eval and export "
       "follow",
       one_of<PaddingStyle>(), kFlagRun},
  });
  append(embed_flags<C>(model_flags(), {"zero_init_last_bn_gamma"}));
  append({
      {"batch_size", &C::batch_size, "total batch over all workers of all processes; must divide evenly",
       at_least(1).max(kMaxBatch), kFlagResume},
      {"max_steps", &C::max_steps, "iterations", at_least(1), kFlagContinue},
  });
  append(embed_flags<C>(optimizer_flags(), {"optimizer"}));
  append(embed_flags<C>(learning_rate_flags()));
  append(embed_flags<C>(optimizer_flags(), {"momentum"}));
  append({
      {"moving_average_decay", &C::moving_average_decay,
       "EMA of weights and BN statistics: decay min(d, (1+t)/(10+t)); eval uses it", in_range(0, 1, "[)"), kFlagRun},
  });
  append(embed_flags<C>(compression_flags()));
  append(embed_flags<C>(exchange_flags()));
  append({
      {"pretrained_model_checkpoint_path", &C::pretrained_model_checkpoint_path,
       "start a new run from the weights of a checkpoint of ours (a file, or a train_dir: its latest): the "
       "parameters, batch-norm statistics and their moving averages; the run starts at step 0 with a fresh optimizer "
       "state, data cursor and learning-rate schedule. A --train_dir that holds a checkpoint resumes it (given the "
       "same path; another is refused)"},
      {"fine_tune", &C::fine_tune,
       "with --pretrained_model_checkpoint_path: the logits layers (logits/, AuxLogits/logits/) start as a fresh "
       "run's, so --num_classes and --dataset may differ from the checkpoint's",
       no_check(), kFlagSwitch},
      {"allow_topology_change", &C::allow_topology_change,
       "resume a checkpoint written by another number of workers or processes (a node lost or added): the "
       "replicated state is restored, the data cursor re-derived; per-rank state (error-feedback residuals) follows "
       "the scheme: TernGrad and PowerSGD keep the surviving ranks' where each rank's tensors are unchanged (the lost "
       "ranks' are never applied), otherwise refused unless `--reset_rank_state`",
       no_check(), kFlagSwitch | kFlagNotSaved},
      {"reset_rank_state", &C::reset_rank_state,
       "with `--allow_topology_change`: drop the checkpoint's per-rank state whatever the scheme says (error-feedback "
       "residuals start at 0)",
       no_check(), kFlagSwitch | kFlagNotSaved},
      {"elastic_batch", &C::elastic_batch,
       "on another number of workers (`--allow_topology_change`, the elastic launcher): total keeps `--batch_size` as "
       "the total batch (each worker's share changes, the learning rate stays); per_worker keeps each worker's batch "
       "of the run's first layout and scales the total batch and the learning rate with the workers (the linear "
       "scaling rule; the schedule stays in steps)",
       one_of<ElasticBatch>(), kFlagRun},
      {"base_workers", &C::base_workers, "the workers of the run's first layout (kept in its checkpoints)", at_least(0),
       kFlagInternal | kFlagRun},
      {"seed", &C::seed, "", no_check(), kFlagResume},
      {"save_iter", &C::save_iter, "checkpoint every N steps and at the end", at_least(1)},
      {"save_secs", &C::save_secs,
       "also checkpoint after the first step that ends this many seconds after the last checkpoint (or the start), "
       "by process 0's clock: what bounds the work an elastic run loses per failure when steps vary in length",
       at_least(0).max(1e7).note("0: by steps only"), kFlagContinue},
      {"keep_checkpoints", &C::keep_checkpoints, "", at_least(1)},
      {"log_every", &C::log_every,
       "log line: `step N, entropy_loss = …, reg_loss = …, total_loss = … (X examples/sec; Y sec/batch) lr = …, "
       "exchanged …/step (fp32 …) [N/M P%, ETA …] in … fb … sc … en … comm B/F de … opt … other … ms` (the "
       "window's mean ms per step: input wait, forward+backward, scalers, encode, communication blocked/in "
       "flight, decode, optimizer + EMA, other)",
       at_least(1)},
      {"metrics_jsonl", &C::metrics_jsonl,
       "one JSON object per logged step (losses, lr, examples/sec, bytes exchanged and fp32 equivalent, bytes on "
       "this process's wire, `time`: seconds per phase, `process_time`: every process's, "
       "`worker_forward_backward`) and a summary (steps, median examples/sec after the first window, bytes, "
       "final loss, parameter digest, mean `time`)"},
      {"timeline", &C::timeline,
       "write a Chrome trace (Perfetto / chrome://tracing JSON) of the steps in `--timeline_steps`: a track per "
       "worker (forward, backward, input, optimizer), per replica's exchange (its scheme's stages, waits), "
       "per communication thread (CPU: collectives) and per GPU side stream (the overlapped exchange's stages in "
       "device time); one file for all processes, written by process 0 when the window ends",
       no_check(), kFlagGpu},
      {"timeline_steps", &C::timeline_steps, "`A-B` or `A`: the 1-based steps `--timeline` records"},
      {"timeline_layers", &C::timeline_layers,
       "with `--timeline`: every layer's forward and backward as a span on its worker's track (on a GPU the "
       "recorded steps wait for the device after each layer, so they run slower)",
       no_check(), kFlagSwitch | kFlagGpu},
      {"benchmark_mode", &C::benchmark_mode, "synthetic input (0.5 images, random labels), no data_dir needed",
       no_check(), kFlagSwitch},
      {"collective_timeout", &C::collective_timeout,
       "seconds a run may go without progress (no collective finishing, no step or backward ending) before it ends "
       "with one line naming the step, the collective in flight and the process(es) it waited for: a peer whose "
       "machine, link or process stopped without an error (PyTorch's NCCL timeout is the same idea); more than the "
       "slowest step",
       at_least(0).max(1e6).note("0: never"), kFlagContinue},
      {"generation", &C::generation,
       "(scripts/elastic_run.sh) this run's generation of an elastic job: it writes into `--train_dir` only while "
       "`<train_dir>/generation` names it (checked at start and before every rename); 0: not elastic",
       at_least(0), kFlagNotSaved},
      {"stop_file", &C::stop_file,
       "when this file exists at the end of a step, the run saves a checkpoint and stops as on SIGINT (exit 0); the "
       "elastic launcher uses it to restart on more machines",
       no_check(), kFlagNotSaved},
      {"check_replicas_every", &C::check_replicas_every,
       "(debug) every N steps, compare the parameter checksums of all replicas and processes; a mismatch stops "
       "the run naming the step",
       at_least(0)},
      {"quantization_error_every", &C::quantization_error_every,
       "TernGrad (`--grad_bits 1`): every N steps, exchange the step's gradients in fp32 as well and log, per "
       "ternary tensor, the relative error ‖decoded − fp32‖/‖fp32‖ of the averaged gradient, the fraction of "
       "non-zero codes and the scaler (log line, TensorBoard `quantization/…`, a `--metrics_jsonl` line with "
       "`\"quantization\": true`); the run's bits do not change, the cost falls on those steps only",
       at_least(0).note("0: never")},
      {"exchange_dump", &C::exchange_dump,
       "(debug) write the exchange of step `--exchange_dump_step` into this existing folder: every rank's workers' "
       "gradients as they enter it, the average it leaves (and the parameters when it adds the weight decay), and "
       "`exchange_dump.json`; `exchange_replay DIR` redoes it on the CPU and compares (TernGrad's codes bit for "
       "bit). That step exchanges after backward; not with `--grad_bits 16`, `--error_feedback`, "
       "`--quantization_error_every` or `--exchange hierarchical|powersgd|none`",
       no_check(), kFlagNotSaved},
      {"exchange_dump_step", &C::exchange_dump_step, "the 1-based step `--exchange_dump` writes", at_least(1),
       kFlagNotSaved},
      {"eval_at_end", &C::eval_at_end,
       "after the last step, evaluate the final checkpoint (the moving averages, as terngrad-eval) on "
       "`<data_dir>/<subset>-*` of this subset (e.g. `test`) and end with its precision@1; empty: no evaluation",
       no_check(), kFlagNotSaved},
      {"eval_every", &C::eval_every,
       "during training, every N steps and after the last: checkpoint and evaluate the moving averages on "
       "`--eval_subset` (process 0, between steps: the training's bits do not change; its time is logged apart and "
       "not counted in examples/sec), writing \"Accuracy @ 1\" and \"Accuracy @ 5\" into the train_dir's events "
       "and eval.jsonl: the learning curve scripts/plot_runs.py draws",
       at_least(0).note("0: never"), kFlagContinue},
      {"eval_secs", &C::eval_secs,
       "as `--eval_every`, when this many seconds passed since the last evaluation (or the start), by process 0's "
       "clock",
       at_least(0).max(1e7).note("0: never"), kFlagContinue},
      {"eval_subset", &C::eval_subset,
       "the subset `--eval_every`/`--eval_secs` evaluate: `<data_dir>/<subset>-*`; empty: the dataset's evaluation "
       "subset (test, or validation for ImageNet)",
       no_check(), kFlagContinue},
  });
  append(embed_flags<C>(data_flags()));
  check_unique_flag_names(t, "terngrad-train's flags");
  return t;
}
}  // namespace

const std::vector<Flag<TrainConfig>>& train_flags() {
  static const std::vector<Flag<TrainConfig>> table = make_table();
  return table;
}

std::vector<std::string> resume_flag_names() {
  std::vector<std::string> names;
  for (const Flag<TrainConfig>& f : train_flags())
    if (f.has(kFlagResume)) names.push_back(f.name);
  return names;
}

}  // namespace tg

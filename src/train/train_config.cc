// TrainConfig checks and dataset facts.
#include "terngrad/train/train_config.h"

#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "terngrad/core/error.h"
#include "terngrad/core/timeline.h"
#include "terngrad/data/image_codec.h"
#include "terngrad/data/tfrecord.h"

namespace tg {

namespace {
constexpr int64_t kMaxBatch = int64_t{1} << 24;
constexpr int64_t kMaxImageSize = 4096;
constexpr int64_t kMaxClasses = int64_t{1} << 24;
constexpr int kMaxWorkers = 4096;  // workers, GPUs, replicas, threads
constexpr int64_t kMaxShuffleBuffer = int64_t{1} << 30;
}  // namespace

const DatasetInfo& dataset_info(const std::string& name) {
  static const std::vector<DatasetInfo> table = {
      {"mnist", 10, 1, 60000, 10000, "test", 28},
      {"fashion_mnist", 10, 1, 60000, 10000, "test", 28},
      {"cifar10", 10, 3, 50000, 10000, "test", 24},
      {"imagenet", 1001, 3, 1281167, 50000, "validation", 224},
  };
  for (const auto& d : table)
    if (d.name == name) return d;
  TG_THROW("--dataset '{}' is not one of mnist, fashion_mnist, cifar10, imagenet", name);
}

void TrainConfig::resolve_defaults() {
  const DatasetInfo& d = dataset_info(dataset);
  if (image_size == 0) image_size = net == "inception_v3" ? 299 : d.default_image_size;
  if (num_classes == 0) num_classes = d.num_classes;
  if (label_smoothing < 0.f) label_smoothing = (net == "inception_v3") ? 0.1f : 0.f;
}

void TrainConfig::validate(int num_processes) const {
  dataset_info(dataset);
  TG_CHECK(!train_dir.empty(), "--train_dir must not be empty");
  TG_CHECK(benchmark_mode || !data_dir.empty(), "--data_dir is required (or --benchmark_mode for synthetic input)");
  TG_CHECK(num_gpus >= 1, "--num_gpus {} must be at least 1", num_gpus);
  TG_CHECK(num_nodes == -1 || num_nodes >= 1, "--num_nodes {} must be at least 1 (or -1: one per GPU)", num_nodes);
  TG_CHECK(threads >= 0, "--threads {} must be >= 0 (0: all cores)", threads);
  TG_CHECK(cpu_replicas >= 1, "--cpu_replicas {} must be at least 1", cpu_replicas);
  TG_CHECK(cpu_replicas == 1 || device == "cpu", "--cpu_replicas {} needs --device cpu (GPUs: --num_gpus)",
           cpu_replicas);
  const int replicas = device == "cpu" ? cpu_replicas : num_gpus;
  TG_CHECK(workers_per_process() % replicas == 0,
           "--num_nodes {} is not a multiple of the {} replicas (--num_gpus / --cpu_replicas): every device runs "
           "the same number of workers",
           workers_per_process(), replicas);
  TG_CHECK(cpu_replicas == 1 || num_processes == 1,
           "--cpu_replicas {} with {} processes: CPU replicas meet in one process only; run one process per "
           "replica (mpirun -np {} ... --cpu_replicas 1) instead",
           cpu_replicas, num_processes, cpu_replicas * num_processes);
  TG_CHECK(image_size > 0, "--image_size {} must be positive", image_size);
  TG_CHECK(num_classes >= 2, "--num_classes {} must be at least 2", num_classes);
  TG_CHECK(batch_size >= 1, "--batch_size {} must be at least 1", batch_size);
  // Upper bounds: sizes multiply into buffer sizes, and a value past them is a typo, not a plan.
  TG_CHECK(batch_size <= kMaxBatch, "--batch_size {} is above the limit {}", batch_size, kMaxBatch);
  TG_CHECK(image_size <= kMaxImageSize, "--image_size {} is above the limit {}", image_size, kMaxImageSize);
  TG_CHECK(num_classes <= kMaxClasses, "--num_classes {} is above the limit {}", num_classes, kMaxClasses);
  TG_CHECK(num_gpus <= kMaxWorkers && num_nodes <= kMaxWorkers && cpu_replicas <= kMaxWorkers,
           "--num_gpus {}, --num_nodes {}, --cpu_replicas {}: each at most {}", num_gpus, num_nodes, cpu_replicas,
           kMaxWorkers);
  TG_CHECK(threads <= kMaxWorkers, "--threads {} is above the limit {}", threads, kMaxWorkers);
  TG_CHECK(num_readers <= kMaxWorkers && num_preprocess_threads <= kMaxWorkers,
           "--num_readers {}, --num_preprocess_threads {}: each at most {}", num_readers, num_preprocess_threads,
           kMaxWorkers);
  TG_CHECK(shuffle_buffer <= kMaxShuffleBuffer, "--shuffle_buffer {} is above the limit {}", shuffle_buffer,
           kMaxShuffleBuffer);
  TG_CHECK(max_corrupt_fraction >= 0.0 && max_corrupt_fraction <= 1.0, "--max_corrupt_fraction {} is not in [0, 1]",
           max_corrupt_fraction);
  const int64_t workers = static_cast<int64_t>(workers_per_process()) * num_processes;
  TG_CHECK(batch_size % workers == 0,
           "--batch_size {} is not divisible by the {} workers (--num_nodes x processes): it is the total batch, "
           "split evenly",
           batch_size, workers);
  {
    const double bytes = static_cast<double>(batch_size) * static_cast<double>(image_size) *
                         static_cast<double>(image_size) * static_cast<double>(dataset_info(dataset).channels) * 4.0;
    TG_CHECK(bytes <= 0x1p40, "--batch_size {} of {}x{} images needs {:.3g} TiB of input buffer (at most 1 TiB)",
             batch_size, image_size, image_size, bytes / 0x1p40);
  }
  TG_CHECK(max_steps >= 1, "--max_steps {} must be at least 1", max_steps);
  parse_tfrecord_compression(tfrecord_compression, "--tfrecord_compression");
  parse_jpeg_dct(jpeg_dct);
  TG_CHECK(max_image_pixels > 0, "--max_image_pixels {} must be positive", max_image_pixels);
  TG_CHECK(optimizer == "gd" || optimizer == "momentum" || optimizer == "adam" || optimizer == "rmsprop",
           "--optimizer '{}' is not one of gd, momentum, adam, rmsprop", optimizer);
  TG_CHECK(initial_learning_rate > 0, "--initial_learning_rate {} must be positive", initial_learning_rate);
  TG_CHECK(weight_decay >= 0.f, "--weight_decay {} must be >= 0", weight_decay);
  TG_CHECK(dropout_keep_prob > 0.f && dropout_keep_prob <= 1.f, "--dropout_keep_prob {} is not in (0, 1]",
           dropout_keep_prob);
  TG_CHECK(momentum >= 0.f && momentum < 1.f, "--momentum {} is not in [0, 1)", momentum);
  TG_CHECK(moving_average_decay >= 0.f && moving_average_decay < 1.f, "--moving_average_decay {} is not in [0, 1)",
           moving_average_decay);
  TG_CHECK(grad_bits == 1 || grad_bits == 16 || grad_bits == 32,
           "--grad_bits {} is not one of 1 (TernGrad), 16 (fp16), 32 (fp32)", grad_bits);
  TG_CHECK(clip_factor >= 0.f, "--clip_factor {} must be >= 0 (0: no clipping)", clip_factor);
  TG_CHECK(size_to_binarize >= 1, "--size_to_binarize {} must be at least 1", size_to_binarize);
  TG_CHECK(exchange == "auto" || exchange == "allgather2" || exchange == "allreduce8",
           "--exchange '{}' is not one of auto, allgather2, allreduce8", exchange);
  TG_CHECK(std::isfinite(bucket_mb) && bucket_mb > 0, "--bucket_mb {} must be a positive number of MiB", bucket_mb);
  if (!timeline.empty()) {
    Timeline::check_path(timeline);
    Timeline::parse_steps(timeline_steps);
  }
  TG_CHECK(save_iter >= 1, "--save_iter {} must be at least 1", save_iter);
  TG_CHECK(keep_checkpoints >= 1, "--keep_checkpoints {} must be at least 1", keep_checkpoints);
  TG_CHECK(log_every >= 1, "--log_every {} must be at least 1", log_every);
  TG_CHECK(warmup_steps >= 0, "--warmup_steps {} must be >= 0", warmup_steps);
  TG_CHECK(num_readers >= 1, "--num_readers {} must be at least 1", num_readers);
  TG_CHECK(num_preprocess_threads >= 1, "--num_preprocess_threads {} must be at least 1", num_preprocess_threads);
  TG_CHECK(shuffle_buffer >= 1, "--shuffle_buffer {} must be at least 1", shuffle_buffer);
  TG_CHECK(check_replicas_every >= 0, "--check_replicas_every {} must be >= 0", check_replicas_every);
  TG_CHECK(device == "cpu" || device == "cuda" || device.rfind("cuda:", 0) == 0,
           "--device '{}' is not one of cpu, cuda, cuda:<index>", device);
  TG_CHECK(device != "cpu" || num_gpus == 1, "--num_gpus {} needs --device cuda", num_gpus);
  TG_CHECK(num_gpus == 1 || device == "cuda",
           "--device {} names one GPU; with --num_gpus {} use --device cuda (GPUs 0..{})", device, num_gpus,
           num_gpus - 1);
  compute_dtype();  // --precision names a compute dtype (whether the device runs it: the backend, at build)
  TG_CHECK(label_smoothing < 1.f, "--label_smoothing {} must be below 1 (negative: the network's default)",
           label_smoothing);
}

DType TrainConfig::compute_dtype() const {
  if (precision == "fp32") return DType::F32;
  if (precision == "fp16") return DType::F16;
  if (precision == "bf16") return DType::BF16;
  TG_THROW("--precision '{}' is not one of fp32, fp16, bf16", precision);
}

ModelConfig TrainConfig::model_config() const {
  ModelConfig mc;
  mc.image_size = image_size;
  mc.channels = dataset_info(dataset).channels;
  mc.num_classes = num_classes;
  mc.weight_decay = weight_decay;
  mc.dropout_keep_prob = dropout_keep_prob;
  mc.label_smoothing = label_smoothing;
  mc.aux_logits = aux_logits;
  mc.zero_init_last_bn_gamma = zero_init_last_bn_gamma;
  return mc;
}

std::map<std::string, std::string> TrainConfig::to_flags() const {
  std::map<std::string, std::string> f;
  f["train_dir"] = train_dir;
  f["data_dir"] = data_dir;
  f["dataset"] = dataset;
  f["subset"] = subset;
  f["device"] = device;
  f["num_gpus"] = std::to_string(num_gpus);
  f["num_nodes"] = std::to_string(num_nodes);
  f["threads"] = std::to_string(threads);
  f["cpu_replicas"] = std::to_string(cpu_replicas);
  f["allow_tf32"] = allow_tf32 ? "true" : "false";
  f["precision"] = precision;
  f["num_processes"] = std::to_string(num_processes);
  f["check_replicas_every"] = std::to_string(check_replicas_every);
  f["skip_corrupt_records"] = skip_corrupt_records ? "true" : "false";
  f["tfrecord_compression"] = tfrecord_compression;
  f["jpeg_dct"] = jpeg_dct;
  f["max_image_pixels"] = std::to_string(max_image_pixels);
  f["max_corrupt_fraction"] = fmt::format("{}", max_corrupt_fraction);
  f["metrics_jsonl"] = metrics_jsonl;
  f["net"] = net;
  f["image_size"] = std::to_string(image_size);
  f["num_classes"] = std::to_string(num_classes);
  f["weight_decay"] = fmt::format("{}", weight_decay);
  f["dropout_keep_prob"] = fmt::format("{}", dropout_keep_prob);
  f["label_smoothing"] = fmt::format("{}", label_smoothing);
  f["aux_logits"] = aux_logits ? "true" : "false";
  f["zero_init_last_bn_gamma"] = zero_init_last_bn_gamma ? "true" : "false";
  f["batch_size"] = std::to_string(batch_size);
  f["max_steps"] = std::to_string(max_steps);
  f["optimizer"] = optimizer;
  f["initial_learning_rate"] = fmt::format("{}", initial_learning_rate);
  f["learning_rate_decay_type"] = learning_rate_decay_type;
  f["num_epochs_per_decay"] = fmt::format("{}", num_epochs_per_decay);
  f["learning_rate_decay_factor"] = fmt::format("{}", learning_rate_decay_factor);
  f["warmup_steps"] = std::to_string(warmup_steps);
  f["momentum"] = fmt::format("{}", momentum);
  f["moving_average_decay"] = fmt::format("{}", moving_average_decay);
  f["grad_bits"] = std::to_string(grad_bits);
  f["clip_factor"] = fmt::format("{}", clip_factor);
  f["size_to_binarize"] = std::to_string(size_to_binarize);
  f["quantize_logits"] = quantize_logits ? "true" : "false";
  f["exchange"] = exchange;
  f["overlap"] = overlap ? "true" : "false";
  f["bucket_mb"] = fmt::format("{}", bucket_mb);
  f["timeline"] = timeline;
  f["timeline_steps"] = timeline_steps;
  f["seed"] = std::to_string(seed);
  f["save_iter"] = std::to_string(save_iter);
  f["keep_checkpoints"] = std::to_string(keep_checkpoints);
  f["log_every"] = std::to_string(log_every);
  f["benchmark_mode"] = benchmark_mode ? "true" : "false";
  f["num_readers"] = std::to_string(num_readers);
  f["num_preprocess_threads"] = std::to_string(num_preprocess_threads);
  f["shuffle_buffer"] = std::to_string(shuffle_buffer);
  return f;
}

}  // namespace tg

// TrainConfig: the defaults that depend on the dataset and network, and the checks relating several flags
// (each flag's own check is its entry in the flag table, train_flags.cc).
#include "terngrad/train/train_config.h"

#include <filesystem>
#include <fstream>

#include "terngrad/core/error.h"
#include "terngrad/core/timeline.h"
#include "terngrad/data/converters.h"
#include "terngrad/data/dataset_description.h"
#include "terngrad/data/input_pipeline.h"
#include "terngrad/exchange/scheme_registry.h"
#include "terngrad/train/train_flags.h"

namespace tg {

void TrainConfig::resolve_defaults() {
  // A folder that describes itself (build-image-data's dataset.json) is a custom dataset unless --dataset says
  // otherwise: its classes, channels and size come from the folder.
  if (!flag_given("dataset") && dataset == TrainConfig{}.dataset && !benchmark_mode &&
      find_dataset_description(data_dir))
    dataset = "custom";
  const DatasetInfo d = data_info();
  const ModelInfo& m = find_model(net);
  // --image_size 0: the dataset's size, or the network's own (inception_v3's 299) where the dataset's images are
  // large enough for the network (ImageNet); small images are never upscaled unless asked (validate() says how).
  // A custom folder: the network's design size, or the images' own where they are smaller.
  if (image_size == 0 && d.id == Dataset::kCustom) {
    const int64_t design = m.design_image_size > 0 ? m.design_image_size : 224;
    image_size = d.default_image_size > 0 ? std::min(design, d.default_image_size) : design;
  } else if (image_size == 0) {
    image_size = m.default_image_size > 0 && d.default_image_size >= m.min_image_size ? m.default_image_size
                                                                                      : d.default_image_size;
  }
  if (num_classes == 0) num_classes = d.num_classes;
  if (label_smoothing < 0.f) label_smoothing = m.label_smoothing;
  if (base_workers == 0) base_workers = workers();
  if (eval_subset.empty()) eval_subset = d.eval_subset;
}

std::vector<std::pair<std::string, std::string>> TrainConfig::evaluation_subsets() const {
  std::vector<std::pair<std::string, std::string>> out;
  if (!eval_at_end.empty()) out.push_back({"--eval_at_end", eval_at_end});
  if (evaluates_during_training()) out.push_back({"--eval_every/--eval_secs", eval_subset});
  return out;
}

void TrainConfig::check_evaluation_data() const {
  for (const auto& [flag, subset] : evaluation_subsets()) {
    try {
      list_data_files(data_dir, subset);
    } catch (const Error& e) {
      TG_THROW("{} {}: {}", flag, subset, e.what());
    }
  }
}

void TrainConfig::check_data_classes() const {
  if (benchmark_mode || data_dir.empty()) return;
  int64_t classes = 0;
  std::string source;
  if (const std::optional<DatasetDescription> d = find_dataset_description(data_dir)) {
    // A built-in --dataset on a described folder: its channels against the folder's (custom's are the folder's).
    const int64_t channels = dataset == "custom" ? d->channels : dataset_info(dataset).channels;
    TG_CHECK(channels == d->channels,
             "--data_dir {} holds {} ({}): --dataset {} reads {}-channel images; leave --dataset out (or give "
             "--dataset custom) to train on the folder's own description",
             data_dir, d->summary(), dataset_description_path(data_dir), dataset, channels);
    classes = static_cast<int64_t>(d->classes.size());
    source = dataset_description_path(data_dir);
  } else {
    source = (std::filesystem::path(data_dir) / "labels.txt").string();
    std::ifstream in(source);
    if (!in) return;  // only terngrad-data build-image-data writes it
    classes = static_cast<int64_t>(read_class_list(in).size());
  }
  TG_CHECK(classes == 0 || num_classes == classes + 1,
           "--data_dir {} holds {} classes ({}; labels 1..{}, 0 the background class): train with --num_classes {}, "
           "not {}{}",
           data_dir, classes, source, classes, classes + 1, num_classes,
           dataset != "custom" && !flag_given("num_classes")
               ? fmt::format(" (the number of --dataset {}; leave --dataset out to take the folder's own)", dataset)
               : "");
}

bool TrainConfig::keeps_worker_batch() const {
  return parse_enum<ElasticBatch>(elastic_batch) == ElasticBatch::kPerWorker && base_workers > 0;
}

int64_t TrainConfig::total_batch_of(int64_t workers) const {
  return keeps_worker_batch() ? batch_size / base_workers * workers : batch_size;
}

int64_t TrainConfig::total_batch() const { return total_batch_of(workers()); }

double TrainConfig::learning_rate_scale() const {
  return keeps_worker_batch() ? static_cast<double>(workers()) / static_cast<double>(base_workers) : 1.0;
}

void TrainConfig::validate(int num_processes) const {
  check_flags(train_flags(), *this);
  CompressionFlags::validate();  // the checks between the compression flags
  TG_CHECK(!train_dir.empty(), "--train_dir must not be empty");
  // A flag that is missing or whose value names nothing: usage errors (exit 2), as terngrad-eval's.
  if (!benchmark_mode && data_dir.empty())
    TG_USAGE_ERROR("--data_dir is required (or --benchmark_mode for synthetic input)");
  if (!(device == "cpu" || device == "cuda" || device.rfind("cuda:", 0) == 0))
    TG_USAGE_ERROR("--device '{}' is not one of cpu, cuda, cuda:<index>", device);
  TG_CHECK(num_nodes == -1 || num_nodes >= 1, "--num_nodes {} must be at least 1 (or -1: one per GPU)", num_nodes);
  TG_CHECK(image_size > 0, "--image_size {} must be positive", image_size);  // 0 is resolved by now
  const DatasetInfo d = data_info();
  {
    const ModelInfo& m = find_model(net);
    if (image_size < m.min_image_size)
      TG_THROW(
          "--net {} needs images of at least {}x{}, this run's are {}x{} ({}): pass --image_size {} to upscale "
          "--dataset "
          "{}'s {}x{} images, or train a network for small images (lenet, cifarnet)",
          net, m.min_image_size, m.min_image_size, image_size, image_size,
          image_size == d.default_image_size ? "--dataset " + dataset + "'s size" : "--image_size",
          m.default_image_size > 0 ? m.default_image_size : 224, dataset, d.default_image_size, d.default_image_size);
  }
  TG_CHECK(num_classes >= 2, "--num_classes {} must be at least 2", num_classes);
  TG_CHECK(recompute == "none" || memory_plan == "liveness",
           "--recompute {} needs --memory_plan liveness (with none every tensor keeps its own buffer)", recompute);
  TG_CHECK(cpu_replicas == 1 || device == "cpu", "--cpu_replicas {} needs --device cpu (GPUs: --num_gpus)",
           cpu_replicas);
  const int replicas = device == "cpu" ? cpu_replicas : num_gpus;
  TG_CHECK(workers_per_process() % replicas == 0,
           "--num_nodes {} is not a multiple of the {} replicas (--num_gpus / --cpu_replicas): every device runs "
           "the same number of workers",
           workers_per_process(), replicas);
  TG_CHECK(!reset_rank_state || allow_topology_change,
           "--reset_rank_state drops per-rank state when a run resumes on another topology: it needs "
           "--allow_topology_change");
  const int64_t workers = static_cast<int64_t>(workers_per_process()) * num_processes;
  const int64_t total = total_batch_of(workers);
  if (keeps_worker_batch() && base_workers != workers) {
    TG_CHECK(batch_size % base_workers == 0,
             "--batch_size {} is not divisible by the {} workers of the run's first layout (--elastic_batch "
             "per_worker keeps each worker's batch of that layout)",
             batch_size, base_workers);
  } else {
    TG_CHECK(batch_size % workers == 0,
             "--batch_size {} is not divisible by the {} workers (--num_nodes x processes): it is the total batch, "
             "split evenly{}",
             batch_size, workers,
             base_workers != workers ? " (--elastic_batch per_worker keeps each worker's batch instead)" : "");
  }
  {
    const double bytes = static_cast<double>(total) * static_cast<double>(image_size) *
                         static_cast<double>(image_size) * static_cast<double>(d.channels) * 4.0;
    TG_CHECK(bytes <= 0x1p40, "a total batch of {} {}x{} images needs {:.3g} TiB of input buffer (at most 1 TiB)",
             total, image_size, image_size, bytes / 0x1p40);
  }
  for (const auto& [flag, subset] : evaluation_subsets())
    TG_CHECK(!benchmark_mode, "{} evaluates on real data: not with --benchmark_mode (synthetic input)", flag);
  if (fine_tune && pretrained_model_checkpoint_path.empty())
    TG_THROW(
        "--fine_tune restores every weight of a checkpoint but the logits: it needs "
        "--pretrained_model_checkpoint_path");
  TG_CHECK(!timeline_layers || !timeline.empty(), "--timeline_layers records into the trace of --timeline: give both");
  if (!timeline.empty()) {
    Timeline::check_path(timeline);
    Timeline::parse_steps(timeline_steps);
  }
  TG_CHECK(device != "cpu" || num_gpus == 1, "--num_gpus {} needs --device cuda", num_gpus);
  if (fp32_warmup_steps > 0 && !exchange_compresses(grad_bits, exchange))
    TG_THROW(
        "--fp32_warmup_steps {} is an uncompressed start before a compressed exchange, but --grad_bits {} "
        "--exchange {} exchanges uncompressed gradients",
        fp32_warmup_steps, grad_bits, exchange);
  if (quantization_error_every > 0 && grad_bits != 1)
    TG_THROW("--quantization_error_every {} measures ternary gradients (--grad_bits 1), not --grad_bits {}",
             quantization_error_every, grad_bits);
  if (quantization_error_every > 0 && !exchange_compresses(grad_bits, exchange))
    TG_THROW(
        "--quantization_error_every {} compares the compressed exchange with its fp32 form: --exchange {} "
        "compresses nothing",
        quantization_error_every, exchange);
  if (quantization_error_every > 0 && compute_dtype() == DType::kF16)
    TG_THROW("--quantization_error_every {} is not available with --precision fp16 (loss-scaled gradients)",
             quantization_error_every);
  if (!exchange_dump.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_directory(exchange_dump, ec))
      TG_THROW("--exchange_dump {}: not an existing folder", exchange_dump);
    if (quantization_error_every > 0)
      TG_THROW("--exchange_dump writes one plain exchange: not with --quantization_error_every {}",
               quantization_error_every);
    // The scheme of these flags on a flat job (auto on several nodes of several ranks may choose another: the
    // trainer checks again when it writes the dump).
    check_replayable(scheme_name_for(grad_bits, exchange, ExchangeLayout{}), error_feedback);
  }
}

DType TrainConfig::compute_dtype() const {
  switch (parse_enum<Precision>(precision)) {
    case Precision::kFp16:
      return DType::kF16;
    case Precision::kBf16:
      return DType::kBf16;
    case Precision::kFp32:
      break;
  }
  return DType::kF32;
}

ModelConfig TrainConfig::model_config() const {
  ModelConfig mc;
  static_cast<ModelFlags&>(mc) = *this;
  mc.image_size = image_size;
  mc.channels = data_info().channels;
  mc.num_classes = num_classes;
  mc.label_smoothing = label_smoothing;
  mc.padding_style = parse_enum<PaddingStyle>(padding_style);
  return mc;
}

std::map<std::string, std::string> TrainConfig::to_flags() const { return saved_flags(train_flags(), *this); }

}  // namespace tg

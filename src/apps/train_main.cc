// terngrad-train: the command-line front-end of the Trainer. Flags follow the reference's trainers; any flag
// can come from --config FILE (INI/TOML, CLI11), the command line overrides it. A usage error (unknown flag,
// malformed value) prints one line and exits 2; a bad value or a failure prints one line and exits 1.
// SIGINT/SIGTERM: the step running finishes, a checkpoint is saved, exit 0 (app_cli.h: at most 10 s,
// and a second signal exits at once with 128 + signal).
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cstdio>
#include <memory>

#include "app_cli.h"

#include "terngrad/backend/backend.h"
#include "terngrad/comm/mpi_communicator.h"
#include "terngrad/core/logging.h"
#include "terngrad/data/image_codec.h"
#include "terngrad/models/registry.h"
#include "terngrad/train/train_config.h"
#include "terngrad/train/trainer.h"

namespace {

void add_flags(CLI::App& app, tg::TrainConfig& c, std::string& log_level, bool& summary) {
  app.set_config("--config", "", "read flags from an INI/TOML file (the command line overrides it)");
  app.allow_config_extras(CLI::config_extras_mode::error);  // an unknown key in a config file is an error
  app.add_option("--train_dir", c.train_dir, "checkpoints and logs; an existing one is resumed")
      ->capture_default_str();
  app.add_option("--data_dir", c.data_dir, "folder of <subset>-* TFRecord shards");
  app.add_option("--dataset", c.dataset, "mnist | fashion_mnist | cifar10 | imagenet")->capture_default_str();
  app.add_option("--subset", c.subset, "training subset: files <data_dir>/<subset>-*")->capture_default_str();
  app.add_option("--device", c.device, "cpu | cuda | cuda:<k>")->capture_default_str();
  app.add_option("--num_gpus", c.num_gpus, "GPUs used by this process (cuda)")->capture_default_str();
  app.add_option("--num_nodes", c.num_nodes, "workers (towers) in this process; -1: one per GPU")
      ->capture_default_str();
  app.add_option("--threads", c.threads, "CPU threads (0: all cores)")->capture_default_str();
  app.add_option("--cpu_replicas", c.cpu_replicas,
                 "--device cpu: replicas in this process, each on its own thread with --threads / replicas threads")
      ->capture_default_str();
  app.add_option("--allow_tf32", c.allow_tf32,
                 "cuda: TF32 tensor-core math for fp32 convolutions and matrix products (faster, ~1e-3 error)")
      ->capture_default_str();
  app.add_option("--precision", c.precision,
                 "compute dtype: fp32 | fp16 (cuda; dynamic loss scaling) | bf16 (cuda, or a CPU with AVX512_BF16 or "
                 "AMX); weights, optimizer state, BN statistics and the loss stay fp32")
      ->capture_default_str();
  app.add_flag_callback("--fp16", [&c] { c.precision = "fp16"; }, "alias of --precision fp16 (NVIDIA's scripts)");
  app.add_option("--net", c.net, "network: lenet, cifarnet (cifar10_alexnet), alexnet, resnet50, inception_v3")
      ->capture_default_str();
  app.add_option("--image_size", c.image_size, "square input size (0: the dataset's)")->capture_default_str();
  app.add_option("--num_classes", c.num_classes, "classes (0: the dataset's; ImageNet 1001)")->capture_default_str();
  app.add_option("--weight_decay", c.weight_decay, "L2 coefficient")->capture_default_str();
  app.add_option("--dropout_keep_prob", c.dropout_keep_prob, "dropout keep probability")->capture_default_str();
  app.add_option("--label_smoothing", c.label_smoothing, "label smoothing (<0: 0.1 for inception_v3, else 0)")
      ->capture_default_str();
  app.add_option("--aux_logits", c.aux_logits, "inception_v3: auxiliary head, weight 0.4 in the loss")
      ->capture_default_str();
  app.add_option("--zero_init_last_bn_gamma", c.zero_init_last_bn_gamma,
                 "resnet50: start each block's last BN gamma at 0")
      ->capture_default_str();
  app.add_option("--batch_size", c.batch_size, "TOTAL batch over all workers")->capture_default_str();
  app.add_option("--max_steps", c.max_steps, "iterations")->capture_default_str();
  app.add_option("--optimizer", c.optimizer, "gd | momentum | adam | rmsprop")->capture_default_str();
  app.add_option("--initial_learning_rate", c.initial_learning_rate, "base learning rate")->capture_default_str();
  app.add_option("--learning_rate_decay_type", c.learning_rate_decay_type,
                 "fixed | exponential | polynomial | cosine (adam: always fixed)")
      ->capture_default_str();
  app.add_option("--num_epochs_per_decay", c.num_epochs_per_decay, "exponential decay period")
      ->capture_default_str();
  app.add_option("--learning_rate_decay_factor", c.learning_rate_decay_factor, "exponential decay factor")
      ->capture_default_str();
  app.add_option("--warmup_steps", c.warmup_steps, "linear warm-up steps (cosine)")->capture_default_str();
  app.add_option("--momentum", c.momentum, "momentum (also RMSProp's)")->capture_default_str();
  app.add_option("--moving_average_decay", c.moving_average_decay, "EMA of weights")->capture_default_str();
  app.add_option("--grad_bits", c.grad_bits, "1 (TernGrad) | 16 | 32")->capture_default_str();
  app.add_option("--clip_factor", c.clip_factor, "clip at c*sigma before ternarizing (0: no clipping)")
      ->capture_default_str();
  app.add_option("--size_to_binarize", c.size_to_binarize, "tensors smaller than this stay fp32")
      ->capture_default_str();
  app.add_flag("--quantize_logits", c.quantize_logits, "also ternarize the logits layer (--quantize_logits=true)");
  app.add_option("--exchange", c.exchange, "auto | allgather2 | allreduce8")->capture_default_str();
  app.add_option("--overlap", c.overlap, "exchange gradient buckets while backward runs (--overlap=false: after)")
      ->capture_default_str();
  app.add_option("--bucket_mb", c.bucket_mb, "MiB of fp32 gradient per exchanged bucket")->capture_default_str();
  app.add_option("--seed", c.seed, "seed of initialisation, ternarization, dropout, augmentation")
      ->capture_default_str();
  app.add_option("--save_iter", c.save_iter, "checkpoint every N steps (and at the end)")->capture_default_str();
  app.add_option("--keep_checkpoints", c.keep_checkpoints, "checkpoints kept")->capture_default_str();
  app.add_option("--log_every", c.log_every, "log line every N steps")->capture_default_str();
  app.add_option("--metrics_jsonl", c.metrics_jsonl, "append one JSON object per logged step and a summary");
  app.add_option("--timeline", c.timeline, "write a Chrome trace (Perfetto, chrome://tracing) of --timeline_steps");
  app.add_option("--timeline_steps", c.timeline_steps, "steps traced by --timeline: A-B or A (1-based)")
      ->capture_default_str();
  app.add_flag("--benchmark_mode", c.benchmark_mode, "synthetic input (0.5 images, random labels)");
  app.add_option("--check_replicas_every", c.check_replicas_every, "(debug) compare replica checksums every N steps")
      ->capture_default_str();
  app.add_option("--num_readers", c.num_readers, "TFRecord reader threads")->capture_default_str();
  app.add_option("--num_preprocess_threads", c.num_preprocess_threads, "decode/augment threads")
      ->capture_default_str();
  app.add_option("--shuffle_buffer", c.shuffle_buffer, "examples in the shuffle buffer")->capture_default_str();
  app.add_flag("--skip_corrupt_records", c.skip_corrupt_records, "count and skip bad records instead of failing");
  app.add_option("--tfrecord_compression", c.tfrecord_compression, "auto | none | gzip | zlib")->capture_default_str();
  app.add_option("--jpeg_dct", c.jpeg_dct, "fast (TF's decode_jpeg default) | accurate")->capture_default_str();
  app.add_option("--max_image_pixels", c.max_image_pixels, "refuse larger images (checked from the header)")
      ->capture_default_str();
  app.add_option("--max_corrupt_fraction", c.max_corrupt_fraction,
                 "--skip_corrupt_records: stop when more of a pass over the data is bad")
      ->capture_default_str();
  app.add_option("--log_level", log_level, "trace | debug | info | warn | error")->capture_default_str();
  app.add_flag("--summary", summary, "print the layer table and parameter count, then exit");
}

int print_summary(tg::TrainConfig c) {
  c.resolve_defaults();
  const tg::ModelConfig mc = c.model_config();
  auto be = tg::make_backend("cpu", {1});
  tg::Net net;
  tg::build_model(c.net, mc, net);
  net.setup(*be, 1);
  std::printf("%-44s %-22s %-22s %12s\n", "layer", "type", "output", "parameters");
  int64_t total = 0;
  for (const auto& row : net.summary()) {
    std::printf("%-44s %-22s %-22s %12lld\n", row.name.c_str(), row.type.c_str(), row.output.str().c_str(),
                static_cast<long long>(row.parameters));
    total += row.parameters;
  }
  std::printf("total parameters: %lld (%s, %lldx%lldx%lld input, %lld classes)\n", static_cast<long long>(total),
              c.net.c_str(), static_cast<long long>(c.image_size), static_cast<long long>(c.image_size),
              static_cast<long long>(mc.channels), static_cast<long long>(c.num_classes));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // First: SIGINT/SIGTERM are received by one thread of ours, never by a handler on a computing thread.
  tg::apps::StopSignals signals("terngrad-train");
  CLI::App app{"terngrad-train: data-parallel CNN training with ternary gradients (TernGrad)"};
  tg::TrainConfig config;
  std::string log_level = "info";
  bool summary = false;
  add_flags(app, config, log_level, summary);
  tg::apps::strict_integers(app);
  try {
    const std::string bad_config = tg::apps::check_config_file(argc, argv);
    if (!bad_config.empty()) throw CLI::ConversionError(bad_config);
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return tg::apps::usage_error(app, e, "terngrad-train");
  }
  // Outside the try: when one process fails, its error is printed and the whole job aborted (MPI_Abort)
  // before MPI would be finalized, which would wait for the other processes forever.
  std::unique_ptr<tg::MpiEnvironment> mpi;
  std::unique_ptr<tg::MpiCommunicator> comm;
  try {
    tg::setup_logging(log_level);
    if (summary) return print_summary(config);
    if (tg::launched_by_mpi()) {
      mpi = std::make_unique<tg::MpiEnvironment>();
      if (mpi->world_size() > 1) comm = std::make_unique<tg::MpiCommunicator>();
    }
    tg::set_data_flag_defaults(config.tfrecord_compression, config.jpeg_dct, config.max_image_pixels);
    tg::Trainer trainer(config, comm.get());
    tg::TrainResult r = trainer.run(signals.flag());
    if ((!comm || comm->rank() == 0) && !r.already_finished) {
      double saved = r.fp32_bytes_moved ? 1.0 - double(r.bytes_moved) / double(r.fp32_bytes_moved) : 0.0;
      spdlog::info("done: {} steps, final loss {:.4f}, median {:.1f} examples/sec, exchanged {} bytes vs {} in fp32 "
                   "({:.1f}% saved), parameter digest {}",
                   r.steps_done, r.final_loss, r.median_examples_per_sec, r.bytes_moved, r.fp32_bytes_moved,
                   100 * saved, r.parameter_digest);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "terngrad-train: error: %s\n", e.what());
    std::fflush(stderr);
    if (mpi && mpi->world_size() > 1) tg::MpiEnvironment::abort_all(1);
    return 1;
  }
}

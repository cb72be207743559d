// terngrad-eval: evaluates checkpoints of a train_dir (or one --checkpoint_path) on a whole subset, with the
// EMA weights by default, and prints the reference's line:
//   <time>: precision @ 1 = 0.XXXX recall @ 5 = 0.XXXX [N examples]
// --run_once evaluates the latest checkpoint once; otherwise it polls every --eval_interval_secs, evaluates
// each new checkpoint once and exits after the checkpoint of step >= --max_steps.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>
#include <thread>

#include "app_cli.h"
#include "terngrad/backend/backend.h"
#include "terngrad/core/logging.h"
#include "terngrad/data/image_codec.h"
#include "terngrad/data/input_pipeline.h"
#include "terngrad/models/registry.h"
#include "terngrad/optim/moving_average.h"
#include "terngrad/train/batch_source.h"
#include "terngrad/train/checkpoint.h"
#include "terngrad/train/event_writer.h"
#include "terngrad/train/train_config.h"

namespace {

struct EvalConfig {
  std::string checkpoint_dir = "/tmp/terngrad_train";
  std::string checkpoint_path;
  std::string data_dir;
  std::string subset;  // default: the dataset's eval subset
  std::string device = "cpu";
  int64_t batch_size = 100;
  bool restore_avg_var = true;
  bool run_once = false;
  double eval_interval_secs = 60;
  int64_t max_steps = 0;  // 0: the trainer's --max_steps from the checkpoint
  int threads = 0;
  int num_preprocess_threads = 2;
  bool skip_corrupt_records = false;
  std::string tfrecord_compression = "auto";
  std::string jpeg_dct = "fast";
  int64_t max_image_pixels = tg::kDefaultMaxImagePixels;
  double max_corrupt_fraction = 0.01;
  std::string eval_dir;  // when set: eval_dir/eval.jsonl gets one line per evaluated checkpoint
};

std::string now_string() {
  std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", std::localtime(&t));
  return buf;
}

// Evaluates one checkpoint; returns its step.
int64_t evaluate(const EvalConfig& ec, const std::string& path, tg::EventWriter* events) {
  tg::CheckpointReader reader(path);
  const tg::CheckpointMeta& m = reader.meta();
  const tg::DatasetInfo& data = tg::dataset_info(m.dataset);
  tg::ModelConfig mc;
  mc.image_size = m.image_size;
  mc.channels = m.channels;
  mc.num_classes = m.num_classes;
  auto aux = m.flags.find("aux_logits");  // the structure the checkpoint was trained with
  if (aux != m.flags.end()) mc.aux_logits = aux->second == "true";
  tg::BackendOptions bo;
  bo.threads = ec.threads;
  auto be = tg::make_backend(ec.device, bo);
  tg::Net net;
  tg::build_model(m.model, mc, net);
  net.setup(*be, ec.batch_size);
  tg::ParameterStore store(net.param_specs(), net.state_specs(), *be);
  net.bind(store);
  using Layout = tg::CheckpointLayout;
  auto load = [&](Layout::Part part, tg::Slab& slab) {
    tg::read_slab(reader, *be, slab, [&](const std::string& name) {
      return ec.restore_avg_var ? Layout::name(Layout::kEma, tg::ExponentialMovingAverage::shadow_name(name))
                                : Layout::name(part, name);
    });
  };
  load(Layout::kParams, store.params());
  load(Layout::kState, store.state());
  spdlog::info("Successfully loaded model from {} at step={} (parameter digest {}{})", path, m.step,
               m.parameter_digest, ec.restore_avg_var ? ", using the moving averages" : "");

  tg::PipelineOptions po;
  po.data_dir = ec.data_dir;
  po.subset = ec.subset.empty() ? data.eval_subset : ec.subset;
  po.dataset = m.dataset;
  po.net = m.model;
  po.image_size = static_cast<int>(m.image_size);
  po.batch_size = static_cast<int>(ec.batch_size);
  po.num_preprocess_threads = ec.num_preprocess_threads;
  po.num_classes = static_cast<int>(m.num_classes);
  po.skip_corrupt_records = ec.skip_corrupt_records;
  po.max_corrupt_fraction = ec.max_corrupt_fraction;
  auto source = tg::make_eval_batch_source(po);

  tg::Buffer images(tg::host_allocator(),
                    static_cast<size_t>(ec.batch_size * m.image_size * m.image_size * m.channels) * sizeof(float));
  tg::Buffer labels(tg::host_allocator(), static_cast<size_t>(ec.batch_size) * sizeof(int32_t));
  tg::Tensor x(images.data(), tg::Shape{ec.batch_size, m.image_size, m.image_size, m.channels}, tg::DType::F32,
               tg::Device::cpu());
  tg::Tensor y(labels.data(), tg::Shape{ec.batch_size}, tg::DType::I32, tg::Device::cpu());
  std::vector<float> logits(static_cast<size_t>(ec.batch_size * m.num_classes));
  int64_t examples = 0, top1 = 0, top5 = 0, batches = 0;
  for (;;) {
    const int64_t n = source->next(x, y);
    if (n == 0) break;
    net.forward(x, y, false);
    be->copy(tg::Tensor(logits.data(), tg::Shape{ec.batch_size, m.num_classes}, tg::DType::F32, tg::Device::cpu()),
             net.tensor(net.logits_name()));
    const int32_t* lab = y.data<int32_t>();
    for (int64_t i = 0; i < n; ++i) {
      const float* row = logits.data() + i * m.num_classes;
      const float target = row[lab[i]];
      int64_t rank = 0;  // classes scoring strictly higher than the label (TF in_top_k)
      for (int64_t k = 0; k < m.num_classes; ++k) rank += row[k] > target;
      top1 += rank < 1;
      top5 += rank < 5;
    }
    examples += n;
    if (++batches % 100 == 0) spdlog::info("[{} batches, {} examples]", batches, examples);
  }
  TG_CHECK(examples > 0, "--data_dir {}: the subset '{}' has no examples", ec.data_dir, po.subset);
  if (source->skipped_records() > 0)
    spdlog::warn("--skip_corrupt_records: skipped {} corrupt records", source->skipped_records());
  std::printf("%s: precision @ 1 = %.4f recall @ 5 = %.4f [%lld examples]\n", now_string().c_str(),
              double(top1) / double(examples), double(top5) / double(examples), static_cast<long long>(examples));
  std::fflush(stdout);
  if (!ec.eval_dir.empty()) {
    std::filesystem::create_directories(ec.eval_dir);
    const std::string jsonl = (std::filesystem::path(ec.eval_dir) / "eval.jsonl").string();
    std::FILE* f = std::fopen(jsonl.c_str(), "a");
    TG_CHECK(f != nullptr, "--eval_dir {}: cannot open {}", ec.eval_dir, jsonl);
    std::fprintf(f, "{\"step\": %lld, \"precision_at_1\": %.6f, \"recall_at_5\": %.6f, \"examples\": %lld, "
                 "\"checkpoint\": \"%s\", \"parameter_digest\": \"%s\"}\n",
                 static_cast<long long>(m.step), double(top1) / double(examples), double(top5) / double(examples),
                 static_cast<long long>(examples), path.c_str(), m.parameter_digest.c_str());
    std::fclose(f);
    events->scalars(m.step, {{"Accuracy @ 1", static_cast<float>(double(top1) / examples)},
                             {"Accuracy @ 5", static_cast<float>(double(top5) / examples)}});
  }
  return m.step;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"terngrad-eval: precision@1 / recall@5 of terngrad checkpoints"};
  EvalConfig ec;
  std::string log_level = "info";
  app.set_config("--config", "", "read flags from an INI/TOML file");
  app.allow_config_extras(CLI::config_extras_mode::error);
  app.add_option("--checkpoint_dir", ec.checkpoint_dir, "train_dir whose checkpoints to evaluate")
      ->capture_default_str();
  app.add_option("--checkpoint_path", ec.checkpoint_path, "evaluate this checkpoint file once");
  app.add_option("--data_dir", ec.data_dir, "folder of <subset>-* TFRecord shards")->required();
  app.add_option("--eval_dir", ec.eval_dir, "append one JSON line per evaluated checkpoint to EVAL_DIR/eval.jsonl");
  app.add_option("--subset", ec.subset, "test | validation | train (default: the dataset's eval subset)");
  app.add_option("--device", ec.device, "cpu | cuda | cuda:<k>")->capture_default_str();
  app.add_option("--batch_size", ec.batch_size, "evaluation batch")->capture_default_str();
  app.add_option("--restore_avg_var", ec.restore_avg_var, "evaluate the EMA of the weights (true) or the weights")
      ->capture_default_str();
  app.add_flag("--run_once", ec.run_once, "evaluate the latest checkpoint once and exit");
  app.add_option("--eval_interval_secs", ec.eval_interval_secs, "poll period")->capture_default_str();
  app.add_option("--max_steps", ec.max_steps, "exit after evaluating a checkpoint of this step (0: the trainer's)")
      ->capture_default_str();
  app.add_option("--threads", ec.threads, "CPU threads (0: all)")->capture_default_str();
  app.add_option("--num_preprocess_threads", ec.num_preprocess_threads, "decode threads")->capture_default_str();
  app.add_flag("--skip_corrupt_records", ec.skip_corrupt_records, "count and skip bad records");
  app.add_option("--tfrecord_compression", ec.tfrecord_compression, "auto | none | gzip | zlib")->capture_default_str();
  app.add_option("--jpeg_dct", ec.jpeg_dct, "fast (TF's decode_jpeg default) | accurate")->capture_default_str();
  app.add_option("--max_image_pixels", ec.max_image_pixels, "refuse larger images (checked from the header)")
      ->capture_default_str();
  app.add_option("--max_corrupt_fraction", ec.max_corrupt_fraction,
                 "--skip_corrupt_records: stop when more of the subset is bad")
      ->capture_default_str();
  app.add_option("--log_level", log_level, "trace | debug | info | warn | error")->capture_default_str();
  tg::apps::strict_integers(app);
  try {
    const std::string bad_config = tg::apps::check_config_file(argc, argv);
    if (!bad_config.empty()) throw CLI::ConversionError(bad_config);
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return tg::apps::usage_error(app, e, "terngrad-eval");
  }
  try {
    tg::setup_logging(log_level);
    TG_CHECK(ec.batch_size >= 1 && ec.batch_size <= (1 << 20), "--batch_size {} is not in [1, {}]", ec.batch_size,
             1 << 20);
    TG_CHECK(ec.threads >= 0 && ec.threads <= 4096, "--threads {} is not in [0, 4096]", ec.threads);
    TG_CHECK(ec.num_preprocess_threads >= 1 && ec.num_preprocess_threads <= 4096,
             "--num_preprocess_threads {} is not in [1, 4096]", ec.num_preprocess_threads);
    TG_CHECK(ec.max_corrupt_fraction >= 0 && ec.max_corrupt_fraction <= 1, "--max_corrupt_fraction {} is not in [0, 1]",
             ec.max_corrupt_fraction);
    TG_CHECK(ec.max_steps >= 0, "--max_steps {} must be >= 0 (0: the trainer's)", ec.max_steps);
    TG_CHECK(ec.eval_interval_secs > 0, "--eval_interval_secs {} must be positive", ec.eval_interval_secs);
    tg::set_data_flag_defaults(ec.tfrecord_compression, ec.jpeg_dct, ec.max_image_pixels);
    std::unique_ptr<tg::EventWriter> events;
    if (!ec.eval_dir.empty()) events = std::make_unique<tg::EventWriter>(ec.eval_dir);
    if (!ec.checkpoint_path.empty()) {
      evaluate(ec, ec.checkpoint_path, events.get());
      return 0;
    }
    int64_t last_step = -1;
    for (;;) {
      std::optional<std::string> latest = tg::latest_checkpoint(ec.checkpoint_dir);
      if (!latest) {
        TG_CHECK(!ec.run_once, "--checkpoint_dir {} has no checkpoint", ec.checkpoint_dir);
      } else {
        tg::CheckpointReader reader(*latest);
        const int64_t step = reader.meta().step;
        if (step != last_step) {
          evaluate(ec, *latest, events.get());
          last_step = step;
          int64_t max_steps = ec.max_steps;
          if (max_steps == 0) {
            auto it = reader.meta().flags.find("max_steps");
            if (it != reader.meta().flags.end()) {
              TG_CHECK(!it->second.empty() && it->second.find_first_not_of("0123456789") == std::string::npos,
                       "{}: flag max_steps '{}' is not a number; pass --max_steps", *latest, it->second);
              max_steps = std::stoll(it->second);
            }
          }
          if (ec.run_once || (max_steps > 0 && step >= max_steps)) return 0;
        }
      }
      std::this_thread::sleep_for(std::chrono::duration<double>(ec.eval_interval_secs));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "terngrad-eval: error: %s\n", e.what());
    return 1;
  }
}

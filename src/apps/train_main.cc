// terngrad-train: the command-line front-end of the Trainer. Flags follow the reference's trainers; any flag
// can come from --config FILE (INI/TOML, CLI11), the command line overrides it. A usage error (unknown flag,
// malformed value) prints one line and exits 2; a bad value or a failure prints one line and exits 1.
// SIGINT/SIGTERM: the step running finishes, a checkpoint is saved, exit 0 (stop_signals.h: at most 10 s,
// and a second signal exits at once with 128 + signal).
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "app_cli.h"
#include "help_format.h"
#include "stop_signals.h"
#include "terngrad/backend/backend.h"
#include "terngrad/backend/planning_backend.h"
#include "terngrad/comm/mpi_communicator.h"
#include "terngrad/core/human_units.h"
#include "terngrad/core/launcher.h"
#include "terngrad/core/logging.h"
#include "terngrad/core/machine_load.h"
#include "terngrad/data/image_codec.h"
#include "terngrad/models/registry.h"
#include "terngrad/train/evaluator.h"
#include "terngrad/train/event_writer.h"
#include "terngrad/train/memory_budget.h"
#include "terngrad/train/train_config.h"
#include "terngrad/train/train_flags.h"
#include "terngrad/train/trainer.h"

namespace {

// The program's own settings (beside TrainConfig's).
struct MainOptions : tg::apps::LogLevel {
  bool summary = false;
  bool plan_memory = false;
  std::string fit_memory;
};

tg::FlagCheck memory_size() {
  tg::FlagCheck c;
  c.parse = [](std::string_view text, std::string_view flag) {
    if (!text.empty()) tg::parse_memory_size(std::string(text), std::string(flag));
  };
  return c;
}

const std::vector<tg::Flag<MainOptions>>& main_flags() {
  static const std::vector<tg::Flag<MainOptions>> table = {
      tg::apps::log_level_flag<MainOptions>(),
      {"summary", &MainOptions::summary,
       "print the layer table (name, type, output shape, parameters) and the total, then exit", tg::no_check(),
       tg::kFlagSwitch},
      {"plan_memory", &MainOptions::plan_memory,
       "print what one device holds for these flags (net, batch, --precision, --device, workers, exchange, "
       "--memory_plan, --recompute), area by area, planned without allocating anything (no GPU needed for "
       "`--device cuda`), and what this machine has available; then exit",
       tg::no_check(), tg::kFlagSwitch},
      {"fit_memory", &MainOptions::fit_memory,
       "with or without `--plan_memory`: also the largest `--batch_size` whose plan fits in this much memory per "
       "device (`80GiB`, `80 GB`, `8e10`), then exit",
       memory_size()},
  };
  return table;
}

// --help's groups, the common ones first (src/apps/help_format.h); a flag of no group is listed under "Other".
std::vector<std::pair<std::string, std::vector<std::string>>> help_groups() {
  return {
      {"Start",
       {"config", "train_dir", "data_dir", "net", "dataset", "max_steps", "batch_size", "num_nodes", "threads",
        "eval_every", "device"}},
      {"Model and data",
       {"image_size", "num_classes", "subset", "weight_decay", "dropout_keep_prob", "label_smoothing", "aux_logits",
        "padding_style", "zero_init_last_bn_gamma", "num_readers", "num_preprocess_threads", "shuffle_buffer",
        "skip_corrupt_records", "max_corrupt_fraction", "tfrecord_compression", "jpeg_dct", "max_image_pixels",
        "pretrained_model_checkpoint_path", "fine_tune"}},
      {"Training",
       {"optimizer", "momentum", "initial_learning_rate", "learning_rate_decay_type", "num_epochs_per_decay",
        "learning_rate_decay_factor", "warmup_steps", "schedule_steps", "moving_average_decay", "seed", "save_iter",
        "save_secs", "keep_checkpoints", "eval_secs", "eval_subset", "eval_at_end", "log_every", "benchmark_mode"}},
      {"TernGrad and the exchange",
       {"grad_bits", "clip_factor", "size_to_binarize", "quantize_logits", "scaler_bucket", "exchange",
        "error_feedback", "local_bits", "overlap", "decode_in_update", "fp32_warmup_steps", "powersgd_rank",
        "bucket_mb"}},
      {"Several processes and machines",
       {"ranks_per_node", "cpu_replicas", "collective_timeout", "allow_topology_change", "reset_rank_state",
        "elastic_batch", "generation", "stop_file"}},
      {"Devices, precision and memory",
       {"num_gpus", "precision", "fp16", "allow_tf32", "deterministic", "conv_search", "memory_plan", "recompute",
        "plan_memory", "fit_memory"}},
      {"Output and checks",
       {"metrics_jsonl", "log_level", "timeline", "timeline_steps", "timeline_layers", "check_replicas_every",
        "quantization_error_every", "exchange_dump", "exchange_dump_step", "summary", "version", "help",
        "help-markdown"}},
  };
}

constexpr const char* kHelpFooter = R"(
Examples (configs/ holds the recipes of the five networks, TernGrad and fp32):
  terngrad-train --config configs/fashion_mnist_lenet_terngrad.ini --data_dir D --train_dir T
      LeNet with TernGrad on 2 workers in this process (--eval_every 125: its learning curve in T)
  mpirun -np 2 terngrad-train --config configs/fashion_mnist_lenet_fp32.ini --num_nodes 1 ...
      fp32 on 2 processes of one worker each (as root: mpirun --allow-run-as-root ...)
  terngrad-train --net resnet50 --dataset imagenet --device cuda --batch_size 256 --plan_memory
      the memory such a run takes, by area, without running it
Without --config a run trains LeNet on Fashion-MNIST with fp32 gradients (--grad_bits 32) on one
worker. Rerunning the same command resumes from the last checkpoint in --train_dir.)";

void add_flags(CLI::App& app, tg::TrainConfig& c, MainOptions& options) {
  app.formatter(std::make_shared<tg::apps::HelpFormat>(help_groups()));
  app.footer(kHelpFooter);
  app.set_config("--config", "", "read flags from an INI/TOML file (the command line overrides it)");
  app.allow_config_extras(CLI::config_extras_mode::error);  // an unknown key in a config file is an error
  tg::apps::add_flag_table(app, tg::train_flags(), c);
  tg::apps::add_flag_table(app, main_flags(), options);
  tg::apps::add_help_markdown(app, [] {
    return tg::flags_markdown_rows(tg::train_flags(), tg::TrainConfig{}) +
           tg::flags_markdown_rows(main_flags(), MainOptions{});
  });
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

// --plan_memory / --fit_memory: one device's plan for these flags on one process (nothing allocated), what this
// machine has, and the largest batch that fits in --fit_memory.
int print_memory_plan(tg::TrainConfig c, const MainOptions& o) {
  c.resolve_defaults();
  TG_CHECK(c.batch_size % c.workers_per_process() == 0, "--batch_size {} is not divisible by the {} workers",
           c.batch_size, c.workers_per_process());
  const std::string device = c.device == "cuda" ? "cuda:0" : c.device;
  auto be = tg::make_planning_backend(device);
  const tg::TrainingLayout layout = tg::TrainingLayout::of(c, 1);
  const tg::DeviceMemoryPlan plan = tg::plan_device_memory(c, *be, layout);
  std::printf(
      "memory plan of one %s: --net %s --image_size %lld --batch_size %lld (%d worker%s x %lld) "
      "--precision %s --memory_plan %s --recompute %s --grad_bits %d\n%s",
      be->device().is_cpu() ? "CPU replica" : "GPU", c.net.c_str(), static_cast<long long>(c.image_size),
      static_cast<long long>(c.batch_size), layout.workers_per_replica, layout.workers_per_replica == 1 ? "" : "s",
      static_cast<long long>(layout.worker_batch), c.precision.c_str(), c.memory_plan.c_str(), c.recompute.c_str(),
      c.grad_bits, plan.table().c_str());
  std::printf(
      "not planned: the backend's scratch (oneDNN's per-primitive scratchpads; cuDNN's workspace, up to 1 GiB)\n");
  if (be->device().is_cpu()) {
    const size_t avail = tg::available_memory(*be, 1);
    if (avail != SIZE_MAX)
      std::printf("available on this machine: %s (MemAvailable, or the cgroup's limit less its use)\n",
                  tg::human_bytes(double(avail)).c_str());
  }
  if (!o.fit_memory.empty()) {
    const size_t budget = tg::parse_memory_size(o.fit_memory, "--fit_memory");
    const int64_t w = layout.workers_per_replica;
    const int64_t b = tg::largest_fitting_worker_batch(c, *be, layout, budget, int64_t{1} << 20);
    if (b == 0)
      std::printf("--fit_memory %s: not even --batch_size %lld (%lld x 1) fits\n", o.fit_memory.c_str(),
                  static_cast<long long>(w), static_cast<long long>(w));
    else
      std::printf("--fit_memory %s: the largest --batch_size that fits is %lld (%lld worker%s x %lld)\n",
                  o.fit_memory.c_str(), static_cast<long long>(b * w), static_cast<long long>(w), w == 1 ? "" : "s",
                  static_cast<long long>(b));
  }
  return 0;
}

// The flags the command line or --config gave (a resumed run keeps the checkpoint's value of the others).
std::set<std::string> given_flags(const CLI::App& app) {
  std::set<std::string> given;
  for (const CLI::Option* o : app.get_options())
    if (o->count() > 0)
      for (const std::string& n : o->get_lnames()) given.insert(n);
  return given;
}

// The end of a run: one `done:` line (at every log level but off), where the checkpoint is, and with
// --eval_at_end the final checkpoint's test accuracy.
void report_done(const tg::TrainConfig& config, const tg::TrainResult& r) {
  const double saved = r.fp32_bytes_moved ? 1.0 - double(r.bytes_moved) / double(r.fp32_bytes_moved) : 0.0;
  tg::log_result(fmt::format(
      "done: {} steps{} in {}{}, final loss {:.4f}, median {:.1f} examples/sec, exchanged {} vs {} in fp32 ({:.1f}% "
      "saved), parameter digest {}",
      r.steps_done, r.start_step > 0 ? fmt::format(" (resumed at {})", r.start_step) : "",
      tg::human_duration(r.wall_seconds),
      r.evaluations > 0 ? fmt::format(" ({} of them {} evaluations)", tg::human_duration(r.eval_seconds), r.evaluations)
                        : "",
      r.final_loss, r.median_examples_per_sec, tg::human_bytes(static_cast<double>(r.bytes_moved)),
      tg::human_bytes(static_cast<double>(r.fp32_bytes_moved)), 100 * saved, r.parameter_digest));
  spdlog::info("checkpoint {}; evaluate it with: terngrad-eval --checkpoint_dir {} --data_dir {} --run_once",
               r.last_checkpoint, config.train_dir, config.data_dir.empty() ? "DATA_DIR" : config.data_dir);
  if (config.eval_at_end.empty() || r.interrupted) return;
  const tg::EvalResult e = tg::Evaluator(tg::eval_options_of(config, config.eval_at_end)).evaluate(r.last_checkpoint);
  tg::EventWriter events(config.train_dir);  // beside the run's curves (TensorBoard, scripts/plot_runs.py)
  tg::record_eval_result(e, config.train_dir, events, "--train_dir");
  tg::log_result(
      fmt::format("test: precision@1 {:.4f}, recall@5 {:.4f} on the {} examples of '{}' (--eval_at_end; "
                  "the moving averages of step {})",
                  e.precision_at_1(), e.recall_at_5(), e.examples, e.subset, e.step));
}

// A CPU run of several threads, started by hand (not mpirun: its processes start together and would count each
// other's start as other work) on a machine other work keeps busy: the process starts again with
// OMP_WAIT_POLICY=passive, so that a team's threads sleep at barriers rather than spin against that work (GCC's
// OpenMP reads the variable when it loads, before main: setting it here changes nothing without the new start).
// LeNet at --threads 2 beside one busy process on 2 cores ran 2.7x faster passive; on an idle machine passive was
// 0.88x, hence only when busy (bench/README.md, "A busy machine"). OMP_WAIT_POLICY set by the user is left alone.
// Returns only when nothing is to be done.
void wait_passively_on_a_busy_machine(const tg::TrainConfig& config, char** argv) {
  if (config.device != "cpu" || std::getenv("OMP_WAIT_POLICY") != nullptr || tg::launched_by_mpi() ||
      std::getenv("TG_KEEP_WAIT_POLICY") != nullptr)  // (the benchmark of the runtime's default)
    return;
  if (!tg::crowding(config.threads, 1, 0.1)) return;
  setenv("OMP_WAIT_POLICY", "passive", 1);
  setenv("TG_WAIT_POLICY_SET", "busy", 1);  // said by the trainer's busy-machine line
  std::fflush(nullptr);
  execv("/proc/self/exe", argv);  // on failure: go on as started
  unsetenv("OMP_WAIT_POLICY");
  unsetenv("TG_WAIT_POLICY_SET");
}

}  // namespace

int main(int argc, char** argv) {
  // First: SIGINT/SIGTERM are received by one thread of ours, never by a handler on a computing thread.
  tg::apps::StopSignals signals("terngrad-train");
  CLI::App app{"terngrad-train: data-parallel CNN training with ternary gradients (TernGrad)"};
  tg::TrainConfig config;
  MainOptions options;
  add_flags(app, config, options);
  if (const int status = tg::apps::parse_command_line(app, argc, argv, "terngrad-train"); status >= 0) return status;
  config.given_flags = given_flags(app);
  wait_passively_on_a_busy_machine(config, argv);
  // Outside the try: when one process fails, its error is printed and the whole job aborted (MPI_Abort)
  // before MPI would be finalized, which would wait for the other processes forever.
  std::unique_ptr<tg::MpiEnvironment> mpi;
  std::unique_ptr<tg::MpiCommunicator> comm;
  try {
    tg::setup_logging(options.log_level);
    tg::check_flags(tg::train_flags(), config);  // a bad value is a usage error (exit 2), before MPI starts
    tg::check_flags(main_flags(), options);
    if (options.summary) return print_summary(config);
    if (options.plan_memory || !options.fit_memory.empty()) return print_memory_plan(config, options);
    if (tg::launched_by_mpi()) {
      mpi = std::make_unique<tg::MpiEnvironment>();
      if (mpi->world_size() > 1) comm = std::make_unique<tg::MpiCommunicator>();
    }
    config.apply_decode_defaults();
    tg::Trainer trainer(config, comm.get());
    const tg::TrainResult r = trainer.run(signals.flag());
    if ((!comm || comm->rank() == 0) && !r.already_finished) report_done(config, r);
    return 0;
  } catch (const std::exception& e) {
    const bool several = mpi && mpi->world_size() > 1;
    const int status = tg::apps::report_error(
        e, "terngrad-train",
        several ? fmt::format("process {} of {}", mpi->world_rank(), mpi->world_size()) : std::string());
    if (several) tg::MpiEnvironment::abort_all(status);
    return status;
  }
}

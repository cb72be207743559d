// terngrad-train: the command-line front-end of the Trainer. Flags follow the reference's trainers; any flag
// can come from --config FILE (INI/TOML, CLI11), the command line overrides it. A usage error (unknown flag,
// malformed value) prints one line and exits 2; a bad value or a failure prints one line and exits 1.
// SIGINT/SIGTERM: the step running finishes, a checkpoint is saved, exit 0 (app_cli.h: at most 10 s,
// and a second signal exits at once with 128 + signal).
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdio>
#include <memory>
#include <set>
#include <string>

#include "app_cli.h"
#include "terngrad/backend/backend.h"
#include "terngrad/comm/mpi_communicator.h"
#include "terngrad/core/human_units.h"
#include "terngrad/core/logging.h"
#include "terngrad/data/image_codec.h"
#include "terngrad/models/registry.h"
#include "terngrad/train/evaluator.h"
#include "terngrad/train/event_writer.h"
#include "terngrad/train/train_config.h"
#include "terngrad/train/train_flags.h"
#include "terngrad/train/trainer.h"

namespace {

// The program's own settings (beside TrainConfig's).
struct MainOptions {
  std::string log_level = "info";
  bool summary = false;
};

const std::vector<tg::Flag<MainOptions>>& main_flags() {
  static const std::vector<tg::Flag<MainOptions>> table = {
      tg::apps::log_level_flag<MainOptions>(),
      {"summary", &MainOptions::summary,
       "print the layer table (name, type, output shape, parameters) and the total, then exit", tg::no_check(),
       tg::kFlagSwitch},
  };
  return table;
}

void add_flags(CLI::App& app, tg::TrainConfig& c, MainOptions& options) {
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
      "done: {} steps{} in {}, final loss {:.4f}, median {:.1f} examples/sec, exchanged {} vs {} in fp32 ({:.1f}% "
      "saved), parameter digest {}",
      r.steps_done, r.start_step > 0 ? fmt::format(" (resumed at {})", r.start_step) : "",
      tg::human_duration(r.wall_seconds), r.final_loss, r.median_examples_per_sec,
      tg::human_bytes(static_cast<double>(r.bytes_moved)), tg::human_bytes(static_cast<double>(r.fp32_bytes_moved)),
      100 * saved, r.parameter_digest));
  spdlog::info("checkpoint {}; evaluate it with: terngrad-eval --checkpoint_dir {} --data_dir {} --run_once",
               r.last_checkpoint, config.train_dir, config.data_dir.empty() ? "DATA_DIR" : config.data_dir);
  if (config.eval_at_end.empty() || r.interrupted) return;
  tg::EvalOptions eo;
  static_cast<tg::DataConfig&>(eo) = config;
  eo.data_dir = config.data_dir;
  eo.subset = config.eval_at_end;
  eo.device = config.device == "cpu" ? "cpu" : "cuda:0";
  eo.threads = config.threads;
  const tg::EvalResult e = tg::Evaluator(eo).evaluate(r.last_checkpoint);
  tg::EventWriter events(config.train_dir);  // beside the run's curves (TensorBoard, scripts/plot_runs.py)
  tg::record_eval_result(e, config.train_dir, events, "--train_dir");
  tg::log_result(
      fmt::format("test: precision@1 {:.4f}, recall@5 {:.4f} on the {} examples of '{}' (--eval_at_end; "
                  "the moving averages of step {})",
                  e.precision_at_1(), e.recall_at_5(), e.examples, e.subset, e.step));
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
  // Outside the try: when one process fails, its error is printed and the whole job aborted (MPI_Abort)
  // before MPI would be finalized, which would wait for the other processes forever.
  std::unique_ptr<tg::MpiEnvironment> mpi;
  std::unique_ptr<tg::MpiCommunicator> comm;
  try {
    tg::setup_logging(options.log_level);
    tg::check_flags(tg::train_flags(), config);  // a bad value is a usage error (exit 2), before MPI starts
    if (options.summary) return print_summary(config);
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
    const int status = tg::apps::report_error(e, "terngrad-train");
    if (mpi && mpi->world_size() > 1) tg::MpiEnvironment::abort_all(status);
    return status;
  }
}

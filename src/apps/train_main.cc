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

#include "app_cli.h"
#include "terngrad/backend/backend.h"
#include "terngrad/comm/mpi_communicator.h"
#include "terngrad/core/logging.h"
#include "terngrad/data/image_codec.h"
#include "terngrad/models/registry.h"
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

}  // namespace

int main(int argc, char** argv) {
  // First: SIGINT/SIGTERM are received by one thread of ours, never by a handler on a computing thread.
  tg::apps::StopSignals signals("terngrad-train");
  CLI::App app{"terngrad-train: data-parallel CNN training with ternary gradients (TernGrad)"};
  tg::TrainConfig config;
  MainOptions options;
  add_flags(app, config, options);
  if (const int status = tg::apps::parse_command_line(app, argc, argv, "terngrad-train"); status >= 0) return status;
  // Outside the try: when one process fails, its error is printed and the whole job aborted (MPI_Abort)
  // before MPI would be finalized, which would wait for the other processes forever.
  std::unique_ptr<tg::MpiEnvironment> mpi;
  std::unique_ptr<tg::MpiCommunicator> comm;
  try {
    tg::setup_logging(options.log_level);
    if (options.summary) return print_summary(config);
    if (tg::launched_by_mpi()) {
      mpi = std::make_unique<tg::MpiEnvironment>();
      if (mpi->world_size() > 1) comm = std::make_unique<tg::MpiCommunicator>();
    }
    config.apply_decode_defaults();
    tg::Trainer trainer(config, comm.get());
    tg::TrainResult r = trainer.run(signals.flag());
    if ((!comm || comm->rank() == 0) && !r.already_finished) {
      double saved = r.fp32_bytes_moved ? 1.0 - double(r.bytes_moved) / double(r.fp32_bytes_moved) : 0.0;
      spdlog::info(
          "done: {} steps, final loss {:.4f}, median {:.1f} examples/sec, exchanged {} bytes vs {} in fp32 "
          "({:.1f}% saved), parameter digest {}",
          r.steps_done, r.final_loss, r.median_examples_per_sec, r.bytes_moved, r.fp32_bytes_moved, 100 * saved,
          r.parameter_digest);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "terngrad-train: error: %s\n", e.what());
    std::fflush(stderr);
    if (mpi && mpi->world_size() > 1) tg::MpiEnvironment::abort_all(1);
    return 1;
  }
}

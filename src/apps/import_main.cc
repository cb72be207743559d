// terngrad-import: PyTorch weights (safetensors, or an ONNX model's initializers) of one of our networks as a
// checkpoint of ours (import/torch_import.h), which terngrad-eval evaluates, terngrad-export exports and
// terngrad-train --pretrained_model_checkpoint_path [--fine_tune] trains on from. Prints
//   imported <net> from <input> (<format>): <tensors> tensors, <parameters> parameters, <classes> classes at
//   <size>x<size>, padding torch -> <checkpoint> (parameter digest <crc>); ignored: <keys>
// Errors are one line, exit 1 (2 for a bad flag); nothing is written unless every tensor converted.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>

#include "app_cli.h"
#include "help_format.h"
#include "terngrad/core/error.h"
#include "terngrad/core/logging.h"
#include "terngrad/import/torch_import.h"
#include "terngrad/train/train_flags.h"

namespace {

struct ImportConfig : tg::apps::LogLevel {
  std::string net;
  std::string input;
  std::string output_dir;
  std::string format = "auto";
  std::string dataset;
  int64_t image_size = 0;
};

// The flag table of terngrad-import (core/flag_table.h).
const std::vector<tg::Flag<ImportConfig>>& import_flags() {
  using C = ImportConfig;
  static const std::vector<tg::Flag<C>> table = {
      {"net", &C::net, "the network the weights are of (alexnet is refused: torchvision's is another network)",
       tg::known_network(), tg::kFlagRequired},
      {"input", &C::input,
       "a safetensors file (a state_dict) or an ONNX model exported with training=TrainingMode.TRAINING, "
       "do_constant_folding=False",
       tg::no_check(), tg::kFlagRequired},
      {"output_dir", &C::output_dir, "a new folder: model.ckpt-0 and its `checkpoint` index are written there",
       tg::no_check(), tg::kFlagRequired},
      {"format", &C::format, "auto tells the two apart by the file's first bytes", tg::one_of<tg::WeightsFormat>()},
      {"dataset", &C::dataset, "recorded in the checkpoint; empty: the network's usual one (mnist, cifar10, imagenet)"},
      {"image_size", &C::image_size, "the input size the checkpoint records; 0: the network's or the dataset's",
       tg::in_range(0, 4096, "[]")},
      tg::apps::log_level_flag<C>(),
  };
  return table;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"terngrad-import: PyTorch weights (safetensors, ONNX) as a terngrad checkpoint"};
  app.formatter(std::make_shared<tg::apps::HelpFormat>());  // descriptions wrapped under the names
  ImportConfig ic;
  app.set_config("--config", "", "read flags from an INI/TOML file");
  app.allow_config_extras(CLI::config_extras_mode::error);
  tg::apps::add_flag_table(app, import_flags(), ic);
  tg::apps::add_help_markdown(app, [] { return tg::flags_markdown_rows(import_flags(), ImportConfig{}); });
  if (const int status = tg::apps::parse_command_line(app, argc, argv, "terngrad-import"); status >= 0) return status;
  try {
    tg::setup_logging(ic.log_level);
    tg::check_flags(import_flags(), ic);
    tg::TorchImportOptions o;
    o.net = ic.net;
    o.input = ic.input;
    o.output_dir = ic.output_dir;
    o.format = tg::parse_enum<tg::WeightsFormat>(ic.format);
    o.dataset = ic.dataset;
    o.image_size = ic.image_size;
    const tg::TorchImportSummary s = tg::import_torch_weights(o);
    const std::string ignored =
        s.ignored.empty() ? "none" : std::to_string(s.ignored.size()) + " keys (num_batches_tracked)";
    std::printf(
        "imported %s from %s (%s): %lld tensors, %lld parameters, %lld classes%s at %lldx%lld, padding torch -> %s "
        "(parameter digest %s); ignored: %s\n",
        ic.net.c_str(), ic.input.c_str(), tg::enum_name(s.format), static_cast<long long>(s.tensors),
        static_cast<long long>(s.parameters), static_cast<long long>(s.num_classes),
        s.aux_logits ? " (with the auxiliary head)" : "", static_cast<long long>(s.image_size),
        static_cast<long long>(s.image_size), s.checkpoint.c_str(), s.parameter_digest.c_str(), ignored.c_str());
    return 0;
  } catch (const std::exception& e) {
    return tg::apps::report_error(e, "terngrad-import");
  }
}

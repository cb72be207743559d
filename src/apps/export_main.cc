// terngrad-export: the front-end of tg::export_onnx (export/onnx_export.h). It writes the latest checkpoint of a
// train_dir (or one --checkpoint_path) as an ONNX model that ONNX Runtime and other ONNX tools run, and prints
//   exported <net> step <N> (<weights> weights) to <output>: <nodes> nodes, <parameters> parameters, <bytes> bytes,
//   opset <K>, weights digest <crc>
// Errors (no checkpoint, an unknown net or checkpoint format, an output that cannot be written) are one line and
// exit 1; nothing is left at --output.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>

#include "app_cli.h"
#include "help_format.h"
#include "terngrad/core/error.h"
#include "terngrad/core/logging.h"
#include "terngrad/export/onnx_export.h"
#include "terngrad/train/checkpoint.h"
#include "terngrad/train/train_config.h"

namespace {

struct ExportConfig : tg::apps::LogLevel {
  std::string checkpoint_dir = tg::kDefaultTrainDir;
  std::string checkpoint_path;
  std::string output;
  std::string weights = "ema";
  int64_t batch_size = 0;  // 0: dynamic
  int opset = tg::kDefaultOnnxOpset;
};

// The flag table of terngrad-export (core/flag_table.h).
const std::vector<tg::Flag<ExportConfig>>& export_flags() {
  using C = ExportConfig;
  static const std::vector<tg::Flag<C>> table = {
      {"checkpoint_dir", &C::checkpoint_dir, "a train_dir whose latest checkpoint to export"},
      {"checkpoint_path", &C::checkpoint_path, "export this checkpoint file instead"},
      {"output", &C::output, "the ONNX file to write (atomically: a failed export leaves nothing there)",
       tg::no_check(), tg::kFlagRequired},
      {"weights", &C::weights,
       "the moving averages of the weights and BN statistics (what terngrad-eval evaluates by default, "
       "--restore_avg_var) or the trained values themselves",
       tg::one_of<tg::ExportWeights>()},
      {"batch_size", &C::batch_size, "the model's batch dimension (0: dynamic, a symbolic `batch`)",
       tg::in_range(0, 1 << 20, "[]")},
      {"opset", &C::opset,
       "ONNX opset of the model, 13 to 26 (tested with ONNX Runtime 1.31: 13, 17, 21, 26; 17 loads in ONNX Runtime "
       ">= 1.12, TensorRT >= 8.5)",
       tg::in_range(tg::kMinOnnxOpset, tg::kMaxOnnxOpset, "[]")},
      tg::apps::log_level_flag<C>(),
  };
  return table;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"terngrad-export: a terngrad checkpoint as an ONNX model"};
  app.formatter(std::make_shared<tg::apps::HelpFormat>());  // descriptions wrapped under the names
  ExportConfig ec;
  app.set_config("--config", "", "read flags from an INI/TOML file");
  app.allow_config_extras(CLI::config_extras_mode::error);
  tg::apps::add_flag_table(app, export_flags(), ec);
  tg::apps::add_help_markdown(app, [] { return tg::flags_markdown_rows(export_flags(), ExportConfig{}); });
  if (const int status = tg::apps::parse_command_line(app, argc, argv, "terngrad-export"); status >= 0) return status;
  try {
    tg::setup_logging(ec.log_level);
    tg::check_flags(export_flags(), ec);
    std::string checkpoint = ec.checkpoint_path;
    if (checkpoint.empty()) {
      const std::optional<std::string> latest = tg::latest_checkpoint(ec.checkpoint_dir);
      if (!latest) TG_THROW("--checkpoint_dir {} has no checkpoint", ec.checkpoint_dir);
      checkpoint = *latest;
    }
    tg::OnnxExportOptions o;
    o.weights = tg::parse_enum<tg::ExportWeights>(ec.weights);
    o.batch_size = ec.batch_size;
    o.opset = ec.opset;
    const tg::OnnxExportSummary s = tg::export_onnx(checkpoint, ec.output, o);
    std::printf(
        "exported %s step %lld (%s weights) to %s: %lld nodes, %lld parameters, %llu bytes, opset %d, weights "
        "digest %s\n",
        s.net.c_str(), static_cast<long long>(s.step), ec.weights.c_str(), s.output.c_str(),
        static_cast<long long>(s.nodes), static_cast<long long>(s.parameters), static_cast<unsigned long long>(s.bytes),
        o.opset, s.weights_digest.c_str());
    return 0;
  } catch (const std::exception& e) {
    return tg::apps::report_error(e, "terngrad-export");
  }
}

// terngrad-eval: the front-end of tg::Evaluator (train/evaluator.h). It evaluates checkpoints of a train_dir
// (or one --checkpoint_path) on a whole subset, with the EMA weights by default, and prints the reference's line:
//   <time>: precision @ 1 = 0.XXXX recall @ 5 = 0.XXXX [N examples]
// --run_once evaluates the latest checkpoint once; otherwise it polls every --eval_interval_secs, evaluates
// each new checkpoint once and exits after the checkpoint of step >= --max_steps.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>

#include "app_cli.h"
#include "help_format.h"
#include "terngrad/core/error.h"
#include "terngrad/core/logging.h"
#include "terngrad/data/data_config.h"
#include "terngrad/data/image_codec.h"
#include "terngrad/train/evaluator.h"
#include "terngrad/train/event_writer.h"
#include "terngrad/train/train_config.h"

namespace {

// terngrad-eval's settings: the evaluator's options (and through them the input flags) and which checkpoints to
// evaluate, how often, and where the results go.
struct EvalConfig : tg::EvalOptions {
  std::string checkpoint_dir = tg::kDefaultTrainDir;
  std::string checkpoint_path;
  bool run_once = false;
  double eval_interval_secs = 60;
  int64_t max_steps = 0;  // 0: the trainer's --max_steps from the checkpoint
  std::string eval_dir;   // when set: eval_dir/eval.jsonl gets one line per evaluated checkpoint
};

std::string now_string() {
  std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", std::localtime(&t));
  return buf;
}

// The reference's line on stdout; with --eval_dir, a JSON line in eval_dir/eval.jsonl and TensorBoard scalars.
void report(const tg::EvalResult& r, const EvalConfig& ec, tg::EventWriter* events) {
  std::printf("%s: precision @ 1 = %.4f recall @ 5 = %.4f [%lld examples]\n", now_string().c_str(), r.precision_at_1(),
              r.recall_at_5(), static_cast<long long>(r.examples));
  std::fflush(stdout);
  if (!ec.eval_dir.empty()) tg::record_eval_result(r, ec.eval_dir, *events, "--eval_dir");
}

// The flag table of terngrad-eval (core/flag_table.h); the input flags are the trainer's (data/data_config.h),
// those a single in-order pass uses.
const std::vector<tg::Flag<EvalConfig>>& eval_flags() {
  using C = EvalConfig;
  static const std::vector<tg::Flag<C>> table = [] {
    std::vector<tg::Flag<C>> t = {
        {"checkpoint_dir", &C::checkpoint_dir, "a train_dir whose checkpoints to evaluate"},
        {"checkpoint_path", &C::checkpoint_path, "evaluate this checkpoint file once instead"},
        {"data_dir", &C::data_dir, "folder of `<subset>-*` TFRecord shards", tg::no_check(), tg::kFlagRequired},
        {"subset", &C::subset,
         "default: the dataset's evaluation subset, test (mnist, cifar10) or validation (imagenet)"},
        {"restore_avg_var", &C::restore_avg_var,
         "evaluate the EMA of the weights and BN statistics (false: the weights)"},
        {"run_once", &C::run_once, "evaluate the latest checkpoint and exit", tg::no_check(), tg::kFlagSwitch},
        {"eval_interval_secs", &C::eval_interval_secs,
         "otherwise poll every this many seconds; each new checkpoint is evaluated once", tg::positive()},
        {"max_steps", &C::max_steps, "exit after a checkpoint of this step (0: the trainer's --max_steps)",
         tg::at_least(0).note("0: the trainer's")},
        {"eval_dir", &C::eval_dir,
         "append one JSON line per evaluated checkpoint (step, precision@1, recall@5, examples, digest) to "
         "`eval_dir/eval.jsonl`"},
        {"dump_logits", &C::dump_logits,
         "write the logits of every evaluated example to this .npy file (float32, (examples, classes), in the "
         "subset's order; the last evaluated checkpoint's, written atomically at the end of its pass)"},
        {"dump_inputs", &C::dump_inputs,
         "write the preprocessed images the net was fed to this .npy file (float32, (examples, S, S, C), NHWC: "
         "what an exported ONNX model takes); held in memory until the end, so for small subsets"},
        {"dump_labels", &C::dump_labels,
         "write the labels of the evaluated examples to this .npy file (int32, (examples))"},
    };
    for (tg::Flag<C>& f : tg::embed_flags<C>(tg::backend_flags(), {"device"})) t.push_back(std::move(f));
    t.push_back({"batch_size", &C::batch_size, "evaluation batch", tg::in_range(1, 1 << 20, "[]")});
    for (tg::Flag<C>& f : tg::embed_flags<C>(tg::backend_flags(), {"threads"})) t.push_back(std::move(f));
    for (tg::Flag<C>& f : tg::embed_flags<C>(tg::data_flags(), tg::eval_data_flag_names())) t.push_back(std::move(f));
    return t;
  }();
  return table;
}

// The program's own settings (beside EvalConfig's).
struct MainOptions : tg::apps::LogLevel {};

const std::vector<tg::Flag<MainOptions>>& main_flags() {
  static const std::vector<tg::Flag<MainOptions>> table = {tg::apps::log_level_flag<MainOptions>()};
  return table;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"terngrad-eval: precision@1 / recall@5 of terngrad checkpoints"};
  app.formatter(std::make_shared<tg::apps::HelpFormat>());  // descriptions wrapped under the names
  EvalConfig ec;
  MainOptions options;
  app.set_config("--config", "", "read flags from an INI/TOML file");
  app.allow_config_extras(CLI::config_extras_mode::error);
  tg::apps::add_flag_table(app, eval_flags(), ec);
  tg::apps::add_flag_table(app, main_flags(), options);
  tg::apps::add_help_markdown(app, [] {
    return tg::flags_markdown_rows(eval_flags(), EvalConfig{}) + tg::flags_markdown_rows(main_flags(), MainOptions{});
  });
  if (const int status = tg::apps::parse_command_line(app, argc, argv, "terngrad-eval"); status >= 0) return status;
  try {
    tg::setup_logging(options.log_level);
    tg::check_flags(eval_flags(), ec);
    ec.apply_decode_defaults();
    std::unique_ptr<tg::EventWriter> events;
    if (!ec.eval_dir.empty()) events = std::make_unique<tg::EventWriter>(ec.eval_dir);
    const tg::Evaluator evaluator(ec);
    auto on_result = [&](const tg::EvalResult& r) { report(r, ec, events.get()); };
    if (!ec.checkpoint_path.empty())
      on_result(evaluator.evaluate(ec.checkpoint_path));
    else
      evaluator.watch(ec.checkpoint_dir, {ec.run_once, ec.eval_interval_secs, ec.max_steps}, on_result);
    return 0;
  } catch (const std::exception& e) {
    return tg::apps::report_error(e, "terngrad-eval");
  }
}

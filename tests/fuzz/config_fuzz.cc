// libFuzzer target: a --config file of terngrad-train (INI/TOML through CLI11, with the trainer's own flag
// definitions: src/apps/train_main.cc is compiled into this file with its main() renamed), then the checks
// that run before any work: TrainConfig::validate, resolve_defaults, model_config, to_flags. Malformed input
// may only throw CLI11's parse errors or tg::Error. Seeds: tests/fuzz/corpus/config/ (configs/*.ini).
#define main terngrad_train_main_unused
#include "src/apps/train_main.cc"
#undef main

#include "fuzz_util.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tg::fuzz::quiet_logging();
  tg::fuzz::remove_scratch_at_exit(".ini");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = tg::fuzz::write_scratch(data, size, ".ini");
  // One App for all inputs (building its ~60 options dominated an execution): the bound settings are reset
  // to their defaults and CLI11's parse state cleared before every parse.
  static tg::TrainConfig config;
  static MainOptions options;
  static CLI::App& app = []() -> CLI::App& {
    static CLI::App a{"terngrad-train"};
    add_flags(a, config, options);
    return a;
  }();
  config = tg::TrainConfig{};
  options = MainOptions{};
  app.clear();
  std::string arg0 = "terngrad-train", arg1 = "--config", arg2 = path;
  char* argv[] = {arg0.data(), arg1.data(), arg2.data(), nullptr};
  try {
    app.parse(3, argv);
  } catch (const CLI::Error&) {
    return 0;
  }
  try {
    config.validate(1);
    config.resolve_defaults();
    config.model_config();
    config.to_flags();
  } catch (const tg::Error&) {
  }
  return 0;
}

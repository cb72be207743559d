// The exchange's flag table and its options from the flags.
#include "terngrad/exchange/exchange_options.h"

#include <fmt/format.h>

#include <string>
#include <vector>

#include "terngrad/core/error.h"
#include "terngrad/exchange/scheme_registry.h"

namespace tg {

std::vector<std::string> exchange_values() {
  std::vector<std::string> values;
  for (const auto& e : EnumNames<ExchangeMode>::kList) values.push_back(e.name);
  for (const SchemeInfo& s : gradient_schemes())
    if (s.exchange != nullptr) values.push_back(s.exchange);
  return values;
}

namespace {
std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}
}  // namespace

void check_exchange_value(std::string_view value, std::string_view flag) {
  for (const std::string& v : exchange_values())
    if (value == v) return;
  TG_USAGE_ERROR("{} '{}' is not one of {}", flag, value, joined(exchange_values()));
}

ExchangeMode flat_mode(const std::string& exchange) {
  for (const auto& e : EnumNames<ExchangeMode>::kList)
    if (exchange == e.name) return e.value;
  return ExchangeMode::kAuto;
}

namespace {
// --exchange's help: the flat values, then each scheme row's own value with its description.
const char* exchange_help() {
  static const std::string help = [] {
    std::string h =
        "auto: a scheme that claims the layout (hierarchical with --grad_bits 1 on several nodes of several ranks), "
        "else allgather2 below 8 workers, allreduce8 from 8; allgather2: 2-bit codes gathered; allreduce8: int8 sums, "
        "≤127 workers";
    for (const SchemeInfo& s : gradient_schemes())
      if (s.exchange != nullptr) h += fmt::format("; {}: {}", s.exchange, s.description);
    return h;
  }();
  return help.c_str();
}

FlagCheck exchange_check() {
  FlagCheck c;
  c.parse = [](std::string_view text, std::string_view flag) { check_exchange_value(text, flag); };
  c.accepted = [] { return joined(exchange_values()); };
  return c;
}

std::vector<Flag<ExchangeConfig>> own_flags() {
  using C = ExchangeConfig;
  return {
      {"exchange", &C::exchange, exchange_help(), exchange_check(), kFlagRun},
      {"error_feedback", &C::error_feedback,
       "TernGrad (allgather2/allreduce8): add each worker's rounding error g − s·code to its next gradient "
       "(per element, per rank; checkpointed per rank)",
       no_check(), kFlagSwitch | kFlagResume | kFlagRun},
      {"local_bits", &C::local_bits,
       "`--exchange hierarchical`: the reduce-scatter inside a node in fp32 (32) or fp16 (16) (with one node the "
       "all-gather too; with several, the nodes' 2-bit codes are what is all-gathered inside a node)",
       one_of_numbers({16, 32}, "16 (fp16), 32 (fp32)"), kFlagRun},
      {"overlap", &C::overlap,
       "with a group to talk to: exchange buckets while backward runs (CPU: on a communication thread; GPU: on "
       "the device's second stream); `--overlap=false` exchanges everything after backward (same bits)",
       no_check(), kFlagGpu},
      {"decode_in_update", &C::decode_in_update,
       "TernGrad (allgather2/allreduce8): the optimizer decodes the ternary tensors' average inside its update "
       "instead of the exchange writing it into the gradients first (same bits, one pass fewer); "
       "`--decode_in_update=false` decodes first"},
      {"fp32_warmup_steps", &C::fp32_warmup_steps,
       "TernGrad (`--grad_bits 1`) or `--exchange powersgd`: exchange fp32 gradients for the first this many steps, "
       "then the compressed ones (an uncompressed warm-up, PowerSGD's start_powerSGD_iter); the log, TensorBoard "
       "(`exchange/fp32_warmup`) and "
       "`--metrics_jsonl` (`exchange`) say which exchange ran",
       at_least(0).note("0: no warm-up"), kFlagContinue},
      {"bucket_mb", &C::bucket_mb,
       "MiB of fp32 gradient per bucket at most (backward order; a larger tensor is a bucket of its own)",
       positive().saying("must be a positive number of MiB")},
  };
}
}  // namespace

const std::vector<Flag<ExchangeConfig>>& exchange_flags() {
  static const std::vector<Flag<ExchangeConfig>> table = [] {
    std::vector<Flag<ExchangeConfig>> t = own_flags();
    for (const SchemeInfo& s : gradient_schemes())  // the schemes' options, from their folders
      if (s.flags)
        for (const Flag<ExchangeConfig>& f : s.flags()) t.push_back(f);
    check_unique_flag_names(t, "the exchange's flags");
    return t;
  }();
  return table;
}

ExchangeOptions::ExchangeOptions(const ExchangeConfig& c, uint64_t seed_) : ExchangeConfig(c), seed(seed_) {
  check_exchange_value(exchange);
}

}  // namespace tg

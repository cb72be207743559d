// The exchange's flag table and its options from the flags.
#include "terngrad/exchange/exchange_options.h"

#include "terngrad/exchange/scheme_registry.h"

namespace tg {

namespace {
std::vector<Flag<ExchangeConfig>> own_flags() {
  using C = ExchangeConfig;
  return {
      {"exchange", &C::exchange,
       "allgather2: 2-bit codes gathered; allreduce8: int8 sums, ≤127 workers; hierarchical: fp32 sums inside a node, "
       "2-bit codes between nodes (one ring per local rank) and then inside the node; auto: hierarchical with "
       "--grad_bits 1 on several "
       "nodes of several ranks, else allgather2 below 8 workers, allreduce8 from 8; powersgd: rank-R low-rank "
       "gradients with error feedback, all-reduced (`--grad_bits 32`, `--powersgd_rank`); none: no exchange "
       "(benchmarks' compute-only step; replicas drift apart)",
       one_of<ExchangeMode>(), kFlagRun},
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

ExchangeOptions::ExchangeOptions(const ExchangeConfig& c, uint64_t seed_)
    : ExchangeConfig(c), mode(parse_enum<ExchangeMode>(c.exchange)), seed(seed_) {}

}  // namespace tg

// The registry row of --exchange powersgd (scheme_registry.h), with its option --powersgd_rank.
#include "src/exchange/schemes/powersgd/powersgd_scheme.h"
#include "terngrad/exchange/scheme_registry.h"

namespace tg {

std::vector<SchemeInfo> powersgd_schemes() {
  using namespace scheme_rules;  // NOLINT: the rules rows share
  return {
      {"powersgd", "rank-R low-rank gradients with error feedback, all-reduced (`--grad_bits 32`, `--powersgd_rank`)",
       &make_powersgd_scheme, "powersgd", 0, nullptr,
       [](int grad_bits) {
         return grad_bits == 32
                    ? std::string()
                    : fmt::format("--exchange powersgd sends fp32 factors: it takes --grad_bits 32, not {}", grad_bits);
       },
       always, "auto",
       [](bool) -> const char* {
         return "--exchange_dump: --exchange powersgd cannot be replayed on one replica (its residuals and "
                "warm-started Q carry over from step to step)";
       },
       powersgd_buffer_bytes, powersgd_flags},
  };
}

}  // namespace tg

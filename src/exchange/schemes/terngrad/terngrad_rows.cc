// The registry rows of TernGrad (scheme_registry.h): the flat exchange of every worker's 2-bit codes, chosen by
// --grad_bits 1 (allgather2 or allreduce8), and --exchange hierarchical, which --exchange auto also chooses for
// ternary gradients on several nodes of several ranks.
#include "src/exchange/schemes/terngrad/hierarchical_scheme.h"
#include "src/exchange/schemes/terngrad/terngrad_scheme.h"
#include "terngrad/exchange/scheme_registry.h"

namespace tg {

std::vector<SchemeInfo> terngrad_schemes() {
  using namespace scheme_rules;  // NOLINT: the rules rows share
  return {
      {"terngrad", "2-bit codes of every worker, allgather2 or allreduce8 (--error_feedback)", &make_terngrad_scheme,
       nullptr, 1, nullptr, any_bits, always, "auto",
       [](bool error_feedback) -> const char* {
         return error_feedback ? "--exchange_dump replays a stateless exchange: not with --error_feedback (its "
                                 "residuals carry over)"
                               : nullptr;
       },
       terngrad_buffer_bytes, nullptr},
      {"hierarchical",
       "fp32 sums inside a node, 2-bit codes between nodes (one ring per local rank) and then inside the node",
       &make_hierarchical_scheme, "hierarchical", 0,
       [](int grad_bits, const ExchangeLayout& l) { return grad_bits == 1 && l.num_nodes > 1 && l.ranks_per_node > 1; },
       [](int grad_bits) {
         return grad_bits == 1 || grad_bits == 32
                    ? std::string()
                    : fmt::format(
                          "--exchange hierarchical takes --grad_bits 1 (ternary between nodes) or 32 (fp32), "
                          "not {}",
                          grad_bits);
       },
       [](int grad_bits) { return grad_bits == 1; }, "hierarchical",
       [](bool) -> const char* {
         return "--exchange_dump: --exchange hierarchical cannot be replayed on one replica (fp32 sums inside each "
                "node, then codes between nodes: the job's layout, not one replica's)";
       },
       hierarchical_buffer_bytes, nullptr},
  };
}

}  // namespace tg

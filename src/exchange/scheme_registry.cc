// The gradient schemes by name (one line each) and the choice of a scheme from --grad_bits and --exchange.
#include "terngrad/exchange/scheme_registry.h"

#include "src/exchange/schemes/dense/dense_scheme.h"
#include "src/exchange/schemes/none/no_exchange_scheme.h"
#include "src/exchange/schemes/powersgd/powersgd_scheme.h"
#include "src/exchange/schemes/terngrad/hierarchical_scheme.h"
#include "src/exchange/schemes/terngrad/terngrad_scheme.h"
#include "terngrad/core/error.h"

namespace tg {

const std::vector<SchemeInfo>& gradient_schemes() {
  static const std::vector<SchemeInfo> schemes = {
      {"fp32", "fp32 sums, all-reduced", &make_fp32_scheme},
      {"fp16", "fp16 sums of the compressed tensors, fp32 for the rest", &make_fp16_scheme},
      {"terngrad", "2-bit codes of every worker, allgather2 or allreduce8 (--error_feedback)", &make_terngrad_scheme},
      {"hierarchical", "fp32 inside a node, 2-bit codes between nodes", &make_hierarchical_scheme},
      {"powersgd", "rank-R low-rank gradients with error feedback, all-reduced (--powersgd_rank)",
       &make_powersgd_scheme},
      {"none", "no exchange (benchmarks: the compute-only step)", &make_no_exchange_scheme},
  };
  return schemes;
}

std::unique_ptr<GradientScheme> make_gradient_scheme(const std::string& name, SchemeContext& ctx) {
  std::string known;
  for (const SchemeInfo& s : gradient_schemes()) {
    if (name == s.name) return s.make(ctx);
    known += (known.empty() ? "" : ", ") + std::string(s.name);
  }
  TG_THROW("unknown gradient scheme '{}': the known ones are {}", name, known);
}

std::string scheme_name_for(int grad_bits, ExchangeMode mode, const ExchangeLayout& layout) {
  if (mode == ExchangeMode::kNone) return "none";
  if (mode == ExchangeMode::kPowerSgd) {
    TG_CHECK(grad_bits == 32, "--exchange powersgd sends fp32 factors: it takes --grad_bits 32, not {}", grad_bits);
    return "powersgd";
  }
  if (mode == ExchangeMode::kAuto && grad_bits == 1 && layout.num_nodes > 1 && layout.ranks_per_node > 1)
    mode = ExchangeMode::kHierarchical;
  if (mode == ExchangeMode::kHierarchical) {
    TG_CHECK(grad_bits == 1 || grad_bits == 32,
             "--exchange hierarchical takes --grad_bits 1 (ternary between nodes) or 32 (fp32), not {}", grad_bits);
    return "hierarchical";
  }
  switch (grad_bits) {
    case 1:
      return "terngrad";
    case 16:
      return "fp16";
    case 32:
      return "fp32";
  }
  TG_THROW("--grad_bits {} is not one of 1, 16, 32", grad_bits);
}

bool exchange_compresses(int grad_bits, ExchangeMode mode) {
  return mode != ExchangeMode::kNone && (grad_bits == 1 || mode == ExchangeMode::kPowerSgd);
}

ExchangeMode fp32_form(ExchangeMode mode) {
  return mode == ExchangeMode::kHierarchical || mode == ExchangeMode::kNone ? mode : ExchangeMode::kAuto;
}

}  // namespace tg

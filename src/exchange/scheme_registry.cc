// The gradient schemes by name, one row each with every rule about the scheme, and what is asked of them: the
// choice of a scheme from --grad_bits and --exchange, whether it compresses, its fp32 form, whether it can be
// replayed.
#include "terngrad/exchange/scheme_registry.h"

#include "src/exchange/schemes/dense/dense_scheme.h"
#include "src/exchange/schemes/none/no_exchange_scheme.h"
#include "src/exchange/schemes/powersgd/powersgd_scheme.h"
#include "src/exchange/schemes/terngrad/hierarchical_scheme.h"
#include "src/exchange/schemes/terngrad/terngrad_scheme.h"
#include "terngrad/core/error.h"

namespace tg {

namespace {
std::string any_bits(int) { return ""; }
bool never(int) { return false; }
bool always(int) { return true; }
const char* replayable(bool) { return nullptr; }

// The built-in schemes, one row each.
std::vector<SchemeInfo> builtin_schemes() {
  using M = ExchangeMode;
  return {
      {"fp32", "fp32 sums, all-reduced", &make_fp32_scheme, M::kAuto, 32, nullptr, any_bits, never, M::kAuto,
       replayable, dense_buffer_bytes, nullptr},
      {"fp16", "fp16 sums of the compressed tensors, fp32 for the rest", &make_fp16_scheme, M::kAuto, 16, nullptr,
       any_bits, never, M::kAuto,
       [](bool) -> const char* {
         return "--exchange_dump cannot replay --grad_bits 16 (each rank's sum is rounded to fp16, then the fp16 "
                "all-reduce rounds again: one replica cannot redo that)";
       },
       dense_buffer_bytes, nullptr},
      {"terngrad", "2-bit codes of every worker, allgather2 or allreduce8 (--error_feedback)", &make_terngrad_scheme,
       M::kAuto, 1, nullptr, any_bits, always, M::kAuto,
       [](bool error_feedback) -> const char* {
         return error_feedback ? "--exchange_dump replays a stateless exchange: not with --error_feedback (its "
                                 "residuals carry over)"
                               : nullptr;
       },
       terngrad_buffer_bytes, nullptr},
      {"hierarchical", "fp32 inside a node, 2-bit codes between nodes", &make_hierarchical_scheme, M::kHierarchical, 0,
       [](int grad_bits, const ExchangeLayout& l) { return grad_bits == 1 && l.num_nodes > 1 && l.ranks_per_node > 1; },
       [](int grad_bits) {
         return grad_bits == 1 || grad_bits == 32
                    ? std::string()
                    : fmt::format(
                          "--exchange hierarchical takes --grad_bits 1 (ternary between nodes) or 32 (fp32), "
                          "not {}",
                          grad_bits);
       },
       [](int grad_bits) { return grad_bits == 1; }, M::kHierarchical,
       [](bool) -> const char* {
         return "--exchange_dump: --exchange hierarchical cannot be replayed on one replica (fp32 sums inside each "
                "node, then codes between nodes: the job's layout, not one replica's)";
       },
       hierarchical_buffer_bytes, nullptr},
      {"powersgd", "rank-R low-rank gradients with error feedback, all-reduced (--powersgd_rank)",
       &make_powersgd_scheme, M::kPowerSgd, 0, nullptr,
       [](int grad_bits) {
         return grad_bits == 32
                    ? std::string()
                    : fmt::format("--exchange powersgd sends fp32 factors: it takes --grad_bits 32, not {}", grad_bits);
       },
       always, M::kAuto,
       [](bool) -> const char* {
         return "--exchange_dump: --exchange powersgd cannot be replayed on one replica (its residuals and "
                "warm-started Q carry over from step to step)";
       },
       powersgd_buffer_bytes, powersgd_flags},
      {"none", "no exchange (benchmarks: the compute-only step)", &make_no_exchange_scheme, M::kNone, 0, nullptr,
       any_bits, never, M::kNone,
       [](bool) -> const char* { return "--exchange_dump: --exchange none exchanges nothing"; },
       no_exchange_buffer_bytes, nullptr},
  };
}

// The schemes of SchemeRegistration objects, in the order they were constructed.
std::vector<SchemeInfo>& registered_schemes() {
  static std::vector<SchemeInfo> schemes;
  return schemes;
}
}  // namespace

SchemeRegistration::SchemeRegistration(const SchemeInfo& info) { registered_schemes().push_back(info); }

void check_unique_scheme_names(const std::vector<SchemeInfo>& schemes) {
  for (size_t i = 0; i < schemes.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      TG_CHECK(std::string(schemes[i].name) != schemes[j].name,
               "gradient scheme '{}' is registered twice (\"{}\" and \"{}\"): each scheme needs a name of its own",
               schemes[i].name, schemes[j].description, schemes[i].description);
}

const std::vector<SchemeInfo>& gradient_schemes() {
  static const std::vector<SchemeInfo> schemes = [] {
    std::vector<SchemeInfo> all = builtin_schemes();
    for (const SchemeInfo& s : registered_schemes()) all.push_back(s);
    check_unique_scheme_names(all);
    return all;
  }();
  return schemes;
}

const SchemeInfo& gradient_scheme(const std::string& name) {
  std::string known;
  for (const SchemeInfo& s : gradient_schemes()) {
    if (name == s.name) return s;
    known += (known.empty() ? "" : ", ") + std::string(s.name);
  }
  TG_THROW("unknown gradient scheme '{}': the known ones are {}", name, known);
}

std::unique_ptr<GradientScheme> make_gradient_scheme(const std::string& name, SchemeContext& ctx) {
  return gradient_scheme(name).make(ctx);
}

namespace {
// The row an --exchange value chooses whatever --grad_bits (hierarchical, powersgd, none); null for auto, allgather2
// and allreduce8.
const SchemeInfo* chosen_by_mode(ExchangeMode mode) {
  for (const SchemeInfo& s : gradient_schemes())
    if (s.mode != ExchangeMode::kAuto && s.mode == mode) return &s;
  return nullptr;
}

// The row the flags choose, before its --grad_bits check; null when none does.
const SchemeInfo* choose(int grad_bits, ExchangeMode mode, const ExchangeLayout& layout) {
  const std::vector<SchemeInfo>& rows = gradient_schemes();
  if (mode == ExchangeMode::kAuto)
    for (const SchemeInfo& s : rows)
      if (s.auto_on && s.auto_on(grad_bits, layout)) return &s;
  if (const SchemeInfo* s = chosen_by_mode(mode)) return s;
  for (const SchemeInfo& s : rows)  // auto, allgather2, allreduce8: by --grad_bits
    if (s.mode == ExchangeMode::kAuto && s.grad_bits != 0 && s.grad_bits == grad_bits) return &s;
  return nullptr;
}
}  // namespace

std::string scheme_name_for(int grad_bits, ExchangeMode mode, const ExchangeLayout& layout) {
  const SchemeInfo* s = choose(grad_bits, mode, layout);
  if (s == nullptr) {
    std::string bits;
    for (const SchemeInfo& r : gradient_schemes())
      if (r.mode == ExchangeMode::kAuto && r.grad_bits != 0)
        bits = fmt::format("{}{}{}", r.grad_bits, bits.empty() ? "" : ", ", bits);
    TG_THROW("--grad_bits {} is not one of {}", grad_bits, bits);
  }
  const std::string refusal = s->refuses_bits(grad_bits);
  TG_CHECK(refusal.empty(), "{}", refusal);
  return s->name;
}

bool exchange_compresses(int grad_bits, ExchangeMode mode) {
  const SchemeInfo* s = choose(grad_bits, mode, ExchangeLayout{});
  return s != nullptr && s->compresses(grad_bits);
}

ExchangeMode fp32_form(ExchangeMode mode) {
  const SchemeInfo* s = chosen_by_mode(mode);
  return s ? s->fp32_form : ExchangeMode::kAuto;
}

void check_replayable(const std::string& scheme, bool error_feedback) {
  const char* refusal = gradient_scheme(scheme).replay_refusal(error_feedback);
  if (refusal == nullptr) return;
  std::vector<std::string> can;
  for (const SchemeInfo& s : gradient_schemes())
    if (s.replay_refusal(false) == nullptr) can.push_back(s.name);
  std::string list;
  for (size_t i = 0; i < can.size(); ++i) list += (i == 0 ? "" : i + 1 == can.size() ? " and " : ", ") + can[i];
  TG_THROW("{}; the {} schemes can be replayed", refusal, list);
}

}  // namespace tg

// The gradient schemes by name, one row each with every rule about the scheme, and what is asked of them: the
// choice of a scheme from --grad_bits and --exchange, whether it compresses, its fp32 form, whether it can be
// replayed.
#include "terngrad/exchange/scheme_registry.h"

#include "terngrad/core/error.h"

// Every scheme folder's rows: std::vector<SchemeInfo> <folder>_schemes(), listed by the build (one
// TG_SCHEME_FOLDER(<folder>) line per folder of src/exchange/schemes/, in name order).
namespace tg {
#define TG_SCHEME_FOLDER(folder) std::vector<SchemeInfo> folder##_schemes();
#include "tg_scheme_folders.inc"
#undef TG_SCHEME_FOLDER

namespace {
std::vector<SchemeInfo> builtin_schemes() {
  std::vector<SchemeInfo> all;
  auto add = [&all](const std::vector<SchemeInfo>& rows) { all.insert(all.end(), rows.begin(), rows.end()); };
#define TG_SCHEME_FOLDER(folder) add(folder##_schemes());
#include "tg_scheme_folders.inc"
#undef TG_SCHEME_FOLDER
  return all;
}

// The schemes of SchemeRegistration objects, in the order they were constructed.
std::vector<SchemeInfo>& registered_schemes() {
  static std::vector<SchemeInfo> schemes;
  return schemes;
}
}  // namespace

SchemeRegistration::SchemeRegistration(const SchemeInfo& info) { registered_schemes().push_back(info); }

void check_unique_scheme_names(const std::vector<SchemeInfo>& schemes) {
  for (size_t i = 0; i < schemes.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      TG_CHECK(std::string(schemes[i].name) != schemes[j].name,
               "gradient scheme '{}' is registered twice (\"{}\" and \"{}\"): each scheme needs a name of its own",
               schemes[i].name, schemes[j].description, schemes[i].description);
      TG_CHECK(schemes[i].exchange == nullptr || schemes[j].exchange == nullptr ||
                   std::string(schemes[i].exchange) != schemes[j].exchange,
               "--exchange {} would choose two gradient schemes ('{}' and '{}'): each needs a value of its own",
               schemes[i].exchange, schemes[j].name, schemes[i].name);
    }
    if (schemes[i].exchange != nullptr)
      for (const auto& flat : EnumNames<ExchangeMode>::kList)
        TG_CHECK(std::string(schemes[i].exchange) != flat.name,
                 "gradient scheme '{}' claims --exchange {}, one of the exchange's own values (auto, allgather2, "
                 "allreduce8)",
                 schemes[i].name, flat.name);
  }
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
// The row whose own --exchange value this is (hierarchical, powersgd, none, ...); null for a flat value.
const SchemeInfo* chosen_by_value(const std::string& exchange) {
  for (const SchemeInfo& s : gradient_schemes())
    if (s.exchange != nullptr && exchange == s.exchange) return &s;
  return nullptr;
}

// The row the flags choose, before its --grad_bits check; null when none does.
const SchemeInfo* choose(int grad_bits, const std::string& exchange, const ExchangeLayout& layout) {
  check_exchange_value(exchange);
  const std::vector<SchemeInfo>& rows = gradient_schemes();
  if (exchange == "auto")
    for (const SchemeInfo& s : rows)
      if (s.auto_on && s.auto_on(grad_bits, layout)) return &s;
  if (const SchemeInfo* s = chosen_by_value(exchange)) return s;
  for (const SchemeInfo& s : rows)  // auto, allgather2, allreduce8: by --grad_bits
    if (s.exchange == nullptr && s.grad_bits != 0 && s.grad_bits == grad_bits) return &s;
  return nullptr;
}
}  // namespace

std::string scheme_name_for(int grad_bits, const std::string& exchange, const ExchangeLayout& layout) {
  const SchemeInfo* s = choose(grad_bits, exchange, layout);
  if (s == nullptr) {
    std::string bits;
    for (const SchemeInfo& r : gradient_schemes())
      if (r.exchange == nullptr && r.grad_bits != 0)
        bits = fmt::format("{}{}{}", r.grad_bits, bits.empty() ? "" : ", ", bits);
    TG_THROW("--grad_bits {} is not one of {}", grad_bits, bits);
  }
  const std::string refusal = s->refuses_bits(grad_bits);
  TG_CHECK(refusal.empty(), "{}", refusal);
  return s->name;
}

bool exchange_compresses(int grad_bits, const std::string& exchange) {
  const SchemeInfo* s = choose(grad_bits, exchange, ExchangeLayout{});
  return s != nullptr && s->compresses(grad_bits);
}

std::string fp32_form(const std::string& exchange) {
  const SchemeInfo* s = chosen_by_value(exchange);
  return s ? s->fp32_form : "auto";
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

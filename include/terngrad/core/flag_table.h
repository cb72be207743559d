// Flag tables: each setting of a command is one entry, which says its name, the member of the program's config
// struct that holds it, its help text, the check of its value, and how it is used (a switch, saved in
// checkpoints, compared on resume). The command line (src/apps: CLI11 options), the checks, the saved flag map
// and the README's Markdown table are all generated from the entries. Defaults stay the member initialisers of
// the config struct (one place); checks that relate several flags stay code next to the table.
//
//   {"batch_size", &TrainConfig::batch_size, "total batch ...", at_least(1).max(kMaxBatch), kFlagResume}
//   {"optimizer", &TrainConfig::optimizer, "...", one_of<OptimizerKind>()}   // EnumNames gives the choices
//
// Check messages: "--batch_size 0 must be at least 1", "--batch_size 99 is above the limit 64",
// "--momentum 1 is not in [0, 1)", "--optimizer 'sgd' is not one of gd, momentum, adam, rmsprop".
// A non-finite number fails every numeric check.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "terngrad/core/enum_names.h"
#include "terngrad/core/error.h"
#include "terngrad/core/gpu_status.h"

namespace tg {

template <typename C>
using FlagMember =
    std::variant<std::string C::*, bool C::*, int C::*, int64_t C::*, uint64_t C::*, float C::*, double C::*>;

enum FlagTraits : unsigned {
  kFlagSwitch = 1u << 0,    // given without a value (--benchmark_mode); --name=false also works
  kFlagNotSaved = 1u << 1,  // left out of the saved flag map (checkpoints, the logged configuration)
  kFlagResume = 1u << 2,    // a resumed run must use the checkpoint's value
  kFlagRequired = 1u << 3,  // must be given
  kFlagInternal = 1u << 4,  // set by the program, not on the command line (saved all the same)
  // A resumed run goes on with the checkpoint's value: taken from it when not given, a different given value refused
  // (the gradient coding and exchange, the optimizer and its learning rate, regularisation, the compute precision).
  kFlagRun = 1u << 5,
  kFlagContinue = 1u << 6,  // taken from the checkpoint when not given; a given value wins (said in the log)
  kFlagGpu = 1u << 7,       // says what the flag does on a GPU: its help carries the GPU path's status (gpu_status.h)
};

struct FlagCheck {
  static constexpr double kInf = std::numeric_limits<double>::infinity();
  double lo = -kInf, hi = kInf;
  bool lo_open = false, hi_open = false;
  bool interval = false;              // one message for both bounds: "is not in [lo, hi)"
  std::vector<double> values;         // the accepted numbers, when not empty ...
  const char* values_text = nullptr;  // ... and how the message lists them
  void (*parse)(std::string_view text, std::string_view flag) = nullptr;  // text choices: throws naming flag
  std::string (*accepted)() = nullptr;                                    // text choices, for help
  const char* says = nullptr;       // replaces "must be at least ..." (the lower-bound message)
  const char* note_text = nullptr;  // appended to the lower-bound message: " (0: all cores)"

  FlagCheck max(double limit) const {
    FlagCheck c = *this;
    c.hi = limit;
    return c;
  }
  FlagCheck note(const char* text) const {
    FlagCheck c = *this;
    c.note_text = text;
    return c;
  }
  FlagCheck saying(const char* text) const {
    FlagCheck c = *this;
    c.says = text;
    return c;
  }
};

inline FlagCheck no_check() { return {}; }
inline FlagCheck at_least(double lo) {
  FlagCheck c;
  c.lo = lo;
  return c;
}
inline FlagCheck positive() {
  FlagCheck c;
  c.lo = 0;
  c.lo_open = true;
  return c;
}
inline FlagCheck below(double hi) {
  FlagCheck c;
  c.hi = hi;
  c.hi_open = true;
  return c;
}
// in_range(0, 1, "[)") is [0, 1).
inline FlagCheck in_range(double lo, double hi, const char* brackets) {
  FlagCheck c;
  c.lo = lo;
  c.hi = hi;
  c.lo_open = brackets[0] == '(';
  c.hi_open = brackets[1] == ')';
  c.interval = true;
  return c;
}
inline FlagCheck one_of_numbers(std::vector<double> values, const char* text) {
  FlagCheck c;
  c.values = std::move(values);
  c.values_text = text;
  return c;
}
template <typename E>
FlagCheck one_of() {
  FlagCheck c;
  c.parse = [](std::string_view text, std::string_view flag) { parse_enum<E>(text, flag); };
  c.accepted = [] { return enum_accepted<E>(); };
  return c;
}

// --alias: a switch that sets the flag to `value` (--fp16 for --precision fp16).
struct FlagAlias {
  const char* name;
  const char* value;
};

template <typename C>
struct Flag {
  Flag(const char* name_, FlagMember<C> member_, const char* help_, FlagCheck check_ = {}, unsigned traits_ = 0,
       std::vector<FlagAlias> aliases_ = {})
      : name(name_),
        member(member_),
        help(help_),
        check(std::move(check_)),
        traits(traits_),
        aliases(std::move(aliases_)) {}

  const char* name;  // without the leading "--"
  FlagMember<C> member;
  const char* help;
  FlagCheck check;
  unsigned traits;
  std::vector<FlagAlias> aliases;

  bool has(unsigned trait) const { return (traits & trait) != 0; }
  // The help with the accepted values of a text choice in front: "gd, momentum, adam, rmsprop: ..."; a flag of
  // kFlagGpu ends with the GPU path's status.
  std::string full_help() const {
    const std::string gpu = has(kFlagGpu) ? gpu_caveat() : std::string();
    if (!check.accepted) return help + gpu;
    return (*help ? check.accepted() + ": " + help : check.accepted()) + gpu;
  }
};

// Refuses a table with a name given twice (a sub-table's or a scheme's option clashing with another flag): one line
// naming the flag and `table`.
template <typename C>
void check_unique_flag_names(const std::vector<Flag<C>>& t, const char* table) {
  for (size_t i = 0; i < t.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      TG_CHECK(std::string_view(t[i].name) != t[j].name,
               "--{} is defined twice in {} (\"{}\" and \"{}\"): each flag needs a name of its own", t[i].name, table,
               t[j].help, t[i].help);
}

// The entries of a sub-config's table (e.g. DataConfig's) as entries of a config that derives from it
// (TrainConfig : DataConfig): a member pointer of the base is one of the derived struct, so the entry is the same.
// `names`: only these entries, in table order (all when empty).
template <typename C, typename Sub>
std::vector<Flag<C>> embed_flags(const std::vector<Flag<Sub>>& table, const std::vector<const char*>& names = {}) {
  static_assert(std::is_base_of_v<Sub, C>, "embed_flags: the config must derive from the sub-config");
  std::vector<Flag<C>> out;
  for (const Flag<Sub>& f : table) {
    bool wanted = names.empty();
    for (const char* n : names) wanted = wanted || std::string_view(n) == f.name;
    if (!wanted) continue;
    const FlagMember<C> member = std::visit(
        [](auto m) -> FlagMember<C> {
          using T = std::remove_reference_t<decltype(std::declval<Sub&>().*m)>;
          return static_cast<T C::*>(m);
        },
        f.member);
    out.emplace_back(f.name, member, f.help, f.check, f.traits, f.aliases);
  }
  TG_CHECK(names.empty() || out.size() == names.size(), "embed_flags: {} of the {} names are not in the table",
           names.size() - out.size(), names.size());
  return out;
}

// The value as saved and logged: numbers as fmt's shortest form, booleans true/false, text as is.
template <typename C>
std::string flag_value_text(const Flag<C>& f, const C& c) {
  return std::visit([&](auto member) { return fmt::format("{}", c.*member); }, f.member);
}

// Sets the flag from text (an alias's value).
template <typename C>
void set_flag_from_text(const Flag<C>& f, C& c, const std::string& text) {
  std::visit(
      [&](auto member) {
        using T = std::decay_t<decltype(c.*member)>;
        if constexpr (std::is_same_v<T, std::string>) {
          c.*member = text;
        } else if constexpr (std::is_same_v<T, bool>) {
          c.*member = text == "true";
        } else {
          std::istringstream in(text);
          T v{};
          TG_CHECK(static_cast<bool>(in >> v), "--{}: '{}' is not a number", f.name, text);
          c.*member = v;
        }
      },
      f.member);
}

namespace detail {
inline std::string bound_text(double v) { return fmt::format("{}", v); }
}  // namespace detail

// Throws tg::UsageError naming the flag when its value fails the entry's check.
template <typename C>
void check_flag(const Flag<C>& f, const C& c) {
  const FlagCheck& k = f.check;
  std::visit(
      [&](auto member) {
        const auto& v = c.*member;
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          if (k.parse) {
            try {
              k.parse(v, std::string("--") + f.name);
            } catch (const UsageError&) {
              throw;
            } catch (const Error& e) {
              throw UsageError(e.what());
            }
          }
        } else if constexpr (!std::is_same_v<T, bool>) {
          const double x = static_cast<double>(v);
          const bool finite = std::isfinite(x);
          if (!k.values.empty()) {
            bool found = false;
            for (double a : k.values) found = found || a == x;
            if (!found) TG_USAGE_ERROR("--{} {} is not one of {}", f.name, v, k.values_text);
          }
          const bool low = !finite || (k.lo_open ? !(x > k.lo) : !(x >= k.lo));
          const bool high = !finite || (k.hi_open ? !(x < k.hi) : !(x <= k.hi));
          if (k.interval && (low || high))
            TG_USAGE_ERROR("--{} {} is not in {}{}, {}{}", f.name, v, k.lo_open ? "(" : "[", detail::bound_text(k.lo),
                           detail::bound_text(k.hi), k.hi_open ? ")" : "]");
          if (low && k.lo != -FlagCheck::kInf) {
            std::string says = k.says                   ? std::string(k.says)
                               : k.lo == 0 && k.lo_open ? std::string("must be positive")
                               : k.lo == 0              ? std::string("must be >= 0")
                               : k.lo_open              ? "must be above " + detail::bound_text(k.lo)
                                                        : "must be at least " + detail::bound_text(k.lo);
            TG_USAGE_ERROR("--{} {} {}{}", f.name, v, says, k.note_text ? fmt::format(" ({})", k.note_text) : "");
          }
          if (high && k.hi != FlagCheck::kInf) {
            if (k.hi_open)
              TG_USAGE_ERROR("--{} {} must be below {}{}", f.name, v, detail::bound_text(k.hi),
                             k.note_text ? fmt::format(" ({})", k.note_text) : "");
            TG_USAGE_ERROR("--{} {} is above the limit {}", f.name, v, detail::bound_text(k.hi));
          }
          if (!finite && (k.lo != -FlagCheck::kInf || k.hi != FlagCheck::kInf))
            TG_USAGE_ERROR("--{} {} must be a finite number", f.name, v);
        }
      },
      f.member);
}

// Checks every entry, in table order.
template <typename C>
void check_flags(const std::vector<Flag<C>>& table, const C& c) {
  for (const Flag<C>& f : table) check_flag(f, c);
}

// name -> value of every entry not marked kFlagNotSaved.
template <typename C>
std::map<std::string, std::string> saved_flags(const std::vector<Flag<C>>& table, const C& c) {
  std::map<std::string, std::string> out;
  for (const Flag<C>& f : table)
    if (!f.has(kFlagNotSaved)) out[f.name] = flag_value_text(f, c);
  return out;
}

// The rows "| `--name` | default | help |" of the entries given on the command line, each alias a row of its
// own. `defaults` is a default-constructed config. Markdown: '|' is escaped, and '<', '>' outside code spans.
template <typename C>
std::string flags_markdown_rows(const std::vector<Flag<C>>& table, const C& defaults) {
  auto escape = [](const std::string& s) {
    std::string out;
    bool code = false;
    for (char ch : s) {
      code ^= ch == '`';
      if (ch == '|')
        out += "\\|";
      else if (ch == '<' && !code)
        out += "&lt;";
      else if (ch == '>' && !code)
        out += "&gt;";
      else
        out += ch;
    }
    return out;
  };
  auto row = [&](const std::string& flag, const std::string& value, const std::string& help) {
    return fmt::format("| `--{}` | {}{}| {} |\n", flag, escape(value), value.empty() ? "" : " ", escape(help));
  };
  std::string out;
  for (const Flag<C>& f : table) {
    if (f.has(kFlagInternal)) continue;
    out += row(f.name, f.has(kFlagRequired) ? "(required)" : flag_value_text(f, defaults), f.full_help());
    for (const FlagAlias& a : f.aliases) out += row(a.name, "", fmt::format("same as `--{} {}`", f.name, a.value));
  }
  return out;
}

inline const char* flags_markdown_header() { return "| flag | default | meaning |\n|---|---|---|\n"; }

}  // namespace tg

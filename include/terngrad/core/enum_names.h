// EnumNames<E>: the one list of {value, name} pairs of an enum that is read from or written to text (a flag,
// a log line, a file). Parsing, naming and the "accepted values" of an error message and of --help all come
// from it, as Caffe's registry builds its "unknown type (known types: ...)" message from its entries:
//
//   template <> struct EnumNames<OptimizerKind> : EnumNamesBase {
//     static constexpr const char* kFlag = "--optimizer";
//     static constexpr EnumName<OptimizerKind> kList[] = {{OptimizerKind::kGd, "gd"}, ...};
//   };
//   parse_enum<OptimizerKind>("sgd")  // throws "--optimizer 'sgd' is not one of gd, momentum, adam, rmsprop"
//   enum_name(OptimizerKind::kGd)     // "gd"
//
// An entry marked `alias` is accepted by parse but neither listed nor returned by enum_name (the first entry
// of a value names it). kIgnoreCase = true makes parse case-insensitive (for names that came from TF files).
#pragma once

#include <cctype>
#include <string>
#include <string_view>

#include "terngrad/core/error.h"

namespace tg {

template <typename E>
struct EnumName {
  E value;
  const char* name;
  bool alias = false;
};

struct EnumNamesBase {
  static constexpr bool kIgnoreCase = false;
};

// Specialise for each enum: kFlag (the flag or setting named in errors) and kList.
template <typename E>
struct EnumNames;

namespace detail {
inline bool enum_text_equal(std::string_view a, std::string_view b, bool ignore_case) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto x = static_cast<unsigned char>(a[i]), y = static_cast<unsigned char>(b[i]);
    if (ignore_case ? std::tolower(x) != std::tolower(y) : x != y) return false;
  }
  return true;
}
}  // namespace detail

// "gd, momentum, adam, rmsprop": the accepted names (aliases left out), in list order.
template <typename E>
std::string enum_accepted(std::string_view separator = ", ") {
  std::string text;
  for (const EnumName<E>& e : EnumNames<E>::kList) {
    if (e.alias) continue;
    if (!text.empty()) text += separator;
    text += e.name;
  }
  return text;
}

// Whether `text` names a value (an alias included).
template <typename E>
bool enum_known(std::string_view text) {
  for (const EnumName<E>& e : EnumNames<E>::kList)
    if (detail::enum_text_equal(text, e.name, EnumNames<E>::kIgnoreCase)) return true;
  return false;
}

// The value `text` names; otherwise throws "<flag> '<text>' is not one of <accepted>".
template <typename E>
E parse_enum(std::string_view text, std::string_view flag = EnumNames<E>::kFlag) {
  for (const EnumName<E>& e : EnumNames<E>::kList)
    if (detail::enum_text_equal(text, e.name, EnumNames<E>::kIgnoreCase)) return e.value;
  TG_THROW("{} '{}' is not one of {}", flag, text, enum_accepted<E>());
}

// The name of `value` (its first entry); "?" for a value outside the list.
template <typename E>
const char* enum_name(E value) {
  for (const EnumName<E>& e : EnumNames<E>::kList)
    if (e.value == value) return e.name;
  return "?";
}

}  // namespace tg

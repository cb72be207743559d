// JSON escaping and objects.
#include "terngrad/core/json_writer.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "terngrad/core/error.h"

namespace tg {

namespace {
// The characters with a two-character escape, and the letter that follows the backslash.
constexpr char kEscaped[] = "\"\\\n\r\t\b\f";
constexpr char kLetters[] = "\"\\nrtbf";
}  // namespace

void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (const char* e = c != 0 ? std::strchr(kEscaped, ch) : nullptr) {
      out += '\\';
      out += kLetters[e - kEscaped];
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\u{:04x}", c);
    } else {
      out += ch;  // UTF-8 passes through
    }
  }
  out += '"';
}

std::string json_string(std::string_view s) {
  std::string out;
  append_json_string(out, s);
  return out;
}

std::string json_number(double v) { return std::isfinite(v) ? fmt::format("{:.9g}", v) : "null"; }

JsonObject& JsonObject::key(std::string_view key) {
  if (text_.size() > 1) text_ += ", ";
  append_json_string(text_, key);
  text_ += ": ";
  return *this;
}

JsonObject& JsonObject::add(std::string_view k, std::string_view value) {
  append_json_string(key(k).text_, value);
  return *this;
}
JsonObject& JsonObject::add(std::string_view k, double value) { return add_json(k, json_number(value)); }
JsonObject& JsonObject::add(std::string_view k, int64_t value) { return add_json(k, std::to_string(value)); }
JsonObject& JsonObject::add(std::string_view k, uint64_t value) { return add_json(k, std::to_string(value)); }
JsonObject& JsonObject::add(std::string_view k, bool value) { return add_json(k, value ? "true" : "false"); }

JsonObject& JsonObject::add(std::string_view k, const std::vector<double>& values) {
  std::vector<std::string> numbers;
  for (double v : values) numbers.push_back(json_number(v));
  return add_json(k, json_array(numbers));
}

JsonObject& JsonObject::add_json(std::string_view k, std::string_view json) {
  key(k).text_ += json;
  return *this;
}

std::string json_array(const std::vector<std::string>& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + values[i];
  return out + "]";
}

}  // namespace tg

// JSON input: parse_json reads one JSON text (RFC 8259: objects, arrays, strings with every escape, numbers,
// true, false, null) into a JsonValue tree. It is what reads the header of a safetensors file; errors name the
// byte offset and what was expected there, prefixed with the caller's `what` (e.g. the file's name), and a
// nesting deeper than 64 is refused (a hostile header cannot exhaust the stack). Numbers are kept as their
// text and as a double; as_int64 refuses one that is not an exact integer.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace tg {

class JsonValue {
 public:
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };

  Kind kind() const { return kind_; }
  const char* kind_name() const;  // "null", "a boolean", "a number", "a string", "an array", "an object"
  bool is_object() const { return kind_ == Kind::kObject; }
  bool is_array() const { return kind_ == Kind::kArray; }
  bool is_string() const { return kind_ == Kind::kString; }

  // Accessors throw tg::Error naming `what` (the value's path, given by the caller) and the kind found.
  const std::string& as_string(std::string_view what) const;
  int64_t as_int64(std::string_view what) const;
  double as_double(std::string_view what) const;  // any number
  bool as_bool(std::string_view what) const;
  const std::vector<JsonValue>& as_array(std::string_view what) const;
  const std::map<std::string, JsonValue>& as_object(std::string_view what) const;
  const JsonValue* find(const std::string& key) const;  // an object's member, or nullptr

 private:
  friend class JsonParser;
  Kind kind_ = Kind::kNull;
  bool boolean_ = false;
  double number_ = 0;
  std::string text_;  // a string's value, a number's text
  std::vector<JsonValue> array_;
  std::map<std::string, JsonValue> object_;  // a duplicate key is refused by the parser
};

// Parses `text` as one JSON value (surrounding whitespace allowed, nothing else after it).
JsonValue parse_json(std::string_view text, std::string_view what);

}  // namespace tg

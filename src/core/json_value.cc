// A small recursive-descent JSON parser (RFC 8259) for the inputs we read: safetensors headers.
#include "terngrad/core/json_value.h"

#include <fmt/format.h>

#include <cctype>
#include <cstdlib>

#include "terngrad/core/error.h"

namespace tg {

const char* JsonValue::kind_name() const {
  switch (kind_) {
    case Kind::kNull:
      return "null";
    case Kind::kBool:
      return "a boolean";
    case Kind::kNumber:
      return "a number";
    case Kind::kString:
      return "a string";
    case Kind::kArray:
      return "an array";
    case Kind::kObject:
      return "an object";
  }
  return "?";
}

const std::string& JsonValue::as_string(std::string_view what) const {
  if (kind_ != Kind::kString) TG_THROW("{} must be a string, not {}", what, kind_name());
  return text_;
}

int64_t JsonValue::as_int64(std::string_view what) const {
  if (kind_ != Kind::kNumber) TG_THROW("{} must be an integer, not {}", what, kind_name());
  // Exact below 2^53; larger values are read from the text.
  if (text_.find_first_of(".eE") != std::string::npos || text_.size() > 19)
    TG_THROW("{} must be an integer below 2^63, not {}", what, text_);
  return std::strtoll(text_.c_str(), nullptr, 10);
}

double JsonValue::as_double(std::string_view what) const {
  if (kind_ != Kind::kNumber) TG_THROW("{} must be a number, not {}", what, kind_name());
  return number_;
}

bool JsonValue::as_bool(std::string_view what) const {
  if (kind_ != Kind::kBool) TG_THROW("{} must be true or false, not {}", what, kind_name());
  return boolean_;
}

const std::vector<JsonValue>& JsonValue::as_array(std::string_view what) const {
  if (kind_ != Kind::kArray) TG_THROW("{} must be an array, not {}", what, kind_name());
  return array_;
}

const std::map<std::string, JsonValue>& JsonValue::as_object(std::string_view what) const {
  if (kind_ != Kind::kObject) TG_THROW("{} must be an object, not {}", what, kind_name());
  return object_;
}

const JsonValue* JsonValue::find(const std::string& key) const {
  if (kind_ != Kind::kObject) return nullptr;
  auto it = object_.find(key);
  return it == object_.end() ? nullptr : &it->second;
}

class JsonParser {
 public:
  JsonParser(std::string_view text, std::string_view what) : s_(text), what_(what) {}

  JsonValue parse_document() {
    JsonValue v = value(0);
    skip_space();
    if (pos_ != s_.size()) fail("the end of the JSON text");
    return v;
  }

 private:
  static constexpr int kMaxDepth = 64;

  [[noreturn]] void fail(std::string_view expected) const {
    if (pos_ >= s_.size()) TG_THROW("{}: invalid JSON: expected {} at byte {}, found the end", what_, expected, pos_);
    TG_THROW("{}: invalid JSON: expected {} at byte {}, found '{}'", what_, expected, pos_,
             std::isprint(static_cast<unsigned char>(s_[pos_])) ? std::string(1, s_[pos_])
                                                                : fmt::format("\\x{:02x}", s_[pos_] & 0xff));
  }
  void skip_space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  bool take(char c) {
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c, std::string_view expected) {
    if (!take(c)) fail(expected);
  }
  bool literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  JsonValue value(int depth) {
    skip_space();
    if (pos_ >= s_.size()) fail("a value");
    JsonValue v;
    const char c = s_[pos_];
    if ((c == '{' || c == '[') && depth >= kMaxDepth)  // depth: the containers around this one
      TG_THROW("{}: JSON nested deeper than {} at byte {}", what_, kMaxDepth, pos_);
    if (c == '{') {
      ++pos_;
      v.kind_ = JsonValue::Kind::kObject;
      if (take('}')) return v;
      do {
        skip_space();
        if (pos_ >= s_.size() || s_[pos_] != '"') fail("a member name (a string)");
        const size_t at = pos_;
        std::string key = string();
        expect(':', "':'");
        if (!v.object_.emplace(key, value(depth + 1)).second)
          TG_THROW("{}: invalid JSON: the key \"{}\" appears twice (byte {})", what_, key, at);
      } while (take(','));
      expect('}', "',' or '}'");
    } else if (c == '[') {
      ++pos_;
      v.kind_ = JsonValue::Kind::kArray;
      if (take(']')) return v;
      do v.array_.push_back(value(depth + 1));
      while (take(','));
      expect(']', "',' or ']'");
    } else if (c == '"') {
      v.kind_ = JsonValue::Kind::kString;
      v.text_ = string();
    } else if (literal("true")) {
      v.kind_ = JsonValue::Kind::kBool, v.boolean_ = true;
    } else if (literal("false")) {
      v.kind_ = JsonValue::Kind::kBool;
    } else if (literal("null")) {
      v.kind_ = JsonValue::Kind::kNull;
    } else {
      v.kind_ = JsonValue::Kind::kNumber;
      v.text_ = number();
      v.number_ = std::strtod(v.text_.c_str(), nullptr);
    }
    return v;
  }

  // -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  std::string number() {
    const size_t start = pos_;
    auto digits = [&] {
      const size_t from = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      return pos_ > from;
    };
    if (pos_ < s_.size() && s_[pos_] == '-') ++pos_;
    if (pos_ < s_.size() && s_[pos_] == '0') {
      ++pos_;
    } else if (!digits()) {
      pos_ = start;
      fail("a value");
    }
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      if (!digits()) fail("a digit after '.'");
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (!digits()) fail("an exponent's digits");
    }
    return std::string(s_.substr(start, pos_ - start));
  }

  unsigned hex4() {
    unsigned u = 0;
    for (int i = 0; i < 4; ++i, ++pos_) {
      if (pos_ >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[pos_]))) fail("4 hex digits after \\u");
      const char h = s_[pos_];
      u = u * 16 + static_cast<unsigned>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
    }
    return u;
  }
  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6)), out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12)), out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18)), out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F)), out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::string string() {
    ++pos_;  // the opening quote
    std::string out;
    while (true) {
      if (pos_ >= s_.size()) fail("'\"' closing the string");
      const char c = s_[pos_];
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) fail("an escaped control character");
      if (c != '\\') {
        out += c;
        ++pos_;
        continue;
      }
      ++pos_;
      if (pos_ >= s_.size()) fail("an escape");
      const char e = s_[pos_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00) {  // a high surrogate: its low half must follow
            if (!literal("\\u")) fail("the low half of a surrogate pair");
            const unsigned low = hex4();
            if (low < 0xDC00 || low >= 0xE000) fail("the low half of a surrogate pair");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xDC00 && cp < 0xE000) {
            fail("a high surrogate before a low one");
          }
          append_utf8(out, cp);
          break;
        }
        default:
          --pos_;
          fail("one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u");
      }
    }
  }

  std::string_view s_;
  std::string_view what_;
  size_t pos_ = 0;
};

JsonValue parse_json(std::string_view text, std::string_view what) { return JsonParser(text, what).parse_document(); }

}  // namespace tg

// JSON output, one way for the whole project: the string escaper (quotes, backslash and control characters
// escaped; every other byte, UTF-8 included, passed through), JsonObject (one object, keys in the order
// added, written as {"key": value, ...}: the form the scripts grep), and JsonLinesFile, an appended file of
// one object per line (--metrics_jsonl, eval.jsonl; an AppendFile, core/atomic_file.h) whose every line is one
// checked write, so a run that dies keeps what it wrote and a failed open or write is an error naming the
// file. Whole JSON files (the timeline's trace) are built with the same escaper and written with AtomicFile.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "terngrad/core/atomic_file.h"

namespace tg {

// Appends s as a JSON string literal, quotes included.
void append_json_string(std::string& out, std::string_view s);
std::string json_string(std::string_view s);
// A finite number with 9 significant digits ("{:.9g}"); NaN and infinities become null.
std::string json_number(double v);

class JsonObject {
 public:
  JsonObject& add(std::string_view key, std::string_view value);  // a string
  JsonObject& add(std::string_view key, const char* value) { return add(key, std::string_view(value)); }
  JsonObject& add(std::string_view key, const std::string& value) { return add(key, std::string_view(value)); }
  JsonObject& add(std::string_view key, double value);
  JsonObject& add(std::string_view key, int64_t value);
  JsonObject& add(std::string_view key, uint64_t value);
  JsonObject& add(std::string_view key, bool value);
  JsonObject& add(std::string_view key, const std::vector<double>& values);  // an array of numbers
  // An already-built JSON value: an object's str(), or json_array() of such.
  JsonObject& add_json(std::string_view key, std::string_view json);

  std::string str() const { return text_ + "}"; }

 private:
  JsonObject& key(std::string_view key);  // appends the separator and "key":
  std::string text_ = "{";
};

// "[v0, v1, ...]" of already-built JSON values.
std::string json_array(const std::vector<std::string>& values);

class JsonLinesFile {
 public:
  // Opens path for appending (created when missing). flag names the option in errors ("--metrics_jsonl").
  JsonLinesFile(const std::string& path, const std::string& flag) : file_(path, flag) {}

  void write(const JsonObject& object) { file_.append(object.str() + "\n"); }  // one line, one append

 private:
  AppendFile file_;
};

}  // namespace tg

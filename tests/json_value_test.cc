// parse_json (core/json_value.h), the reader of safetensors headers: every JSON construct, the escapes (surrogate
// pairs included), and the refusals: truncation, trailing bytes, a duplicate key, nesting past 64, bad escapes and
// numbers, accessors of the wrong kind, each naming the input and the byte offset.
#include "terngrad/core/json_value.h"

#include <gtest/gtest.h>

#include <string>

#include "terngrad/core/error.h"

namespace tg {
namespace {

std::string error_of(const std::string& text) {
  try {
    parse_json(text, "hdr");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(JsonValue, ParsesASafetensorsHeader) {
  const JsonValue v = parse_json(
      R"( {"conv1.weight": {"dtype": "F32", "shape": [20, 1, 5, 5], "data_offsets": [0, 2000]},
           "__metadata__": {"format": "pt"}, "x": [true, false, null, -0.5e+3, 0, 1E2, "a\"b\\c\/\n\u00e9\ud83d\ude00"]} )",
      "hdr");
  const auto& root = v.as_object("root");
  ASSERT_EQ(root.size(), 3u);
  const JsonValue* w = v.find("conv1.weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->find("dtype")->as_string("dtype"), "F32");
  const auto& shape = w->find("shape")->as_array("shape");
  ASSERT_EQ(shape.size(), 4u);
  EXPECT_EQ(shape[0].as_int64("d"), 20);
  EXPECT_EQ(w->find("data_offsets")->as_array("o")[1].as_int64("o"), 2000);
  const auto& x = v.find("x")->as_array("x");
  ASSERT_EQ(x.size(), 7u);
  EXPECT_EQ(x[0].kind(), JsonValue::Kind::kBool);
  EXPECT_EQ(x[2].kind(), JsonValue::Kind::kNull);
  EXPECT_EQ(x[3].kind(), JsonValue::Kind::kNumber);
  EXPECT_EQ(x[6].as_string("s"), "a\"b\\c/\n\xc3\xa9\xf0\x9f\x98\x80");  // é and U+1F600 in UTF-8
  EXPECT_EQ(v.find("missing"), nullptr);
  EXPECT_EQ(parse_json("[]", "e").as_array("e").size(), 0u);
  EXPECT_EQ(parse_json("{}", "e").as_object("e").size(), 0u);
  EXPECT_EQ(parse_json("9007199254740993", "n").as_int64("n"), 9007199254740993);  // exact past 2^53
}

TEST(JsonValue, RefusesMalformedTextNamingTheByte) {
  EXPECT_EQ(error_of(R"({"a": 1)"), "hdr: invalid JSON: expected ',' or '}' at byte 7, found the end");
  EXPECT_EQ(error_of(R"({"a": 1} x)"), "hdr: invalid JSON: expected the end of the JSON text at byte 9, found 'x'");
  EXPECT_EQ(error_of(R"({"a": 1, "a": 2})"), "hdr: invalid JSON: the key \"a\" appears twice (byte 9)");
  EXPECT_EQ(error_of(R"({a: 1})"), "hdr: invalid JSON: expected a member name (a string) at byte 1, found 'a'");
  EXPECT_NE(error_of(R"(["\x"])").find("expected one of"), std::string::npos);
  EXPECT_NE(error_of(R"(["\ud83d"])").find("low half of a surrogate pair"), std::string::npos);
  EXPECT_NE(error_of(R"(["\ude00"])").find("high surrogate"), std::string::npos);
  EXPECT_NE(error_of("[\"a\tb\"]").find("escaped control character"), std::string::npos);
  EXPECT_NE(error_of("[01]").find("expected ',' or ']'"), std::string::npos);
  EXPECT_NE(error_of("[1.]").find("a digit after '.'"), std::string::npos);
  EXPECT_NE(error_of("[1e]").find("an exponent's digits"), std::string::npos);
  EXPECT_NE(error_of("[-]").find("expected a value"), std::string::npos);
  EXPECT_NE(error_of("").find("found the end"), std::string::npos);
  EXPECT_NE(error_of("[tru]").find("expected a value"), std::string::npos);
  EXPECT_NE(error_of(std::string(65, '[') + std::string(65, ']')).find("nested deeper than 64"), std::string::npos);
  EXPECT_EQ(error_of(std::string(64, '[') + "1" + std::string(64, ']')), "");
}

TEST(JsonValue, AccessorsOfTheWrongKindNameTheValue) {
  const JsonValue v = parse_json(R"({"s": "x", "f": 1.5, "big": 123456789012345678901, "a": []})", "hdr");
  EXPECT_THROW(v.as_array("root"), Error);
  try {
    v.find("s")->as_int64("tensor 'w' shape");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "tensor 'w' shape must be an integer, not a string");
  }
  EXPECT_THROW(v.find("f")->as_int64("f"), Error);
  EXPECT_THROW(v.find("big")->as_int64("big"), Error);
  EXPECT_THROW(v.find("a")->as_string("a"), Error);
  EXPECT_THROW(v.find("a")->as_object("a"), Error);
}

}  // namespace
}  // namespace tg

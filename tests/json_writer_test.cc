// The JSON writer: strings with quotes, backslashes, every control character and UTF-8 come back equal from
// python3's json module (the tests report SKIPPED without python3); the object form the scripts grep; numbers
// (non-finite ones become null); JSON-lines files appended line by line, and a failed open or write reported
// in one line naming the file.
#include "terngrad/core/json_writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "terngrad/core/error.h"

namespace tg {
namespace {

namespace fs = std::filesystem;

class JsonWriterTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tg_json_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // python3's json.loads of the file's lines; gives each decoded value's given field (or the value itself)
  // as UTF-8 bytes, one per line, with backslashes doubled and newlines inside it written as "\n" (or python's
  // error).
  std::string python_decode(const std::string& file, const std::string& field) const {
    const std::string out = (dir_ / "decoded").string();
    const std::string cmd =
        "python3 -c \"import json,sys\nfor l in open(sys.argv[1], encoding='utf-8'):\n"
        "  v=json.loads(l)\n  v=v[sys.argv[2]] if sys.argv[2] else v\n"
        "  sys.stdout.buffer.write(v.replace(chr(92), chr(92)*2).replace(chr(10), chr(92)+'n')"
        ".encode('utf-8', 'surrogateescape')+b'\\n')\" " +
        file + " '" + field + "' > " + out + " 2>&1";
    if (std::system(cmd.c_str()) != 0) return "python3 failed: " + read(out);
    return read(out);
  }
  static std::string read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream all;
    all << in.rdbuf();
    return all.str();
  }
  // What python_decode prints for s.
  static std::string expected(const std::string& s) {
    std::string out;
    for (char c : s) out += c == '\\' ? "\\\\" : c == '\n' ? "\\n" : std::string(1, c);
    return out + "\n";
  }
  static bool have_python() { return std::system("command -v python3 > /dev/null 2>&1") == 0; }

  fs::path dir_;
};

std::string every_hard_character() {
  std::string s = "quote \" backslash \\ slash / ";
  for (int c = 1; c < 0x20; ++c) s += static_cast<char>(c);
  s += '\x7f';
  s += " caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80";  // é, 日本, an emoji: UTF-8 passed through
  return s;
}

TEST_F(JsonWriterTest, StringsComeBackEqualFromPython) {
  if (!have_python()) GTEST_SKIP() << "python3 not found (needed to parse the JSON)";
  const std::string s = every_hard_character();
  const std::string file = (dir_ / "s.json").string();
  std::ofstream(file) << json_string(s) << "\n" << json_string("") << "\n";
  EXPECT_EQ(python_decode(file, ""), expected(s) + expected(""));
}

TEST_F(JsonWriterTest, EscapesOnlyWhatJsonNeeds) {
  EXPECT_EQ(json_string("a\"b\\c\nd\te\x01"), "\"a\\\"b\\\\c\\nd\\te\\u0001\"");
  EXPECT_EQ(json_string("caf\xc3\xa9"), "\"caf\xc3\xa9\"");  // UTF-8 bytes unchanged
  EXPECT_EQ(json_string(std::string("a\0b", 3)), "\"a\\u0000b\"");
}

TEST_F(JsonWriterTest, ObjectFormAndNumbers) {
  JsonObject o;
  o.add("summary", true)
      .add("steps", int64_t{-3})
      .add("bytes", uint64_t{18446744073709551615u})
      .add("rate", 0.1)
      .add("nan", std::nan(""))
      .add("inf", std::numeric_limits<double>::infinity())
      .add("name", "a\"b")
      .add("list", std::vector<double>{1.5, 2})
      .add_json("time", JsonObject().add("fb", 0.25).str());
  EXPECT_EQ(o.str(),
            "{\"summary\": true, \"steps\": -3, \"bytes\": 18446744073709551615, \"rate\": 0.1, \"nan\": null, "
            "\"inf\": null, \"name\": \"a\\\"b\", \"list\": [1.5, 2], \"time\": {\"fb\": 0.25}}");
  EXPECT_EQ(JsonObject().str(), "{}");
  EXPECT_EQ(json_array({}), "[]");
}

TEST_F(JsonWriterTest, LinesAreAppendedAndParse) {
  const std::string file = (dir_ / "m.jsonl").string();
  const std::string hard = every_hard_character();
  JsonLinesFile(file, "--x").write(JsonObject().add("k", "first"));
  {
    JsonLinesFile f(file, "--x");
    f.write(JsonObject().add("k", hard));
    f.write(JsonObject().add("k", "third"));
  }
  EXPECT_EQ(read(file).substr(0, 15), "{\"k\": \"first\"}\n");
  if (!have_python()) GTEST_SKIP() << "python3 not found (needed to parse the JSON)";
  EXPECT_EQ(python_decode(file, "k"), expected("first") + expected(hard) + expected("third"));
}

// The one-line error of a failed write names the flag, the file and the reason.
TEST_F(JsonWriterTest, FailedWriteIsOneLineNamingTheFile) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  JsonLinesFile f("/dev/full", "--metrics_jsonl");
  try {
    f.write(JsonObject().add("step", int64_t{1}));
    FAIL() << "a write to /dev/full succeeded";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("--metrics_jsonl /dev/full: write failed: No space left on device"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST_F(JsonWriterTest, FailedOpenNamesTheFile) {
  const std::string file = (dir_ / "missing" / "eval.jsonl").string();
  try {
    JsonLinesFile f(file, "--eval_dir");
    FAIL() << "opened " << file;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--eval_dir " + file + ": cannot open: No such file or directory"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tg

// AtomicFile and AppendFile, the two ways files are written. AtomicFile: the final name appears only at
// commit(); the two temporary names (beside the file, which the train_dir cleanup knows; hidden, which no
// "<subset>-*" glob matches); an unfinished file leaves nothing; errors name the file. TfRecordWriter is built
// on it (same guarantees). AppendFile: whole records, errors naming the file.
#include "terngrad/core/atomic_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "terngrad/core/error.h"
#include "terngrad/data/tfrecord.h"

namespace tg {
namespace {

namespace fs = std::filesystem;

class AtomicFileTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tg_atomic_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
  static std::string read(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  fs::path dir_;
};

TEST_F(AtomicFileTest, FinalNameOnlyAtCommit) {
  const std::string path = (dir_ / "model.ckpt-7").string();
  AtomicFile f(path);
  EXPECT_EQ(f.temp_path(), path + ".tmp-" + std::to_string(::getpid()));
  f.write("abc", 3);
  f.write(std::string("de"));
  EXPECT_EQ(f.bytes_written(), 5u);
  EXPECT_EQ(names(), std::vector<std::string>{"model.ckpt-7.tmp-" + std::to_string(::getpid())});
  f.commit();
  EXPECT_EQ(names(), std::vector<std::string>{"model.ckpt-7"});
  EXPECT_EQ(read(path), "abcde");
  EXPECT_THROW(f.write("x", 1), Error);
  EXPECT_THROW(f.commit(), Error);
}

TEST_F(AtomicFileTest, HiddenTemporaryNamesAreUniqueAndMatchNoGlob) {
  const std::string path = (dir_ / "train-00000-of-00002").string();
  AtomicFile a(path, AtomicFile::TempName::kHidden), b(path, AtomicFile::TempName::kHidden, 1 << 16);
  EXPECT_NE(a.temp_path(), b.temp_path());
  for (const AtomicFile* f : {&a, &b}) {
    const std::string name = fs::path(f->temp_path()).filename().string();
    EXPECT_EQ(name.rfind(".train-00000-of-00002.tmp-" + std::to_string(::getpid()) + "-", 0), 0u) << name;
    EXPECT_EQ(fs::path(f->temp_path()).parent_path(), dir_);
  }
  b.write("x", 1);
  b.commit();
  EXPECT_EQ(read(path), "x");
}

TEST_F(AtomicFileTest, UnfinishedFilesLeaveNothing) {
  {
    AtomicFile f((dir_ / "checkpoint").string());
    f.write("half", 4);
  }
  {
    TfRecordWriter w((dir_ / "test-00000-of-00001").string(), TfRecordCompression::kGzip);
    w.write("record");
  }
  EXPECT_TRUE(names().empty());
}

TEST_F(AtomicFileTest, ErrorsNameTheFile) {
  const std::string path = (dir_ / "gone" / "f").string();
  try {
    AtomicFile f(path);
    FAIL() << "created a file in a missing folder";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  EXPECT_THROW(TfRecordWriter w(path), Error);
}

TEST_F(AtomicFileTest, TfRecordWriterCommitsThroughAtomicFile) {
  const fs::path path = dir_ / "test-00000-of-00001";
  TfRecordWriter w(path.string());
  w.write("one");
  w.write(std::string(100000, 'x'));
  EXPECT_FALSE(fs::exists(path));
  w.close();
  EXPECT_EQ(names(), std::vector<std::string>{"test-00000-of-00001"});
  EXPECT_EQ(read_all_tfrecords(path.string()), (std::vector<std::string>{"one", std::string(100000, 'x')}));
  EXPECT_THROW(w.write("late"), Error);
  EXPECT_THROW(w.close(), Error);
}

// AppendFile: records of two writers on one file stay whole, in the order written; a missing folder is an
// error naming the file after `what`.
TEST_F(AtomicFileTest, AppendFileKeepsRecordsWhole) {
  const fs::path path = dir_ / "log";
  {
    AppendFile a(path.string()), b(path.string());
    a.append("a1\n");
    b.append(std::string(70000, 'b') + "\n");
    a.append("a2\n");
  }
  AppendFile(path.string()).append("c\n");
  EXPECT_EQ(read(path), "a1\n" + std::string(70000, 'b') + "\na2\nc\n");
  const std::string missing = (dir_ / "gone" / "log").string();
  try {
    AppendFile f(missing, "--metrics_jsonl");
    FAIL() << "opened " << missing;
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find("--metrics_jsonl " + missing + ": cannot open: "), 0u) << e.what();
  }
}

}  // namespace
}  // namespace tg

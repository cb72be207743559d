// EventWriter: TensorBoard event files keep every scalar, 0 included. A file written here is read back (TFRecord
// framing, tensorflow.Event): a scalar of exactly 0 (and -0) must carry its type (the oneof's simple_value set,
// so its bytes were in the file), and TensorBoard's own reader (EventAccumulator of python3's tensorboard
// package, which scripts/setup.sh installs) must list it with its value and step.
#include "terngrad/train/event_writer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>

#include "common/files.h"
#include "event.pb.h"
#include "terngrad/data/tfrecord.h"

namespace tg {
namespace {

namespace fs = std::filesystem;

// The one events.out.tfevents.* file in dir.
fs::path event_file(const fs::path& dir) {
  fs::path found;
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0) found = entry.path(), ++files;
  EXPECT_EQ(files, 1) << dir;
  return found;
}

std::vector<tensorflow::Event> read_events(const fs::path& file) {
  std::vector<tensorflow::Event> events;
  TfRecordReader reader(file.string());
  std::string record;
  while (reader.next(&record)) {
    tensorflow::Event e;
    EXPECT_TRUE(e.ParseFromString(record));
    events.push_back(e);
  }
  return events;
}

const std::vector<std::pair<std::string, float>> kScalars = {
    {"time/comm_blocked", 0.f}, {"skipped_steps", -0.f}, {"losses/total_loss", 2.5f}, {"tiny", 1e-30f}};

TEST(EventWriter, ZeroValuedScalarsAreWrittenWithTheirType) {
  const fs::path dir = testing::temp_dir("zeros");
  {
    EventWriter w(dir.string());
    w.scalars(7, kScalars);
  }
  const std::vector<tensorflow::Event> ev = read_events(event_file(dir));
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].file_version(), "brain.Event:2");
  EXPECT_EQ(ev[1].step(), 7);
  ASSERT_EQ(ev[1].summary().value_size(), static_cast<int>(kScalars.size()));
  for (int i = 0; i < ev[1].summary().value_size(); ++i) {
    const tensorflow::SummaryValue& v = ev[1].summary().value(i);
    EXPECT_EQ(v.tag(), kScalars[i].first);
    // Parsed from the file's bytes: has_simple_value() holds only when the field was serialized.
    EXPECT_TRUE(v.has_simple_value()) << v.tag() << ": the scalar's value is missing from the file";
    EXPECT_EQ(v.value_case(), tensorflow::SummaryValue::kSimpleValue) << v.tag();
    EXPECT_EQ(v.simple_value(), kScalars[i].second) << v.tag();
    EXPECT_EQ(std::signbit(v.simple_value()), std::signbit(kScalars[i].second)) << v.tag();
  }
  fs::remove_all(dir);
}

// TensorBoard's EventAccumulator is what its scalar dashboard reads: a tag without a value never shows there.
TEST(EventWriter, TensorBoardListsTheZeroScalars) {
  if (testing::run_command("python3 -c 'import tensorboard' 2>/dev/null") != 0)
    GTEST_SKIP() << "python3's tensorboard package is not installed (scripts/setup.sh installs it)";
  const fs::path dir = testing::temp_dir("tensorboard");
  {
    EventWriter w(dir.string());
    w.scalars(3, kScalars);
    w.scalars(4, {{"time/comm_blocked", 0.25f}});
  }
  std::string out;
  const int rc = testing::run_command(
      "python3 -c '"
      "import sys\n"
      "from tensorboard.backend.event_processing.event_accumulator import EventAccumulator\n"
      "ea = EventAccumulator(sys.argv[1])\n"
      "ea.Reload()\n"
      "for tag in sorted(ea.Tags()[\"scalars\"]):\n"
      "    for e in ea.Scalars(tag): print(tag, e.step, repr(e.value))\n"
      "' " +
          dir.string() + " 2>&1",
      &out);
  ASSERT_EQ(rc, 0) << out;
  std::map<std::string, std::string> seen;  // "tag step" -> value
  std::istringstream lines(out);
  std::string tag, step, value;
  while (lines >> tag >> step >> value) seen[tag + " " + step] = value;
  EXPECT_EQ(seen["time/comm_blocked 3"], "0.0") << out;
  EXPECT_EQ(seen["time/comm_blocked 4"], "0.25") << out;
  EXPECT_EQ(seen["skipped_steps 3"], "-0.0") << out;
  EXPECT_EQ(seen["losses/total_loss 3"], "2.5") << out;
  EXPECT_EQ(seen.size(), kScalars.size() + 1) << out;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tg

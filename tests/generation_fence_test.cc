// The generation fence of elastic runs (train/generation_fence.h) and the commit guards it stands on
// (core/atomic_file.h): a guarded folder's commits run the check right before their rename, a refused one leaves
// the final file as it was and no temporary file; a trainer of a generation that is over refuses to start, and one
// that finds a later generation while it runs stops at its next checkpoint without writing it; --stop_file ends a
// run as a stop request does, with a checkpoint; --save_secs checkpoints by the clock (what bounds an elastic run's
// loss per failure when steps vary).
#include "terngrad/train/generation_fence.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/files.h"
#include "terngrad/core/atomic_file.h"
#include "terngrad/core/error.h"
#include "terngrad/train/checkpoint.h"
#include "terngrad/train/trainer.h"

namespace tg {
namespace {

namespace fs = std::filesystem;

class Fence : public ::testing::Test {
 protected:
  void SetUp() override { root_ = testing::temp_dir("fence"); }
  void TearDown() override { fs::remove_all(root_); }
  std::string path(const std::string& name) const { return (root_ / name).string(); }
  static void write(const std::string& p, const std::string& text) {
    AtomicFile f(p);
    f.write(text);
    f.commit();
  }
  static std::string read(const std::string& p) {
    std::ifstream f(p);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
  size_t files_in(const std::string& dir) const {
    size_t n = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
    return n;
  }
  fs::path root_;
};

TEST_F(Fence, AGuardedFoldersCommitsRunTheCheckAndARefusalLeavesNothing) {
  fs::create_directories(path("a/sub"));
  fs::create_directories(path("b"));
  write(path("a/sub/f"), "old");
  {
    CommitGuard guard(path("a"), [] { TG_THROW("refused"); });
    EXPECT_THROW(write(path("a/sub/f"), "new"), Error);
    EXPECT_EQ(read(path("a/sub/f")), "old");
    EXPECT_EQ(files_in(path("a/sub")), 1u) << "the refused write's temporary file is gone";
    write(path("b/f"), "other folder");  // not guarded
    EXPECT_EQ(read(path("b/f")), "other folder");
  }
  write(path("a/sub/f"), "new");  // the guard is gone
  EXPECT_EQ(read(path("a/sub/f")), "new");
}

TEST_F(Fence, AGenerationWritesOnlyWhileTheFileNamesIt) {
  const std::string dir = path("t");
  fs::create_directories(dir);
  EXPECT_EQ(GenerationFence::current(dir), 0);
  // No file, or an earlier generation's: this machine does not see the launcher's train_dir (not a shared folder).
  try {
    GenerationFence g3(dir, 3);
    FAIL() << "generation 3 started in a train_dir whose generation file is missing";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("names no generation: this machine does not see"), std::string::npos)
        << e.what();
  }
  write(path("t/generation"), "2\n");
  EXPECT_THROW(GenerationFence(dir, 3), Error);
  {
    write(path("t/generation"), "3\n");
    GenerationFence g3(dir, 3);
    write(path("t/ckpt"), "by 3");
    write(path("t/ckpt"), "by 3 again");
    write(path("t/generation"), "4\n");  // the launcher started generation 4
    try {
      write(path("t/ckpt"), "by 3, late");
      FAIL() << "a write of generation 3 after generation 4 started";
    } catch (const Error& e) {
      EXPECT_EQ(
          std::string(e.what()).rfind("--generation 3 is over: " + path("t/generation") + " names generation 4", 0), 0u)
          << e.what();
    }
    EXPECT_EQ(read(path("t/ckpt")), "by 3 again");
  }
  EXPECT_THROW(GenerationFence(dir, 3), Error);  // a later one owns it: refused at the start
  GenerationFence g4(dir, 4), off(dir, 0);
  EXPECT_NO_THROW(write(path("t/ckpt"), "by 4"));
  write(path("t/generation"), "four");
  EXPECT_THROW(GenerationFence::current(dir), Error);
  EXPECT_THROW(GenerationFence(dir, -1), Error);
}

TrainConfig lenet_run(const std::string& dir) {
  TrainConfig c;
  c.train_dir = dir;
  c.benchmark_mode = true;
  c.threads = 1;
  c.batch_size = 8;
  c.log_every = 1;
  return c;
}

TEST_F(Fence, ATrainerOfAGenerationThatIsOverNeitherStartsNorSaves) {
  const std::string dir = path("run");
  TrainConfig c = lenet_run(dir);
  c.generation = 2;
  c.max_steps = 2;
  fs::create_directories(dir);
  write(dir + "/generation", "2\n");
  c.save_iter = 1;
  EXPECT_EQ(Trainer(c).run().steps_done, 2);
  ASSERT_TRUE(fs::exists(dir + "/model.ckpt-2"));
  write(dir + "/generation", "3\n");  // generation 3 started; generation 2 comes back
  c.max_steps = 4;
  try {
    Trainer t(c);
    FAIL() << "generation 2 started after generation 3";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--generation 2 is over"), std::string::npos) << e.what();
  }
  // Generation 2's process, built before generation 3 started, is stopped at its next save. (A guard is the
  // process's: one trainer at a time here, as in a process of a real run.)
  write(dir + "/generation", "2\n");
  {
    Trainer two(c);
    write(dir + "/generation", "3\n");
    EXPECT_THROW(two.run(), Error);
  }
  EXPECT_FALSE(fs::exists(dir + "/model.ckpt-3"));
  EXPECT_EQ(latest_checkpoint(dir).value_or(""), checkpoint_path(dir, 2));
  c.generation = 3;  // generation 3 trains on
  EXPECT_EQ(Trainer(c).run().steps_done, 4);
}

TEST_F(Fence, AStopFileEndsTheRunWithACheckpoint) {
  const std::string dir = path("stop");
  TrainConfig c = lenet_run(dir);
  c.max_steps = 1000;
  c.save_iter = 1000;
  c.stop_file = path("stop-now");
  write(path("stop-now"), "");
  const TrainResult r = Trainer(c).run();
  EXPECT_TRUE(r.interrupted);
  EXPECT_EQ(r.steps_done, 0);
  EXPECT_TRUE(fs::exists(dir + "/model.ckpt-0"));
}

// --save_secs: a checkpoint after the first step that ends that long after the last one; by steps otherwise.
TEST_F(Fence, SaveSecsCheckpointsByTheClock) {
  TrainConfig c = lenet_run(path("secs"));
  c.max_steps = 3;
  c.save_iter = 1000;
  c.save_secs = 1e-9;  // always due: every step's end
  EXPECT_EQ(Trainer(c).run().steps_done, 3);
  for (int step = 1; step <= 3; ++step) EXPECT_TRUE(fs::exists(checkpoint_path(c.train_dir, step))) << step;
  TrainConfig d = lenet_run(path("steps"));
  d.max_steps = 3;
  d.save_iter = 1000;
  d.save_secs = 1e6;  // never due: the final checkpoint only
  EXPECT_EQ(Trainer(d).run().steps_done, 3);
  EXPECT_FALSE(fs::exists(checkpoint_path(d.train_dir, 1)));
  EXPECT_FALSE(fs::exists(checkpoint_path(d.train_dir, 2)));
  EXPECT_TRUE(fs::exists(checkpoint_path(d.train_dir, 3)));
}

}  // namespace
}  // namespace tg

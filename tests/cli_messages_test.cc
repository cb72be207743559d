// What a person sees of the programs, run as built (terngrad-train, -eval, -export, -data): each class of message
// is checked for its exact line, its exit status (2: usage, 1: anything else) and that nothing was created or
// damaged; and the runs' own lines: the end-of-run summary at every log level but off, the flags file a run is
// repeated from, a resume that keeps the checkpoint's settings or refuses other ones, the one-worker notice, the
// resume hint after a stop, what --threads 0 means under OMP_NUM_THREADS and an affinity mask, no colour codes in
// a file, --version and a plain --help.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/fashion_mnist_shards.h"
#include "common/files.h"
#include "terngrad/data/image_codec.h"
#include "terngrad/train/checkpoint.h"

namespace tg {
namespace {

namespace fs = std::filesystem;

std::string bin(const std::string& program) { return std::string(TG_BINARY_DIR) + "/" + program; }

struct Result {
  int status;
  std::string output;
};
Result run(const std::string& command) {
  Result r;
  r.status = testing::run_command(command, &r.output);
  return r;
}

// The lines of `text` that contain `part`.
std::vector<std::string> lines_with(const std::string& text, const std::string& part) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = text.find('\n', at);
    const std::string line = text.substr(at, end == std::string::npos ? std::string::npos : end - at);
    if (line.find(part) != std::string::npos) out.push_back(line);
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return out;
}

// Every file under `dir` with its size and modification time: "nothing damaged" is this map unchanged.
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> m;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file())
      m[e.path().string()] =
          std::to_string(e.file_size()) + "@" + std::to_string(e.last_write_time().time_since_epoch().count());
  return m;
}

class CliMessages : public ::testing::Test {
 protected:
  void SetUp() override { root_ = testing::temp_dir("cli"); }
  void TearDown() override { fs::remove_all(root_); }
  std::string dir(const std::string& name) const { return (root_ / name).string(); }
  // A short LeNet run on synthetic input.
  std::string train(const std::string& train_dir, const std::string& extra) const {
    return bin("terngrad-train") + " --benchmark_mode --batch_size 8 --threads 1 --log_every 2 --train_dir " +
           train_dir + " " + extra;
  }
  fs::path root_;
};

// ---- usage errors: one line, exit 2 -----------------------------------------------------------------------------
TEST_F(CliMessages, UnknownFlagsGetTheNearestNameOrOurNameOfTheReferencesFlag) {
  Result r = run(bin("terngrad-train") + " --max_step 5");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.output, "terngrad-train: error: unknown flag --max_step (did you mean --max_steps?) (see --help)\n");
  r = run(bin("terngrad-train") + " --learning_rate 0.1");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.output,
            "terngrad-train: error: unknown flag --learning_rate (use --initial_learning_rate) (see --help)\n");
  r = run(bin("terngrad-train") + " --use_encoding");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.output,
            "terngrad-train: error: unknown flag --use_encoding (the ternary codes are always sent 2-bit packed: "
            "nothing to turn on) (see --help)\n");
  r = run(bin("terngrad-eval") + " --run_onse");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.output, "terngrad-eval: error: unknown flag --run_onse (did you mean --run_once?) (see --help)\n");
  r = run(bin("terngrad-train") + " --zzzzzz 1");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.output, "terngrad-train: error: unknown flag --zzzzzz (see --help)\n");
}

TEST_F(CliMessages, ConfigFileErrorsNameTheFileTheLineAndTheKey) {
  const std::string cfg = dir("run.ini");
  testing::dump(cfg, "# a comment\nmax_steps = 3\nlearning_rate = 0.1\n");
  Result r = run(bin("terngrad-train") + " --config " + cfg + " --train_dir " + dir("t"));
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.output, "terngrad-train: error: --config " + cfg +
                          " line 3: unknown key 'learning_rate' (use --initial_learning_rate) (see --help)\n");
  testing::dump(cfg, "[train]\nmax_steps = 3\n");
  r = run(bin("terngrad-train") + " --config " + cfg + " --train_dir " + dir("t"));
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.output, "terngrad-train: error: --config " + cfg +
                          " line 1: section [train]: the keys are the flags' names at the top of the file, without "
                          "a section (see --help)\n");
  EXPECT_FALSE(fs::exists(dir("t")));
}

TEST_F(CliMessages, UnknownCommandsListTheKnownOnes) {
  const Result r = run(bin("terngrad-data") + " inspcet");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.output,
            "terngrad-data: error: unknown command 'inspcet' (did you mean inspect?); the commands: convert-idx, "
            "convert-cifar10, build-image-data, inspect (see --help)\n");
}

TEST_F(CliMessages, OutOfRangeNumbersAreUsageErrors) {
  Result r = run(train(dir("t"), "--max_steps -5"));
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.output, "terngrad-train: error: --max_steps -5 must be at least 1\n");
  r = run(bin("terngrad-export") + " --opset 12 --output " + dir("m.onnx") + " --checkpoint_dir " + dir("t"));
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.output, "terngrad-export: error: --opset 12 is not in [13, 26]\n");
  r = run(train(dir("t"), "--log_level verbose"));
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.output,
            "terngrad-train: error: --log_level 'verbose' is not one of trace, debug, info, warn, error, off\n");
  EXPECT_FALSE(fs::exists(dir("t")));
  EXPECT_FALSE(fs::exists(dir("m.onnx")));
}

// ---- runtime errors: one line, exit 1, no internal check text, nothing created ---------------------------------
TEST_F(CliMessages, AFailedStartCreatesNothing) {
  Result r = run(bin("terngrad-train") + " --data_dir " + dir("no_such_data") + " --train_dir " + dir("t"));
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.output, "terngrad-train: error: --data_dir '" + dir("no_such_data") + "' is not a directory\n");
  EXPECT_FALSE(fs::exists(dir("t"))) << "no train_dir, no events file before the data is checked";
  // A network that needs larger images than the dataset's: the same rule and line for every such network.
  for (const std::string net : {"alexnet", "inception_v3"}) {
    r = run(train(dir("t"), "--net " + net + " --dataset fashion_mnist --max_steps 1"));
    EXPECT_EQ(r.status, 1) << net;
    EXPECT_EQ(lines_with(r.output, "error:").size(), 1u) << r.output;
    EXPECT_NE(r.output.find("terngrad-train: error: --net " + net + " needs images of at least"), std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("pass --image_size"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("check `"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(dir("t"))) << net;
  }
}

// ---- memory: the plan printed, its flags' bad values refused -----------------------------------------------------
TEST_F(CliMessages, ThePlanIsPrintedForAnyDeviceAndBadMemoryFlagsGetOneLine) {
  const std::string t = dir("t");
  Result r =
      run(bin("terngrad-train") + " --plan_memory --net resnet50 --dataset imagenet --batch_size 32 --train_dir " + t);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output.rfind("memory plan of one CPU replica: --net resnet50 --image_size 224 --batch_size 32", 0), 0u)
      << r.output;
  for (const char* area : {"parameters", "optimizer state", "moving averages", "parameter gradients", "activations",
                           "input batches", "total"})
    EXPECT_EQ(lines_with(r.output, std::string("  ") + area + " ").size(), 1u) << area << "\n" << r.output;
  r = run(bin("terngrad-train") +
          " --plan_memory --device cuda --precision fp16 --net resnet50 --dataset imagenet --batch_size 256 "
          "--fit_memory 80GiB --train_dir " +
          t);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output.rfind("memory plan of one GPU:", 0), 0u) << r.output;
  EXPECT_EQ(lines_with(r.output, "--fit_memory 80GiB: the largest --batch_size that fits is ").size(), 1u) << r.output;
  EXPECT_FALSE(fs::exists(t)) << "a plan writes nothing";

  r = run(bin("terngrad-train") + " --fit_memory '80 gigs' --train_dir " + t);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(
      r.output.rfind("terngrad-train: error: --fit_memory '80 gigs' has an unknown unit 'gigs': a number of bytes "
                     "with an optional unit: 80GiB, 80 GB, 8e10",
                     0),
      0u)
      << r.output;
  EXPECT_EQ(lines_with(r.output, "error:").size(), 1u) << r.output;
  r = run(train(t, "--recompute everything --max_steps 1"));
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.output, "terngrad-train: error: --recompute 'everything' is not one of none, bn_relu, blocks\n");
  r = run(bin("terngrad-train") + " --plan_memory --net resnet5 --train_dir " + t);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("--net 'resnet5'"), std::string::npos) << r.output;
  r = run(train(t, "--memory_plan none --recompute bn_relu --max_steps 1"));
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.output,
            "terngrad-train: error: --recompute bn_relu needs --memory_plan liveness (with none every tensor "
            "keeps its own buffer)\n");
  EXPECT_FALSE(fs::exists(t));
}

// ---- resuming: the checkpoint's settings, never a silent switch -------------------------------------------------
TEST_F(CliMessages, AResumeKeepsTheCheckpointsSettingsAndRefusesOthers) {
  const std::string t = dir("t");
  ASSERT_EQ(run(train(t, "--grad_bits 1 --clip_factor 2.5 --max_steps 2")).status, 0);
  const auto before = snapshot(t);
  // Given otherwise: refused, naming the checkpoint's value; nothing in the train_dir touched.
  Result r = run(train(t, "--grad_bits 32 --max_steps 4"));
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.output, "terngrad-train: error: --grad_bits 32 differs from the checkpoint's 1 in --train_dir " + t +
                          ": a resumed run goes on with the settings it was written with; leave --grad_bits out (the "
                          "run continues with 1) or train in another --train_dir\n");
  r = run(bin("terngrad-train") + " --benchmark_mode --threads 1 --train_dir " + t + " --batch_size 16 --max_steps 4");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("--batch_size 16 differs from the checkpoint's 8"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("check `"), std::string::npos) << r.output;
  EXPECT_EQ(snapshot(t), before);
  // Not given: taken from the checkpoint, said in one line.
  r = run(bin("terngrad-train") + " --benchmark_mode --threads 1 --train_dir " + t + " --max_steps 4");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(lines_with(r.output,
                       "with the checkpoint's flags (not given on this command line): --batch_size 8 "
                       "--grad_bits 1 --clip_factor 2.5")
                .size(),
            1u)
      << r.output;
  EXPECT_EQ(lines_with(r.output, "exchange terngrad").size(), 1u) << r.output;
  const auto latest = latest_checkpoint(t);
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(CheckpointReader(*latest).meta().flags.at("grad_bits"), "1");
}

// ---- the run's lines --------------------------------------------------------------------------------------------
TEST_F(CliMessages, ARunSaysHowItEndedAtEveryLevelAndCanBeRepeatedFromItsFlagsFile) {
  const std::string t = dir("t");
  Result r = run(train(t, "--max_steps 3 --log_level warn"));
  EXPECT_EQ(r.status, 0);
  const auto done = lines_with(r.output, "done: 3 steps in ");
  ASSERT_EQ(done.size(), 1u) << r.output;
  EXPECT_NE(done[0].find("exchanged 0.0 B vs 0.0 B in fp32"), std::string::npos) << done[0];
  EXPECT_EQ(lines_with(r.output, "step 2,").size(), 0u) << "info lines stay out at warn";
  EXPECT_EQ(r.output.find('\033'), std::string::npos) << "no colour codes in a file";
  r = run(train(dir("quiet"), "--max_steps 1 --log_level off"));
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.output, "");
  // flags.ini: every flag, and --config accepts it.
  const std::string flags = testing::slurp(fs::path(t) / "flags.ini");
  EXPECT_NE(flags.find("\nmax_steps = 3\n"), std::string::npos) << flags;
  EXPECT_NE(flags.find("\nbenchmark_mode = true\n"), std::string::npos) << flags;
  r = run(bin("terngrad-train") + " --config " + (fs::path(t) / "flags.ini").string() + " --max_steps 4");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(lines_with(r.output, "done: 4 steps (resumed at 3)").size(), 1u) << r.output;
  // The start: the flags other than the defaults, where all are, what the step lines' tail means.
  EXPECT_EQ(lines_with(r.output, "flags other than the defaults: --train_dir " + t).size(), 1u) << r.output;
  EXPECT_EQ(lines_with(r.output, "step lines end with the window's mean ms per step: in = waiting for input").size(),
            1u)
      << r.output;
}

TEST_F(CliMessages, TernGradOnOneWorkerSaysItExchangesNothing) {
  const Result r = run(train(dir("t"), "--grad_bits 1 --max_steps 1"));
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(lines_with(r.output, "one worker: there is nothing to exchange, so --grad_bits 1 saves nothing").size(), 1u)
      << r.output;
  const Result two = run(train(dir("t2"), "--grad_bits 1 --max_steps 1 --num_nodes 2"));
  EXPECT_EQ(lines_with(two.output, "one worker").size(), 0u) << two.output;
}

TEST_F(CliMessages, AStoppedRunSaysTheSameCommandResumesIt) {
  const std::string t = dir("t");
  const Result r = run("timeout --preserve-status -s INT 4 " + train(t, "--max_steps 1000000"));
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(lines_with(r.output, "on request; checkpoint saved in " + t + ": the same command resumes from it").size(),
            1u)
      << r.output;
}

TEST_F(CliMessages, ThreadsZeroHonoursOmpNumThreadsAndTheAffinityMask) {
  Result r = run("OMP_NUM_THREADS=1 " + bin("terngrad-train") +
                 " --benchmark_mode --max_steps 1 --threads 0 --train_dir " + dir("a"));
  EXPECT_EQ(lines_with(r.output, ", 1 threads)").size(), 1u) << r.output;
  if (testing::run_command("command -v taskset") != 0) GTEST_SKIP() << "taskset not found";
  r = run("taskset -c 0 " + bin("terngrad-train") + " --benchmark_mode --max_steps 1 --threads 0 --train_dir " +
          dir("b"));
  EXPECT_EQ(lines_with(r.output, ", 1 threads)").size(), 1u) << r.output;
}

TEST_F(CliMessages, EvalSaysWhatItWaitsForAndWhereItWroteItsDumps) {
  const Result r = run("timeout -s INT 2 " + bin("terngrad-eval") + " --checkpoint_dir " + dir("empty") +
                       " --data_dir " + dir("empty") + " --eval_interval_secs 30");
  EXPECT_EQ(lines_with(r.output, "waiting for a checkpoint in " + dir("empty")).size(), 1u) << r.output;
}

// A network run far above the input size it was designed for (CifarNet at 64 where it was made for 24) is a warning
// naming its parameter count; at its own size, none.
TEST_F(CliMessages, ANetworkFarFromItsDesignSizeIsAWarning) {
  Result r = run(train(dir("big"), "--net cifarnet --dataset cifar10 --image_size 64 --max_steps 1"));
  ASSERT_EQ(r.status, 0) << r.output;
  const auto warned = lines_with(r.output,
                                 "--net cifarnet at --image_size 64: it was designed for 24x24 inputs; at "
                                 "this size it has ");
  EXPECT_EQ(warned.size(), 1u) << r.output;
  r = run(train(dir("own"), "--net cifarnet --dataset cifar10 --max_steps 1"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(lines_with(r.output, "it was designed for").empty()) << r.output;
}

// A folder of one's own images as the README trains it: class sub-folders of JPEGs and PNGs of several sizes (and a
// notes file) converted with --input_dir, then trained on without --dataset or --num_classes (the folder's
// dataset.json sets them: custom, 4 classes with the background, the network's size) with curves, evaluated and
// exported (the README's plot of such a run: plot_runs_test.py);
// a --num_classes or --dataset that does not match the data is refused before the train_dir exists.
TEST_F(CliMessages, OwnImagesConvertAndTrainAsTheReadmeSays) {
  const fs::path photos = root_ / "photos";
  for (int k = 0; k < 3; ++k)
    for (int i = 0; i < 5; ++i) {
      Image img;
      img.height = 32 + 4 * i;
      img.width = 36;
      img.channels = 3;
      img.pixels.assign(img.size(), static_cast<uint8_t>(60 * k + 3 * i));
      const fs::path folder = photos / ("class" + std::to_string(k));
      fs::create_directories(folder);
      if (i % 2)
        testing::dump(folder / (std::to_string(i) + ".png"), encode_png(img));
      else
        testing::dump(folder / (std::to_string(i) + ".jpg"), encode_jpeg(img, 95));
    }
  testing::dump(photos / "class0" / "notes.txt", "where these were taken");
  Result r = run(bin("terngrad-data") + " build-image-data --input_dir " + photos.string() + " --output_dir " +
                 dir("data") + " --resize 32");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(
      lines_with(r.output, "skipped 1 file that is not JPEG or PNG: " + (photos / "class0" / "notes.txt").string())
          .size(),
      1u)
      << r.output;
  EXPECT_EQ(lines_with(r.output, "3 classes of 32x32 RGB images (train 12, validation 3)").size(), 1u) << r.output;
  EXPECT_EQ(testing::slurp(root_ / "data" / "labels.txt"), "class0\nclass1\nclass2\n");
  const std::string own = bin("terngrad-train") + " --data_dir " + dir("data") +
                          " --net cifarnet --batch_size 3 --max_steps 4 --threads 1 --num_readers 1 "
                          "--num_preprocess_threads 1 --shuffle_buffer 8 --train_dir ";
  r = run(own + dir("wrong") + " --num_classes 11");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("holds 3 classes (" + dir("data") +
                          "/dataset.json; labels 1..3, 0 the background class): train with --num_classes 4, not 11"),
            std::string::npos)
      << r.output;
  r = run(own + dir("wrong") + " --dataset fashion_mnist");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("--dataset fashion_mnist reads 1-channel images; leave --dataset out"), std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir("wrong")));
  r = run(own + dir("run") + " --eval_every 2");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(lines_with(r.output, "data: 3 classes of 32x32 RGB images (train 12, validation 3) (" + dir("data") +
                                     "/dataset.json): --dataset custom, --num_classes 4, --image_size 24")
                .size(),
            1u)
      << r.output;
  EXPECT_EQ(lines_with(r.output, "on the 3 examples of 'validation'").size(), 2u) << r.output;
  r = run(bin("terngrad-eval") + " --checkpoint_dir " + dir("run") + " --data_dir " + dir("data") + " --run_once");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(lines_with(r.output, "[3 examples]").size(), 1u) << r.output;
  r = run(bin("terngrad-export") + " --checkpoint_dir " + dir("run") + " --output " + dir("photos.onnx"));
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir("photos.onnx")));
}

// The README's exit-status table, one case of each row and program (128 + signal: StopSignalsTest in trainer_test.cc).
TEST_F(CliMessages, ExitCodes) {
  const std::string t = dir("t");
  EXPECT_EQ(run(train(t, "--max_steps 2")).status, 0);
  EXPECT_EQ(run(bin("terngrad-train") + " --help").status, 0);
  EXPECT_EQ(run(train(dir("u"), "--max_steps 2 --num_nodes 3")).status, 1);  // a batch of 8 on 3 workers
  EXPECT_EQ(run(bin("terngrad-train") + " --data_dir " + dir("no_such") + " --train_dir " + dir("v")).status, 1);
  EXPECT_EQ(run(bin("terngrad-train") + " --max_step 5").status, 2);
  EXPECT_EQ(run(train(dir("w"), "--device gpu")).status, 2);
  const Result no_data = run(bin("terngrad-train") + " --train_dir " + dir("x"));
  EXPECT_EQ(no_data.status, 2) << no_data.output;
  EXPECT_EQ(no_data.output,
            "terngrad-train: error: --data_dir is required (or --benchmark_mode for synthetic input)\n");
  EXPECT_EQ(run(bin("terngrad-eval") + " --checkpoint_dir " + t).status, 2);  // no --data_dir, as in train
  EXPECT_EQ(run(bin("terngrad-eval") + " --checkpoint_dir " + dir("empty") + " --data_dir " + t + " --run_once").status,
            1);
  EXPECT_EQ(run(bin("terngrad-data") + " convert-everything").status, 2);
  EXPECT_EQ(run(bin("terngrad-export") + " --checkpoint_dir " + dir("empty") + " --output " + dir("m.onnx")).status, 1);
  for (const char* never : {"u", "v", "w", "x"}) EXPECT_FALSE(fs::exists(dir(never))) << never;
}

// Columns a UTF-8 line takes (its code points: the help's few non-ASCII characters are one column each).
size_t count_code_points(const std::string& line) {
  size_t n = 0;
  for (unsigned char c : line) n += (c & 0xC0) != 0x80;
  return n;
}

TEST_F(CliMessages, EveryProgramHasVersionAndAPlainHelp) {
  for (const std::string p : {"terngrad-train", "terngrad-eval", "terngrad-export", "terngrad-data"}) {
    Result r = run(bin(p) + " --version");
    EXPECT_EQ(r.status, 0) << p;
    EXPECT_EQ(r.output.rfind(p + " 0.", 0), 0u) << r.output;
    EXPECT_NE(r.output.find("(commit "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("oneDNN "), std::string::npos) << r.output;
    r = run(bin(p) + " --help");
    EXPECT_EQ(r.status, 0) << p;
    EXPECT_EQ(r.output.find("**"), std::string::npos) << p;
    EXPECT_EQ(r.output.find('`'), std::string::npos) << p;
    std::istringstream lines(r.output);
    for (std::string line; std::getline(lines, line);)
      EXPECT_LE(count_code_points(line), 100u) << p << ": " << line;  // wrapped at 100 columns
  }
  // terngrad-train's flags in groups, the common ones first, then examples naming configs/ and what a run without a
  // config is.
  const std::string help = run(bin("terngrad-train") + " --help").output;
  size_t at = 0;
  for (const char* group : {"\nStart:\n", "\nModel and data:\n", "\nTraining:\n", "\nTernGrad and the exchange:\n",
                            "\nSeveral processes and machines:\n", "\nDevices, precision and memory:\n",
                            "\nOutput and checks:\n", "\nExamples (configs/"}) {
    const size_t next = help.find(group, at);
    EXPECT_NE(next, std::string::npos) << group << " missing or out of order\n" << help;
    at = next == std::string::npos ? at : next;
  }
  EXPECT_EQ(help.find("\nOther:\n"), std::string::npos) << "a flag of no group\n" << help;
  EXPECT_LT(help.find("  --net "), help.find("  --num_gpus ")) << "the network comes before the GPU flags";
  EXPECT_NE(help.find("Without --config a run trains LeNet on Fashion-MNIST with fp32 gradients"), std::string::npos);
}

// A resume with another --max_steps under a schedule that spans --max_steps: one line with the rate at the resumed
// step before and after and the flag that keeps the checkpoint's schedule; with it, no line and the old rates.
TEST_F(CliMessages, AResumeThatMovesTheScheduleSaysSoAndSchedulesStepsKeepsIt) {
  const std::string t = dir("t");
  const std::string poly = " --learning_rate_decay_type polynomial --initial_learning_rate 0.01";
  ASSERT_EQ(run(train(t, "--max_steps 4" + poly)).status, 0);
  Result r = run(train(t, "--max_steps 8"));
  ASSERT_EQ(r.status, 0) << r.output;
  const auto moved = lines_with(r.output, "the polynomial schedule now spans 8 steps");
  ASSERT_EQ(moved.size(), 1u) << r.output;
  // 0.01 * (1 - 4/8)^0.5 now, 0.01 * (1 - 4/4)^0.5 = 0 before.
  EXPECT_NE(
      moved[0].find("--max_steps 8 (the checkpoint's run: 4): the polynomial schedule now spans 8 steps: the "
                    "rate at step 4 is 0.00707107 (it was 0); --schedule_steps 4 keeps the checkpoint's schedule"),
      std::string::npos)
      << moved[0];
  r = run(train(t, "--max_steps 12 --schedule_steps 8"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(lines_with(r.output, "schedule now spans").empty()) << r.output;
  EXPECT_NE(r.output.find("lr = 0,"), std::string::npos) << "steps past --schedule_steps 8 have rate 0: " << r.output;
}

// ---- --eval_at_end on real Fashion-MNIST shards -------------------------------------------------------------------
class CliEvalAtEnd : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { data_ = testing::write_suite_shards("tg_cli", 256, 1, 200); }
  static void TearDownTestSuite() {
    if (!data_.empty()) fs::remove_all(data_);
  }
  static std::string data_;
};
std::string CliEvalAtEnd::data_;

TEST_F(CliEvalAtEnd, TheRunEndsWithTheTestAccuracy) {
  if (data_.empty()) GTEST_SKIP() << "Fashion-MNIST not installed (scripts/setup.sh installs it)";
  const fs::path root = testing::temp_dir("cli_eval");
  const Result r = run(bin("terngrad-train") + " --data_dir " + data_ + " --train_dir " + (root / "t").string() +
                       " --batch_size 32 --max_steps 4 --threads 1 --num_readers 1 --num_preprocess_threads 1 "
                       "--shuffle_buffer 64 --eval_at_end test");
  EXPECT_EQ(r.status, 0) << r.output;
  const auto test = lines_with(r.output, "test: precision@1 ");
  ASSERT_EQ(test.size(), 1u) << r.output;
  EXPECT_NE(test[0].find("on the 200 examples of 'test' (--eval_at_end; the moving averages of step 4)"),
            std::string::npos)
      << test[0];
  // Recorded beside the run's curves, as terngrad-eval --eval_dir records (what scripts/plot_runs.py draws).
  const std::string jsonl = testing::slurp(root / "t" / "eval.jsonl");
  EXPECT_EQ(std::count(jsonl.begin(), jsonl.end(), '\n'), 1) << jsonl;
  EXPECT_EQ(jsonl.rfind("{\"step\": 4, \"precision_at_1\": ", 0), 0u) << jsonl;
  fs::remove_all(root);
}

// --eval_every: a learning curve in the train_dir (eval.jsonl and the events), the training's bits unchanged (the
// same final digest as the run without it), and a subset that is not there refused before the train_dir exists.
TEST_F(CliEvalAtEnd, EvalEveryWritesTheCurveAndLeavesTheBits) {
  if (data_.empty()) GTEST_SKIP() << "Fashion-MNIST not installed (scripts/setup.sh installs it)";
  const fs::path root = testing::temp_dir("cli_eval_every");
  const std::string common = " --data_dir " + data_ +
                             " --batch_size 32 --max_steps 6 --threads 1 --num_readers 1 --num_preprocess_threads 1 "
                             "--shuffle_buffer 64 --log_every 2 --save_iter 1000";
  const Result plain = run(bin("terngrad-train") + common + " --train_dir " + (root / "plain").string());
  const Result curve = run(bin("terngrad-train") + common + " --eval_every 4 --train_dir " + (root / "curve").string());
  ASSERT_EQ(plain.status, 0) << plain.output;
  ASSERT_EQ(curve.status, 0) << curve.output;
  const auto done = [](const std::string& out) { return out.substr(out.rfind("parameter digest ") + 17, 8); };
  EXPECT_EQ(done(plain.output), done(curve.output)) << "the evaluations changed the training";
  // Step 4 and the last step, each once.
  const auto evals = lines_with(curve.output, ": test precision@1 ");
  ASSERT_EQ(evals.size(), 2u) << curve.output;
  EXPECT_NE(evals[0].find("step 4: test precision@1 "), std::string::npos) << evals[0];
  EXPECT_NE(evals[1].find("step 6: test precision@1 "), std::string::npos) << evals[1];
  EXPECT_NE(evals[0].find("on the 200 examples of 'test' (the moving averages; evaluated in "), std::string::npos);
  const std::string jsonl = testing::slurp(root / "curve" / "eval.jsonl");
  EXPECT_EQ(std::count(jsonl.begin(), jsonl.end(), '\n'), 2) << jsonl;
  EXPECT_EQ(jsonl.rfind("{\"step\": 4, \"precision_at_1\": ", 0), 0u) << jsonl;
  // A subset with no files: one line before anything is created.
  const Result missing = run(bin("terngrad-train") + common + " --eval_every 2 --eval_subset validation --train_dir " +
                             (root / "missing").string());
  EXPECT_EQ(missing.status, 1) << missing.output;
  EXPECT_NE(missing.output.find("--eval_every/--eval_secs validation: no files 'validation-*'"), std::string::npos)
      << missing.output;
  EXPECT_FALSE(fs::exists(root / "missing"));
  const Result synthetic = run(bin("terngrad-train") + " --benchmark_mode --max_steps 2 --eval_at_end test " +
                               "--train_dir " + (root / "synthetic").string());
  EXPECT_EQ(synthetic.status, 1) << synthetic.output;
  EXPECT_NE(synthetic.output.find("--eval_at_end evaluates on real data: not with --benchmark_mode"), std::string::npos)
      << synthetic.output;
  fs::remove_all(root);
}

}  // namespace
}  // namespace tg

// terngrad-train --pretrained_model_checkpoint_path and --fine_tune, run as built on synthetic input: a new run
// takes the checkpoint's weights, batch-norm statistics and moving averages and starts at step 0 with a fresh
// optimizer; --fine_tune starts the logits afresh (other classes allowed); a train_dir with a checkpoint resumes
// (given the same path) or is refused (another path); another network, other classes without --fine_tune, a
// tensor of another shape and a path that is no checkpoint are one line each, exit 1, and nothing written.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/files.h"
#include "terngrad/train/checkpoint.h"

namespace tg {
namespace {

namespace fs = std::filesystem;

std::vector<float> tensor_of(const std::string& checkpoint, const std::string& name) {
  CheckpointReader r(checkpoint);
  std::vector<float> v(static_cast<size_t>(r.shape(name).numel()));
  r.read(name, Tensor(v.data(), r.shape(name), DType::kF32, Device::cpu()));
  return v;
}

class Pretrained : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::temp_dir("pretrained");
    // The run to start from: 6 LeNet steps (batch-norm-free; its EMA is the moving average of the weights).
    ASSERT_EQ(train("a", "--max_steps 6"), 0) << out_;
    from_ = (root_ / "a" / "model.ckpt-6").string();
  }
  void TearDown() override { fs::remove_all(root_); }
  int train(const std::string& dir, const std::string& extra) {
    return testing::run_command(std::string(TG_BINARY_DIR) +
                                    "/terngrad-train --benchmark_mode --batch_size 8 --threads 1 --log_every 1 "
                                    "--train_dir " +
                                    (root_ / dir).string() + " " + extra,
                                &out_);
  }
  std::string ckpt(const std::string& dir, int step) const {
    return (root_ / dir / ("model.ckpt-" + std::to_string(step))).string();
  }
  fs::path root_;
  std::string from_, out_;
};

// A learning rate of 1e-30 leaves every weight as it was (the update is below a float's resolution): the new
// run's weights after its one step are the checkpoint's, bit for bit, and its step count starts at 0.
TEST_F(Pretrained, ANewRunStartsAtStepZeroFromTheCheckpointsWeights) {
  ASSERT_EQ(
      train("b", "--max_steps 1 --initial_learning_rate 1e-30 --weight_decay 0 --pretrained_model_checkpoint_path " +
                     (root_ / "a").string()),
      0)
      << out_;
  EXPECT_NE(out_.find("started from " + from_ + " (lenet on fashion_mnist, step 6"), std::string::npos) << out_;
  EXPECT_NE(out_.find("initialised afresh (--fine_tune): none; ignored: none"), std::string::npos) << out_;
  EXPECT_TRUE(fs::exists(ckpt("b", 1))) << "step 0 + 1, not the checkpoint's 6 + 1";
  for (const char* name : {"params/conv1/weights", "params/fc3/weights", "params/logits/biases"})
    EXPECT_EQ(tensor_of(ckpt("b", 1), name), tensor_of(from_, name)) << name;
  // With a real learning rate the run trains on from there: the weights move.
  ASSERT_EQ(train("c", "--max_steps 1 --pretrained_model_checkpoint_path " + from_), 0) << out_;
  EXPECT_NE(tensor_of(ckpt("c", 1), "params/fc3/weights"), tensor_of(from_, "params/fc3/weights"));
}

TEST_F(Pretrained, FineTuneStartsTheLogitsAfreshForOtherClasses) {
  ASSERT_EQ(train("f",
                  "--max_steps 1 --initial_learning_rate 1e-30 --weight_decay 0 --num_classes 5 --fine_tune "
                  "--pretrained_model_checkpoint_path " +
                      from_),
            0)
      << out_;
  EXPECT_NE(out_.find("initialised afresh (--fine_tune): params/logits/weights, params/logits/biases, "
                      "ema/logits/weights/ExponentialMovingAverage, ema/logits/biases/ExponentialMovingAverage"),
            std::string::npos)
      << out_;
  EXPECT_EQ(tensor_of(ckpt("f", 1), "params/conv2/weights"), tensor_of(from_, "params/conv2/weights"));
  EXPECT_EQ(CheckpointReader(ckpt("f", 1)).shape("params/logits/weights"), (Shape{500, 5}));
  // The same command resumes the fine-tuning run; another starting point is refused, the train_dir untouched.
  ASSERT_EQ(train("f", "--max_steps 2 --num_classes 5 --fine_tune --pretrained_model_checkpoint_path " + from_), 0)
      << out_;
  EXPECT_NE(out_.find("resumed from " + ckpt("f", 1) + " at step 1"), std::string::npos) << out_;
  EXPECT_EQ(train("f", "--max_steps 3 --num_classes 5 --fine_tune --pretrained_model_checkpoint_path " +
                           (root_ / "a").string()),
            1);
  EXPECT_NE(out_.find("terngrad-train: error: --train_dir " + (root_ / "f").string() +
                      " already holds a checkpoint (step 2) of a run started from " + from_),
            std::string::npos)
      << out_;
  EXPECT_FALSE(fs::exists(ckpt("f", 3)));
}

TEST_F(Pretrained, BadStartsAreOneLineAndWriteNothing) {
  struct Case {
    std::string flags, line;
  };
  const std::vector<Case> cases = {
      {"--net cifarnet --pretrained_model_checkpoint_path " + from_,
       "terngrad-train: error: --pretrained_model_checkpoint_path " + from_ +
           " holds --net lenet, this run is --net "
           "cifarnet\n"},
      {"--num_classes 5 --pretrained_model_checkpoint_path " + from_,
       "terngrad-train: error: --pretrained_model_checkpoint_path " + from_ +
           " has 10 classes, this run 5: --fine_tune starts the logits layer afresh for the new classes\n"},
      {"--image_size 32 --pretrained_model_checkpoint_path " + from_,
       "terngrad-train: error: " + from_ +
           ": tensor 'params/fc3/weights' is f32(2450, 500), the model expects f32(3200, 500)\n"},
      {"--pretrained_model_checkpoint_path " + (root_ / "nothing").string(),
       "terngrad-train: error: --pretrained_model_checkpoint_path " + (root_ / "nothing").string() +
           " is neither a checkpoint nor a folder\n"},
      {"--fine_tune",
       "terngrad-train: error: --fine_tune restores every weight of a checkpoint but the logits: it "
       "needs --pretrained_model_checkpoint_path\n"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(train("bad", "--max_steps 1 " + c.flags), 1) << c.flags << "\n" << out_;
    EXPECT_EQ(out_.rfind(c.line, 0), 0u) << c.flags << "\n" << out_;
    EXPECT_FALSE(fs::exists(root_ / "bad")) << c.flags;
  }
}

}  // namespace
}  // namespace tg

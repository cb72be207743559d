// The trainer's step allocates and first-touches nothing of its own in steady state: the heap allocations
// of a whole tg::Trainer step (synthetic input, forward/backward of every worker, the gradient exchange,
// optimizer + EMA) equal those of the plain forward/backward/update of its workers' nets (oneDNN 2.6's
// execute path allocates a few small objects per primitive call; nothing else may), and no page is touched
// for the first time (no minor page faults). Counted by the malloc interposer of tests/alloc_counter.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "alloc_counter/alloc_counter.h"
#include "common/bound_net.h"
#include "terngrad/backend/backend.h"
#include "terngrad/models/registry.h"
#include "terngrad/nn/net.h"
#include "terngrad/optim/optimizer.h"
#include "terngrad/train/trainer.h"

namespace tg {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kWorkerBatch = 16;
constexpr int kSteps = 4;

// Allocations per step of a plain LeNet forward/backward/momentum update at the worker batch.
int64_t net_step_allocations() {
  auto be = make_backend("cpu", {1});
  ModelConfig mc;
  mc.image_size = 28;
  mc.channels = 1;
  mc.num_classes = 10;
  testing::BoundNet m(*be, "lenet", mc, kWorkerBatch);
  Net& net = m.net;
  ParameterStore& store = m.store;
  Optimizer opt(testing::momentum_sgd(), store.params(), *be);
  std::vector<float> images(kWorkerBatch * 28 * 28, 0.5f);
  std::vector<int32_t> labels(kWorkerBatch, 3);
  Tensor x(images.data(), Shape{kWorkerBatch, 28, 28, 1}, DType::kF32, Device::cpu());
  Tensor y(labels.data(), Shape{kWorkerBatch}, DType::kI32, Device::cpu());
  auto step = [&](int64_t t) {
    net.forward(x, y, true, static_cast<uint32_t>(t));
    net.backward();
    opt.apply(*be, store.params(), net.grads(), t, 1e-3f);
  };
  for (int t = 0; t < 2; ++t) step(t);
  const int64_t before = alloc_counter::count();
  alloc_counter::start();
  for (int t = 2; t < 2 + kSteps; ++t) step(t);
  alloc_counter::stop();
  return (alloc_counter::count() - before) / kSteps;
}

void check_trainer_step(int workers, int grad_bits) {
  const std::string dir = (fs::temp_directory_path() / ("tg_trainer_step_" + std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  TrainConfig cfg;
  cfg.train_dir = dir;
  cfg.benchmark_mode = true;
  cfg.net = "lenet";
  cfg.threads = 1;
  cfg.num_nodes = workers;
  cfg.batch_size = kWorkerBatch * workers;
  cfg.grad_bits = grad_bits;
  cfg.clip_factor = 2.5f;
  cfg.max_steps = 1000;
  const int64_t per_net = net_step_allocations();
  {
    Trainer trainer(cfg);
    trainer.run_steps(3);  // warm: primitives created, every buffer touched
    // Three windows of kSteps: a step that first-touches memory faults in every window; the kernel's own
    // reclaim of cold pages (a machine under memory pressure, DAMON) can fault a few back in one of them.
    long fewest_faults = -1;
    for (int window = 0; window < 3 && fewest_faults != 0; ++window) {
      const int64_t before = alloc_counter::count();
      const long faults = alloc_counter::minor_page_faults();
      alloc_counter::start();
      trainer.run_steps(kSteps);
      alloc_counter::stop();
      const long new_faults = alloc_counter::minor_page_faults() - faults;
      const int64_t per_step = (alloc_counter::count() - before) / kSteps;
      EXPECT_EQ(per_step, workers * per_net) << workers << " workers, grad_bits " << grad_bits
                                             << ": the trainer's step allocates beyond its nets' oneDNN calls";
      fewest_faults = fewest_faults < 0 ? new_faults : std::min(fewest_faults, new_faults);
    }
    EXPECT_EQ(fewest_faults, 0) << workers << " workers, grad_bits " << grad_bits
                                << ": memory first touched in every window of steps";
  }
  fs::remove_all(dir);
}

TEST(TrainerStep, TernGradTwoWorkersAllocatesAndFaultsNothing) { check_trainer_step(2, 1); }
TEST(TrainerStep, Fp32OneWorkerAllocatesAndFaultsNothing) { check_trainer_step(1, 32); }
TEST(TrainerStep, Fp16ThreeWorkersAllocatesAndFaultsNothing) { check_trainer_step(3, 16); }

TEST(AllocCounter, CountsWhatItShould) {  // the counter itself works: the checks above cannot pass vacuously
  const int64_t before = alloc_counter::count();
  alloc_counter::start();
  void* volatile p = std::malloc(64);
  std::free(p);
  alloc_counter::stop();
  EXPECT_EQ(alloc_counter::count() - before, 1);
}

}  // namespace
}  // namespace tg

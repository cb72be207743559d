// What a steady training step allocates, exactly: nothing of ours. Every heap allocation of a whole tg::Trainer
// step (synthetic input, forward/backward of every worker, the gradient exchange, optimizer + EMA) is made by
// oneDNN 2.6's own code (its dnnl_primitive_execute builds a small argument map per call, ~5 objects, and a few
// primitives allocate inside their kernels; scratchpads are ours, user mode, sized at setup), and there are as
// many as the plain forward/backward/update of its workers' nets make; none is made by any other code, and no
// page is touched for the first time (no minor page faults). Counted, and attributed by the allocating caller,
// by the malloc interposer of tests/alloc_counter.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <vector>

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

struct PerStep {
  int64_t all = 0, in_onednn = 0;  // allocations per step; of them, oneDNN's own
};

// Allocations per step of a plain LeNet forward/backward/momentum update at the worker batch.
PerStep net_step_allocations() {
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
  const int64_t before = alloc_counter::count(), before_onednn = alloc_counter::count_in_onednn();
  alloc_counter::start(true);
  for (int t = 2; t < 2 + kSteps; ++t) step(t);
  alloc_counter::stop();
  return {(alloc_counter::count() - before) / kSteps, (alloc_counter::count_in_onednn() - before_onednn) / kSteps};
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
  const PerStep per_net = net_step_allocations();
  EXPECT_EQ(per_net.all, per_net.in_onednn) << "a plain net step allocates outside oneDNN";
  {
    Trainer trainer(cfg);
    trainer.run_steps(3);  // warm: primitives created, every buffer touched
    // Three windows of kSteps: a step that first-touches memory faults in every window; the kernel's own
    // reclaim of cold pages (a machine under memory pressure, DAMON) can fault a few back in one of them.
    long fewest_faults = -1;
    for (int window = 0; window < 3 && fewest_faults != 0; ++window) {
      const int64_t before = alloc_counter::count(), before_onednn = alloc_counter::count_in_onednn();
      const long faults = alloc_counter::minor_page_faults();
      alloc_counter::start(true);
      trainer.run_steps(kSteps);
      alloc_counter::stop();
      const long new_faults = alloc_counter::minor_page_faults() - faults;
      const int64_t all = alloc_counter::count() - before, onednn = alloc_counter::count_in_onednn() - before_onednn;
      EXPECT_EQ(all - onednn, 0) << workers << " workers, grad_bits " << grad_bits << ": " << all - onednn
                                 << " allocations in " << kSteps << " steps outside oneDNN";
      EXPECT_EQ(onednn / kSteps, workers * per_net.in_onednn)
          << workers << " workers, grad_bits " << grad_bits << ": oneDNN allocates more than its nets' calls do";
      fewest_faults = fewest_faults < 0 ? new_faults : std::min(fewest_faults, new_faults);
    }
    EXPECT_EQ(fewest_faults, 0) << workers << " workers, grad_bits " << grad_bits
                                << ": memory first touched in every window of steps";
  }
  fs::remove_all(dir);
}

TEST(TrainerStep, TernGradTwoWorkersAllocatesOnlyInsideOneDnnAndFaultsNothing) { check_trainer_step(2, 1); }
TEST(TrainerStep, Fp32OneWorkerAllocatesOnlyInsideOneDnnAndFaultsNothing) { check_trainer_step(1, 32); }
TEST(TrainerStep, Fp16ThreeWorkersAllocatesOnlyInsideOneDnnAndFaultsNothing) { check_trainer_step(3, 16); }

// The counter itself works, so the checks above cannot pass vacuously: it counts our malloc and does not
// attribute it to oneDNN; it attributes oneDNN's own allocations of a net step to oneDNN.
TEST(AllocCounter, CountsAndAttributesWhatItShould) {
  const int64_t before = alloc_counter::count(), before_onednn = alloc_counter::count_in_onednn();
  alloc_counter::start(true);
  void* volatile p = std::malloc(64);
  std::free(p);
  std::vector<int>* volatile v = new std::vector<int>(3);
  delete v;
  alloc_counter::stop();
  EXPECT_EQ(alloc_counter::count() - before, 3);
  EXPECT_EQ(alloc_counter::count_in_onednn() - before_onednn, 0);
  const PerStep net = net_step_allocations();
  EXPECT_GT(net.in_onednn, 0) << "oneDNN 2.6's execute allocates per call; none was attributed to it";
}

}  // namespace
}  // namespace tg

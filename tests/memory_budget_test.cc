// A training run's memory plan (memory_budget.h) against what the trainer then allocates, area by area in total,
// for several exchanges and layouts; the workers of a replica sharing one activation arena; a planned run and an
// unplanned one giving the same digest; --fit_memory's sizes; the largest batch that fits; and the run that does
// not fit stopping before anything is allocated or written, naming the bytes and the batch that would fit.
#include "terngrad/train/memory_budget.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "common/files.h"
#include "terngrad/backend/planning_backend.h"
#include "terngrad/train/trainer.h"

namespace tg {
namespace {

namespace fs = std::filesystem;

TrainConfig small_run(const std::string& dir, const std::string& net, int64_t batch) {
  TrainConfig c;
  c.train_dir = dir;
  c.benchmark_mode = true;
  c.net = net;
  c.dataset = net == "lenet" ? "mnist" : "cifar10";
  c.threads = 1;
  c.batch_size = batch;
  c.max_steps = 2;
  c.log_every = 1;
  c.save_iter = 1000;
  return c;
}

class MemoryBudget : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::temp_dir("memory_budget"); }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

// The plan's total is what the trainer's buffers on the device come to (the process's host batches excepted: the
// staging allocator's), within the exchange estimate's rounding.
TEST_F(MemoryBudget, ThePlanIsWhatTheTrainerAllocates) {
  struct Variant {
    const char* what;
    int replicas, workers, grad_bits;
    bool error_feedback;
    std::string exchange;
    double tolerance;  // relative: the exchange buffers of hierarchical and powersgd are estimates
  };
  const Variant variants[] = {Variant{"fp32, one replica of two workers", 1, 2, 32, false, "auto", 0.002},
                              Variant{"terngrad allgather2 over two replicas", 2, 2, 1, false, "auto", 0.002},
                              Variant{"terngrad allreduce8 with error feedback", 2, 4, 1, true, "allreduce8", 0.002},
                              Variant{"fp16 over two replicas", 2, 2, 16, false, "auto", 0.002},
                              Variant{"hierarchical, one node of two ranks", 2, 2, 1, false, "hierarchical", 0.02},
                              Variant{"powersgd over two replicas", 2, 2, 32, false, "powersgd", 0.02}};
  for (const Variant& v : variants) {
    TrainConfig c = small_run(dir("t" + std::to_string(&v - variants)), "cifarnet", 8 * v.workers);
    c.cpu_replicas = v.replicas;
    c.num_nodes = v.workers;
    c.grad_bits = v.grad_bits;
    c.error_feedback = v.error_feedback;
    c.exchange = v.exchange;
    if (v.grad_bits == 1) c.clip_factor = 2.5f;
    Trainer trainer(c);
    const DeviceMemoryPlan& plan = trainer.memory_plan();
    const size_t rows = 8 * static_cast<size_t>(v.workers / v.replicas);
    const size_t host_batches = 2 * rows * (24 * 24 * 3 * sizeof(float) + sizeof(int32_t));  // staging memory
    const double planned = double(plan.total() - host_batches) * v.replicas;
    const double held = double(trainer.device_bytes_in_use());
    EXPECT_NEAR(held, planned, v.tolerance * planned + 64 * 1024) << v.what << ": " << plan.describe();
    EXPECT_GT(plan.area("activations"), 0u) << v.what;
    EXPECT_EQ(plan.workers, v.workers / v.replicas) << v.what;
  }
}

// A replica's workers share one arena: four workers hold one activation area, not four.
TEST_F(MemoryBudget, AReplicasWorkersShareOneActivationArena) {
  TrainConfig one = small_run(dir("one"), "cifarnet", 16), four = small_run(dir("four"), "cifarnet", 64);
  one.num_nodes = 1;
  four.num_nodes = 4;
  Trainer a(one), b(four);
  EXPECT_EQ(a.memory_plan().area("activations"), b.memory_plan().area("activations"));
  EXPECT_EQ(4 * a.memory_plan().area("parameter gradients"), b.memory_plan().area("parameter gradients"));
}

// Whole trainings with and without a plan (and with each recomputation) end on the same parameter digest.
TEST_F(MemoryBudget, PlannedAndUnplannedTrainingsGiveTheSameDigest) {
  std::string digest;
  for (const auto& [plan, recompute] : {std::pair<const char*, const char*>{"none", "none"},
                                        {"liveness", "none"},
                                        {"liveness", "bn_relu"},
                                        {"liveness", "blocks"}}) {
    TrainConfig c = small_run(dir(std::string(plan) + recompute), "cifarnet", 16);
    c.num_nodes = 2;
    c.grad_bits = 1;
    c.clip_factor = 2.5f;
    c.max_steps = 3;
    c.memory_plan = plan;
    c.recompute = recompute;
    const TrainResult r = Trainer(c).run();
    if (digest.empty()) digest = r.parameter_digest;
    EXPECT_EQ(r.parameter_digest, digest) << plan << " " << recompute;
  }
}

TEST(MemorySize, TheDocumentedFormsParseAndOthersAreRefused) {
  EXPECT_EQ(parse_memory_size("80GiB", "--fit_memory"), size_t{80} << 30);
  EXPECT_EQ(parse_memory_size("80 GB", "--fit_memory"), size_t{80'000'000'000});
  EXPECT_EQ(parse_memory_size("8e10", "--fit_memory"), size_t{80'000'000'000});
  EXPECT_EQ(parse_memory_size("512mib", "--fit_memory"), size_t{512} << 20);
  EXPECT_EQ(parse_memory_size("1.5TiB", "--fit_memory"), size_t{3} << 39);
  EXPECT_EQ(parse_memory_size("4096", "--fit_memory"), size_t{4096});
  for (const char* bad : {"", "eighty", "80 gigs", "-5GB", "0", "1e40"}) {
    try {
      parse_memory_size(bad, "--fit_memory");
      ADD_FAILURE() << "'" << bad << "' accepted";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.rfind("--fit_memory '" + std::string(bad) + "'", 0), 0u) << m;
      EXPECT_NE(m.find("80GiB, 80 GB, 8e10"), std::string::npos) << m;
    }
  }
}

// The largest batch that fits a budget: its plan fits, the next one's does not; the plans grow with the batch.
TEST(MemoryBudgetPlan, TheLargestBatchThatFitsIsTheLastWhosePlanFits) {
  TrainConfig c = small_run("/nonexistent", "resnet50", 32);
  c.dataset = "imagenet";
  c.resolve_defaults();
  auto be = make_planning_backend("cuda:0");
  TrainingLayout l = TrainingLayout::of(c, 1);
  const size_t budget = size_t{4} << 30;
  const int64_t b = largest_fitting_worker_batch(c, *be, l, budget, 4096);
  ASSERT_GT(b, 1);
  l.worker_batch = b;
  EXPECT_LE(plan_device_memory(c, *be, l).total(), budget);
  l.worker_batch = b + 1;
  EXPECT_GT(plan_device_memory(c, *be, l).total(), budget);
  // fp16 halves the activations: a larger batch fits.
  c.precision = "fp16";
  EXPECT_GT(largest_fitting_worker_batch(c, *be, TrainingLayout::of(c, 1), budget, 4096), b);
  // The planning backend of a GPU plans and refuses to compute or allocate.
  EXPECT_THROW(be->allocator().allocate(16), Error);
}

// A run whose plan exceeds what the machine has stops before allocating or writing anything, with one line naming
// the bytes and the largest --batch_size that fits.
TEST_F(MemoryBudget, ARunThatCannotFitStopsBeforeAllocatingAndNamesTheBatchThatWould) {
  TrainConfig c = small_run(dir("huge"), "resnet50", 1 << 16);
  c.dataset = "imagenet";
  try {
    Trainer t(c);
    FAIL() << "a 65536-image ResNet-50 batch did not stop the run";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    EXPECT_EQ(m.rfind("--batch_size 65536 needs ", 0), 0u) << m;
    EXPECT_NE(m.find("is available"), std::string::npos) << m;
    EXPECT_NE(m.find("the largest that fits is --batch_size "), std::string::npos) << m;
    EXPECT_NE(m.find(", with --recompute blocks --batch_size "), std::string::npos) << m;
  }
  EXPECT_FALSE(fs::exists(dir("huge")));
}

}  // namespace
}  // namespace tg

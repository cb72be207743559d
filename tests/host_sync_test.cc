// Host synchronisations (Backend::host_syncs, include/terngrad/backend/backend.h), counted on the CPU backend at
// the points where a GPU would make the host wait: which operations count, that the transfers' waits count once
// and not when an earlier synchronisation covered them, that a Net step waits for nothing until its losses are
// read, and that a steady training step of the Trainer makes exactly one (fp32 and ternary gradients, one and two
// workers, one and two CPU replicas), and what the metrics report per log window.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "common/bound_net.h"
#include "terngrad/backend/backend.h"
#include "terngrad/core/buffer.h"
#include "terngrad/models/registry.h"
#include "terngrad/nn/net.h"
#include "terngrad/train/trainer.h"

namespace tg {
namespace {

namespace fs = std::filesystem;

// The backend's own memory (a "device" tensor) and host staging memory of n floats.
struct Mem {
  Buffer buf;
  Tensor t;
  Mem(Allocator& a, int64_t n, Device dev) : buf(a, n * sizeof(float)), t(buf.data(), Shape{n}, DType::kF32, dev) {}
};

TEST(HostSyncs, CountedWhereAGpuWouldWait) {
  auto be = make_backend("cpu", {1});
  Mem dev(be->allocator(), 8, be->device()), dev2(be->allocator(), 8, be->device());
  Mem staging(be->staging_allocator(), 8, Device::cpu()), out(be->allocator(), 1, be->device());
  std::vector<float> host(8, 1.f);
  const Tensor host_t(host.data(), Shape{8}, DType::kF32, Device::cpu());
  int64_t n = be->host_syncs();
  auto syncs = [&] {
    const int64_t now = be->host_syncs(), d = now - n;
    n = now;
    return d;
  };
  EXPECT_TRUE(be->is_host_memory(host_t) && be->is_host_memory(staging.t) && !be->is_host_memory(dev.t));
  be->copy(dev.t, host_t);  // host -> device: waits
  EXPECT_EQ(syncs(), 1);
  be->copy(dev2.t, dev.t);  // device -> device: enqueued
  EXPECT_EQ(syncs(), 0);
  be->copy(host_t, dev.t);  // device -> host: waits
  EXPECT_EQ(syncs(), 1);
  be->fill(dev.t, 2.f);
  be->scale(3.f, dev.t);
  const float one = 1.f;
  be->reduce_into(Reduction::kSumSquares, &dev.t, &one, 1, out.t);  // stays on the device
  EXPECT_EQ(syncs(), 0);
  EXPECT_EQ(be->sum(dev.t), 48.0);  // a result on the host
  EXPECT_EQ(syncs(), 1);
  be->synchronize();
  EXPECT_EQ(syncs(), 1);

  // Transfers: enqueued, then one wait; a wait an earlier synchronisation covered counts nothing.
  const uint64_t fence = be->record_fence();
  const uint64_t up = be->upload_async(dev2.t, staging.t, fence);
  const uint64_t down = be->download_async(staging.t, dev.t);
  EXPECT_LT(fence, up);
  EXPECT_LT(up, down);
  EXPECT_EQ(syncs(), 0);
  be->wait_transfer(down);
  EXPECT_EQ(syncs(), 1);
  EXPECT_EQ(static_cast<const float*>(staging.buf.data())[0], 6.f);
  be->wait_transfer(up);  // older than `down`: done already
  be->wait_transfer(down);
  EXPECT_EQ(syncs(), 0);
  const uint64_t later = be->download_async(staging.t, dev.t);
  be->synchronize();  // covers every ticket issued before it
  EXPECT_EQ(syncs(), 1);
  be->wait_transfer(later);
  EXPECT_EQ(syncs(), 0);
  EXPECT_THROW(be->wait_transfer(later + 100), Error);                   // never issued
  EXPECT_THROW(be->upload_async(dev.t, dev2.t), Error);                  // the source must be host (staging) memory
  EXPECT_THROW(be->download_async(dev2.t, dev.t), Error);                // the destination too
  EXPECT_THROW(be->upload_async(dev.t, staging.t, later + 100), Error);  // a fence that does not exist
}

TEST(HostSyncs, ReduceIntoAddsWeightedSumsInDouble) {
  auto be = make_backend("cpu", {1});
  Mem a(be->allocator(), 3, be->device()), b(be->allocator(), 2, be->device()), out(be->allocator(), 1, be->device());
  const float av[] = {1.f, -2.f, 3.f}, bv[] = {0.5f, 4.f};
  std::copy(av, av + 3, a.t.data<float>());
  std::copy(bv, bv + 2, b.t.data<float>());
  const Tensor xs[] = {a.t, b.t};
  const float w[] = {0.5f, 2.f};
  be->reduce_into(Reduction::kSum, xs, w, 2, out.t);
  EXPECT_EQ(*out.t.data<float>(), 0.5f * 2.f + 2.f * 4.5f);
  be->reduce_into(Reduction::kSumSquares, xs, w, 2, out.t);
  EXPECT_EQ(*out.t.data<float>(), 0.5f * 14.f + 2.f * 16.25f);
  be->reduce_into(Reduction::kSum, xs, w, 0, out.t);
  EXPECT_EQ(*out.t.data<float>(), 0.f);
  Tensor i32(a.t.raw(), Shape{3}, DType::kI32, be->device());
  EXPECT_THROW(be->reduce_into(Reduction::kSum, &i32, w, 1, out.t), Error);
}

// A Net step with its input on the device enqueues everything; reading its losses is the one wait.
TEST(HostSyncs, NetStepWaitsOnlyWhenItsLossesAreRead) {
  auto be = make_backend("cpu", {1});
  ModelConfig mc;
  mc.image_size = 28, mc.channels = 1, mc.num_classes = 10;
  testing::BoundNet m(*be, "lenet", mc, 4);
  Mem images(be->allocator(), 4 * 28 * 28, be->device());
  Buffer labels_buf(be->allocator(), 4 * sizeof(int32_t));
  be->fill(images.t, 0.25f);
  for (int i = 0; i < 4; ++i) static_cast<int32_t*>(labels_buf.data())[i] = i;
  const Tensor x(images.buf.data(), Shape{4, 28, 28, 1}, DType::kF32, be->device());
  const Tensor y(labels_buf.data(), Shape{4}, DType::kI32, be->device());
  m.net.run_forward(x, y, true, 1);  // warm: primitives created
  m.net.backward();
  const float first = m.net.losses().total();
  const int64_t before = be->host_syncs();
  m.net.run_forward(x, y, true, 2);
  m.net.backward();
  EXPECT_EQ(be->host_syncs() - before, 0) << "a forward and backward waited for the device";
  const Net::Losses l = m.net.losses();
  EXPECT_EQ(be->host_syncs() - before, 1);
  EXPECT_EQ(m.net.last_cross_entropy(), l.cross_entropy);  // read again: no second wait
  EXPECT_EQ(be->host_syncs() - before, 1);
  EXPECT_GT(l.cross_entropy, 0.f);
  EXPECT_GT(l.regularization, 0.f);  // LeNet's weight decay
  EXPECT_EQ(l.total(), first);       // the same batch, no update in between
  // forward() (run_forward + its loss) gives the same value.
  EXPECT_EQ(m.net.forward(x, y, true, 2), l.total());
}

std::string temp_dir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("tg_host_sync_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p.string();
}

TrainConfig lenet_config(const std::string& dir, int workers, int replicas, int grad_bits) {
  TrainConfig cfg;
  cfg.train_dir = dir;
  cfg.benchmark_mode = true;
  cfg.net = "lenet";
  cfg.threads = replicas;
  cfg.cpu_replicas = replicas;
  cfg.num_nodes = workers;
  cfg.batch_size = 8 * workers;
  cfg.grad_bits = grad_bits;
  cfg.clip_factor = 2.5f;
  cfg.max_steps = 1000;
  return cfg;
}

// A steady step (no log step, no checkpoint) makes exactly one: the wait for the input upload two steps back (a
// counter stuck at 0, or a second wait, fails).
TEST(HostSyncs, SteadyTrainerStepMakesExactlyOne) {
  struct Case {
    int workers, replicas, grad_bits;
  };
  for (const Case c : {Case{1, 1, 32}, Case{2, 1, 1}, Case{2, 2, 1}, Case{2, 2, 32}}) {
    SCOPED_TRACE(fmt::format("{} workers, {} replicas, grad_bits {}", c.workers, c.replicas, c.grad_bits));
    const std::string dir = temp_dir("steady");
    {
      Trainer trainer(lenet_config(dir, c.workers, c.replicas, c.grad_bits));
      trainer.run_steps(3);  // warm
      for (int s = 0; s < 6; ++s) {
        const int64_t before = trainer.host_syncs();
        trainer.run_steps(1);
        EXPECT_EQ(trainer.host_syncs() - before, 1) << "step " << s;
      }
    }
    fs::remove_all(dir);
  }
}

// The metrics' per-window count: the window's steps', at most one each (the log step's own reads, of the losses and
// for TensorBoard of the exchange's scalers and zero-code counts, are not a step's), and more than none (a steady
// step waits for the upload two steps back unless a log step's reads covered it).
TEST(HostSyncs, MetricsReportAtMostOnePerStep) {
  const std::string dir = temp_dir("metrics");
  TrainConfig cfg = lenet_config(dir, 2, 1, 1);
  cfg.max_steps = 16;
  cfg.log_every = 4;
  cfg.metrics_jsonl = dir + "/metrics.jsonl";
  {
    Trainer trainer(cfg);
    trainer.run();
  }
  std::ifstream in(cfg.metrics_jsonl);
  std::string line;
  std::vector<double> per_window;
  const std::regex field("\"host_syncs\": ?([0-9.eE+-]+)");
  while (std::getline(in, line)) {
    std::smatch m;
    if (line.find("\"step\"") != std::string::npos && std::regex_search(line, m, field))
      per_window.push_back(std::stod(m[1]));
  }
  ASSERT_EQ(per_window.size(), 4u) << "one line per log window";
  for (size_t w = 0; w < per_window.size(); ++w) {
    EXPECT_LE(per_window[w], 1.0) << "window " << w;
    if (w > 0) {
      EXPECT_GT(per_window[w], 0.0) << "window " << w;
    }
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tg

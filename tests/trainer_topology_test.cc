// terngrad-train across layouts of real processes (mpirun) and CPU replicas, on synthetic input:
//   - a 2 nodes x 2 ranks topology picks the hierarchical exchange and gives the same parameters whether the
//     ranks are 4 processes (--ranks_per_node 2) or 2 processes of 2 --cpu_replicas each, overlapped or not;
//   - --error_feedback writes per-rank state files beside each checkpoint and resumes bit for bit (one process
//     of two workers, and two processes);
//   - a checkpoint of another number of workers is refused without --allow_topology_change, resumed with it
//     (the data cursor re-derived, said in the log), its per-rank state refused unless --reset_rank_state where the
//     ranks' tensors differ, and kept by the scheme's policy where they match (--elastic_batch per_worker scaling
//     the batch and the learning rate);
//   - the quantization probe under the hierarchical exchange leaves the bits and counts the codes each rank drew;
//   - --exchange powersgd: its per-rank state (Q's, residuals) resumes bit for bit (one process of two workers
//     after an fp32 warm-up, and two processes); a resume with another exchange or rank is refused, naming the
//     flag, and writes nothing;
//   - a --ranks_per_node that does not divide the ranks: one line on every process, exit non-zero.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/files.h"
#include "terngrad/train/checkpoint.h"

namespace tg {
namespace {

namespace fs = std::filesystem;

class TrainerTopology : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("tg_topology_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  static bool have_mpirun() { return testing::run_command("command -v mpirun") == 0; }
  static std::string train_cmd() { return std::string(TG_BINARY_DIR) + "/terngrad-train"; }
  static std::string mpirun(int np) {
    return "timeout 300 mpirun --allow-run-as-root --oversubscribe -np " + std::to_string(np) + " ";
  }
  // A small LeNet run on synthetic input; `extra` adds flags.
  std::string common(const std::string& dir, const std::string& extra, int grad_bits = 1) const {
    return " --benchmark_mode --dataset fashion_mnist --net lenet --image_size 16 --batch_size 16 --grad_bits " +
           std::to_string(grad_bits) + " --clip_factor 2.5 --log_every 2 --threads 1 --seed 5 --train_dir " +
           (root_ / dir).string() + " " + extra + " 2>&1";
  }
  // Runs; returns the output, checking the exit code.
  std::string run(const std::string& cmd, int expected_rc = 0) const {
    std::string out;
    const int rc = testing::run_command(cmd, &out);
    EXPECT_EQ(rc, expected_rc) << cmd << "\n" << out;
    return out;
  }
  static std::vector<char> params(const std::string& ckpt) {
    CheckpointReader r(ckpt);
    std::vector<char> bytes;
    for (const std::string& n : r.names()) {
      if (n.rfind("params/", 0) != 0) continue;
      std::vector<float> v(static_cast<size_t>(r.shape(n).numel()));
      r.read(n, Tensor(v.data(), r.shape(n), DType::kF32, Device::cpu()));
      const char* p = reinterpret_cast<const char*>(v.data());
      bytes.insert(bytes.end(), p, p + v.size() * sizeof(float));
    }
    return bytes;
  }
  std::vector<char> final_params(const std::string& dir) const {
    const auto latest = latest_checkpoint((root_ / dir).string());
    EXPECT_TRUE(latest.has_value()) << dir;
    return latest ? params(*latest) : std::vector<char>();
  }
  fs::path root_;
};

TEST_F(TrainerTopology, TwoNodesOfTwoRanksAreHierarchicalWhateverTheProcessLayout) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not found";
  const std::string steps = "--max_steps 4 --save_iter 100 --num_nodes ";
  const std::string four = run(mpirun(4) + train_cmd() + common("p4", steps + "1 --ranks_per_node 2"));
  EXPECT_NE(four.find("2 nodes x 2 ranks"), std::string::npos) << four;
  EXPECT_NE(four.find("exchange hierarchical"), std::string::npos) << four;
  const std::string two =
      run(mpirun(2) + train_cmd() + common("p2r2", steps + "2 --cpu_replicas 2 --ranks_per_node 2"));
  EXPECT_NE(two.find("2 nodes x 2 ranks"), std::string::npos) << two;
  run(mpirun(2) + train_cmd() + common("serial", steps + "2 --cpu_replicas 2 --ranks_per_node 2 --overlap=false"));
  const auto a = final_params("p4");
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == final_params("p2r2")) << "4 processes x 1 replica and 2 processes x 2 replicas, same topology";
  EXPECT_TRUE(a == final_params("serial")) << "overlapped and serial";
}

// The quantization probe under the hierarchical exchange (2 nodes x 2 ranks, 2 processes of 2 replicas of 2
// workers): it changes no bit of the run, and reports the non-zero share of the codes each rank drew (its part of
// the node's average), below 1 for every ternary tensor and above 0 for the step and each weight tensor.
TEST_F(TrainerTopology, QuantizationProbeUnderTheHierarchicalExchange) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not found";
  const std::string flags = "--max_steps 6 --save_iter 100 --num_nodes 4 --cpu_replicas 2 --ranks_per_node 2";
  const std::string plain = run(mpirun(2) + train_cmd() + common("plain", flags));
  EXPECT_NE(plain.find("exchange hierarchical (2 nodes x 2 ranks"), std::string::npos) << plain;
  const std::string metrics = (root_ / "probe.jsonl").string();
  run(mpirun(2) + train_cmd() + common("probe", flags + " --quantization_error_every 3 --metrics_jsonl " + metrics));
  const auto a = final_params("plain");
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == final_params("probe")) << "a probe changes no bit of the run";
  std::ifstream in(metrics);
  std::string line;
  int probes = 0;
  while (std::getline(in, line)) {
    if (line.find("\"quantization\": true") == std::string::npos) continue;
    ++probes;
    // The whole step's share first, then each tensor's; a weight tensor (>= 500 elements) has non-zero codes.
    int values = 0;
    for (size_t at = line.find("\"nonzero_fraction\": "); at != std::string::npos;
         at = line.find("\"nonzero_fraction\": ", at + 1)) {
      const double f = std::stod(line.substr(at + 20));
      const size_t name = line.rfind("\"name\": \"", at);
      const bool weights =
          values == 0 ||
          (name != std::string::npos &&
           line.substr(name + 9, line.find('"', name + 9) - name - 9).find("/weights") != std::string::npos);
      EXPECT_GE(f, 0.0) << line;
      EXPECT_LT(f, 1.0) << line;
      if (weights) {
        EXPECT_GT(f, 0.0) << line;
      }
      ++values;
    }
    EXPECT_EQ(values, 7) << "the whole and LeNet's six ternary tensors: " << line;
  }
  EXPECT_EQ(probes, 2) << "steps 3 and 6";
}

TEST_F(TrainerTopology, ErrorFeedbackStateIsPerRankAndResumesBitForBit) {
  const std::string ef = "--error_feedback --num_nodes 2 --save_iter 3 ";
  run(train_cmd() + common("whole", ef + "--max_steps 6"));
  run(train_cmd() + common("split", ef + "--max_steps 3"));
  EXPECT_TRUE(fs::exists(root_ / "split" / "model.ckpt-3.rank-0"));
  const std::string resumed = run(train_cmd() + common("split", ef + "--max_steps 6"));
  EXPECT_NE(resumed.find("per-rank state restored on 1 ranks"), std::string::npos) << resumed;
  EXPECT_TRUE(final_params("whole") == final_params("split")) << "resumed error feedback";
  EXPECT_FALSE(fs::exists(root_ / "split" / "model.ckpt-3.rank-1"));
  // Without the residuals the run differs: they are state, not noise.
  run(train_cmd() + common("noef", "--num_nodes 2 --save_iter 3 --max_steps 6"));
  EXPECT_FALSE(final_params("whole") == final_params("noef"));
}

TEST_F(TrainerTopology, ErrorFeedbackStateOfTwoProcessesResumesBitForBit) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not found";
  const std::string mpi = "--error_feedback --num_nodes 1 --save_iter 2 ";
  run(mpirun(2) + train_cmd() + common("mpi_whole", mpi + "--max_steps 4"));
  run(mpirun(2) + train_cmd() + common("mpi_split", mpi + "--max_steps 2"));
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(fs::exists(root_ / "mpi_split" / ("model.ckpt-2.rank-" + std::to_string(r))));
  run(mpirun(2) + train_cmd() + common("mpi_split", mpi + "--max_steps 4"));
  EXPECT_TRUE(final_params("mpi_whole") == final_params("mpi_split")) << "two processes, resumed";
}

// A checkpoint of 2 workers resumed on 4: refused without --allow_topology_change, then restored (every replica's
// parameters checked against the checkpoint's digest: the log line says they match, and the digest is the one the
// first run saved), the data cursor re-derived to the step's batch for the new layout, and training goes on.
TEST_F(TrainerTopology, ResumingOnAnotherNumberOfWorkers) {
  const std::string first = run(train_cmd() + common("t", "--num_nodes 2 --max_steps 2 --save_iter 2"));
  const size_t at = first.find("saved " + (root_ / "t" / "model.ckpt-2").string() + " (step 2, parameter digest ");
  ASSERT_NE(at, std::string::npos) << first;
  const std::string digest = first.substr(first.find("digest ", at) + 7, 8);
  const std::string refused = run(train_cmd() + common("t", "--num_nodes 4 --max_steps 4"), 1);
  EXPECT_NE(refused.find("--allow_topology_change"), std::string::npos) << refused;
  const std::string moved =
      run(train_cmd() + common("t", "--num_nodes 4 --max_steps 4 --allow_topology_change --cpu_replicas 2"));
  EXPECT_NE(moved.find("workers per process 4 (the checkpoint's: 2"), std::string::npos) << moved;
  EXPECT_NE(moved.find("at step 2 (parameter digest " + digest + ", the parameters read match it)"), std::string::npos)
      << moved;
  // --benchmark_mode counts batches: step 2 of the new layout is its batch 2 (the checkpoint's cursor: 2 as well).
  EXPECT_NE(moved.find("data cursor re-derived for the new layout: 2 batches of each process's share (the "
                       "checkpoint's was 2)"),
            std::string::npos)
      << moved;
  EXPECT_TRUE(fs::exists(root_ / "t" / "model.ckpt-4"));
  // Per-rank state cannot follow a change in the number of ranks.
  run(train_cmd() + common("ef", "--error_feedback --num_nodes 2 --cpu_replicas 2 --max_steps 2 --save_iter 2"));
  const std::string kept =
      run(train_cmd() + common("ef", "--error_feedback --num_nodes 2 --max_steps 4 --allow_topology_change"), 1);
  EXPECT_NE(kept.find("per-rank state of 2 ranks"), std::string::npos) << kept;
  EXPECT_NE(kept.find("--reset_rank_state"), std::string::npos) << kept;
  const std::string reset = run(train_cmd() + common("ef",
                                                     "--error_feedback --num_nodes 2 --max_steps 4 "
                                                     "--allow_topology_change --reset_rank_state"));
  EXPECT_NE(reset.find("per-rank state of 2 ranks dropped"), std::string::npos) << reset;
}

// A change in the number of ranks that keeps each rank's tensors (one worker per rank, 2 ranks -> 1 -> 2): the
// scheme's policy (TernGrad error feedback: survivors keep their residuals, new ranks start at zero) is applied and
// said with its bias; the kept residual changes the training (against --reset_rank_state), the same way every time.
// --elastic_batch per_worker keeps each worker's batch of the first layout and scales the learning rate.
TEST_F(TrainerTopology, RankStateFollowsTheSchemesPolicyAndPerWorkerBatchScalesTheRate) {
  const std::string ef = "--error_feedback --save_iter 2 --elastic_batch per_worker ";
  for (const char* dir : {"keep", "keep_again", "reset"})
    run(train_cmd() + common(dir, ef + "--num_nodes 2 --cpu_replicas 2 --max_steps 2"));
  const std::string shrink = "--num_nodes 1 --max_steps 4 --allow_topology_change ";
  const std::string kept = run(train_cmd() + common("keep", ef + shrink));
  EXPECT_NE(kept.find("per-rank state of 2 ranks resumed on 1 ranks"), std::string::npos) << kept;
  EXPECT_NE(kept.find("the lost ranks' residuals"), std::string::npos) << kept;
  EXPECT_NE(kept.find("1 workers of 8 examples each (the first layout's 2 workers of 8): a total batch of 8, the "
                      "learning rate scaled by 0.5"),
            std::string::npos)
      << kept;
  run(train_cmd() + common("keep_again", ef + shrink));
  const std::string reset = run(train_cmd() + common("reset", ef + shrink + "--reset_rank_state"));
  EXPECT_NE(reset.find("per-rank state of 2 ranks dropped"), std::string::npos) << reset;
  EXPECT_TRUE(final_params("keep") == final_params("keep_again"));
  EXPECT_FALSE(final_params("keep") == final_params("reset")) << "the kept residual made no difference";
  // Back to 2 ranks: rank 0 keeps its residual, rank 1 starts at zero; the total batch is the first layout's again.
  const std::string grown =
      run(train_cmd() + common("keep", ef + "--num_nodes 2 --cpu_replicas 2 --max_steps 6 --allow_topology_change"));
  EXPECT_NE(grown.find("per-rank state of 1 ranks resumed on 2 ranks"), std::string::npos) << grown;
  EXPECT_NE(grown.find("a total batch of 16, the learning rate scaled by 1"), std::string::npos) << grown;
  EXPECT_TRUE(fs::exists(root_ / "keep" / "model.ckpt-6.rank-1"));
}

TEST_F(TrainerTopology, PowerSgdStateResumesBitForBit) {
  const std::string psgd = "--exchange powersgd --powersgd_rank 2 --fp32_warmup_steps 2 --num_nodes 2 --save_iter 3 ";
  const std::string whole = run(train_cmd() + common("whole", psgd + "--max_steps 6", 32));
  EXPECT_NE(whole.find("powersgd (rank 2, 4 of 8 tensors low-rank"), std::string::npos) << whole;
  run(train_cmd() + common("split", psgd + "--max_steps 3", 32));
  EXPECT_TRUE(fs::exists(root_ / "split" / "model.ckpt-3.rank-0"));
  const std::string resumed = run(train_cmd() + common("split", psgd + "--max_steps 6", 32));
  EXPECT_NE(resumed.find("per-rank state restored on 1 ranks"), std::string::npos) << resumed;
  EXPECT_TRUE(final_params("whole") == final_params("split")) << "resumed PowerSGD";
  // A checkpoint whose per-rank file is gone: an error naming it, not a silent restart of the state.
  run(train_cmd() + common("lost", psgd + "--max_steps 3", 32));
  fs::remove(root_ / "lost" / "model.ckpt-3.rank-0");
  const std::string lost = run(train_cmd() + common("lost", psgd + "--max_steps 6", 32), 1);
  EXPECT_NE(lost.find("model.ckpt-3.rank-0"), std::string::npos) << lost;
  // Another exchange, or another rank, on resume: refused, naming the flag; nothing written.
  const auto before = fs::last_write_time(root_ / "split" / "checkpoint");
  const std::string other = run(train_cmd() + common("split", "--num_nodes 2 --max_steps 8"), 1);
  EXPECT_NE(other.find("--grad_bits 1 differs from the checkpoint's 32"), std::string::npos) << other;
  const std::string rank = run(train_cmd() + common("split",
                                                    "--exchange powersgd --powersgd_rank 4 --fp32_warmup_steps 2 "
                                                    "--num_nodes 2 --max_steps 8",
                                                    32),
                               1);
  EXPECT_NE(rank.find("--powersgd_rank 4 differs from the checkpoint's 2"), std::string::npos) << rank;
  EXPECT_FALSE(fs::exists(root_ / "split" / "model.ckpt-8"));
  EXPECT_TRUE(fs::last_write_time(root_ / "split" / "checkpoint") == before);
}

TEST_F(TrainerTopology, PowerSgdStateOfTwoProcessesResumesBitForBit) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not found";
  const std::string psgd = "--exchange powersgd --num_nodes 1 --save_iter 2 ";
  run(mpirun(2) + train_cmd() + common("mpi_whole", psgd + "--max_steps 4", 32));
  run(mpirun(2) + train_cmd() + common("mpi_split", psgd + "--max_steps 2", 32));
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(fs::exists(root_ / "mpi_split" / ("model.ckpt-2.rank-" + std::to_string(r))));
  run(mpirun(2) + train_cmd() + common("mpi_split", psgd + "--max_steps 4", 32));
  EXPECT_TRUE(final_params("mpi_whole") == final_params("mpi_split")) << "two processes, resumed";
}

TEST_F(TrainerTopology, RanksPerNodeThatDoesNotDivideIsOneLineOnEveryProcess) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not found";
  const std::string out =
      run(mpirun(2) + train_cmd() + common("bad", "--max_steps 2 --num_nodes 1 --ranks_per_node 3"), 1);
  EXPECT_NE(out.find("--ranks_per_node 3"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(root_ / "bad" / "model.ckpt-2"));
}

}  // namespace
}  // namespace tg

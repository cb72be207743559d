// Trainer end to end on real data: a small TFRecord dataset written from Fashion-MNIST, TernGrad with two
// workers, checkpoints, bit-identical resume, refusal of a foreign train_dir, flag errors, divergence,
// SIGINT, terngrad-eval's report line, and training across two real MPI processes.
#include "terngrad/train/trainer.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "../src/apps/stop_signals.h"
#include "common/fashion_mnist_trainer_test.h"
#include "common/files.h"
#include "event.pb.h"
#include "terngrad/backend/backend.h"
#include "terngrad/data/example.h"
#include "terngrad/data/image_codec.h"
#include "terngrad/data/tfrecord.h"
#include "terngrad/train/checkpoint.h"

namespace tg {
namespace {

namespace fs = std::filesystem;

// Shell code: runs `train` in the background with its output in `log`, sends `signal` once it has logged a
// training step (an observed event, not a fixed time: a slow build may still be setting up after seconds; 300 s
// without a step ends the wait, and the test then fails on what is missing), and waits for it. Prints
// "elapsed_ms N" (from the signal to the exit) and the log; exits with the training's status.
std::string signal_after_first_step(const std::string& train, const std::string& log, const std::string& signal) {
  return "(" + train + " --log_every 1 > '" + log + "' 2>&1 & p=$!; for i in $(seq 3000); do grep -q " +
         "'step [0-9]*, entropy_loss' '" + log + "' && break; kill -0 $p 2>/dev/null || break; sleep 0.1; done; " +
         "kill -" + signal + " $p; s=$(date +%s%N); wait $p; r=$?; " +
         "echo elapsed_ms $(( ($(date +%s%N) - s) / 1000000 )); cat '" + log + "'; exit $r)";
}

struct TrainerTestData {
  static constexpr const char* kTag = "tg_trainer";
  static constexpr int kTrainCount = 1024, kTrainShards = 2, kTestCount = 500;
};

class TrainerTest : public testing::FashionMnistTrainerTest<TrainerTestData> {
 protected:
  TrainConfig config(const std::string& train_dir) const {
    TrainConfig c = small_lenet(train_dir);
    c.save_iter = 6;
    c.num_preprocess_threads = 2;
    c.log_every = 3;
    return c;
  }

  static std::string bin(const std::string& name) { return std::string(TG_BINARY_DIR) + "/" + name; }
  static int run(const std::string& cmd, std::string* out = nullptr) { return testing::run_command(cmd, out); }

  // terngrad-eval on the latest checkpoint of train_dir (no precision flag) prints the reference's line.
  void expect_eval_line(const std::string& train_dir) const {
    std::string out;
    ASSERT_EQ(run(bin("terngrad-eval") + " --checkpoint_dir " + train_dir + " --data_dir " + data_dir_ +
                      " --run_once --batch_size 64 --threads 1",
                  &out),
              0)
        << out;
    EXPECT_TRUE(
        std::regex_search(out, std::regex("precision @ 1 = 0\\.\\d{4} recall @ 5 = [01]\\.\\d{4} \\[500 examples\\]")))
        << out;
  }

  static std::vector<char> param_bytes(const std::string& ckpt) {
    CheckpointReader r(ckpt);
    std::vector<char> all;
    for (const auto& name : r.names()) {
      Shape s = r.shape(name);
      std::vector<char> buf(static_cast<size_t>(s.numel()) * 4);
      r.read(name, Tensor(buf.data(), s, DType::kF32, Device::cpu()));
      all.insert(all.end(), buf.begin(), buf.end());
    }
    return all;
  }
};

TEST_F(TrainerTest, ResumeGivesBitIdenticalParameters) {
  TrainConfig a = config("a");
  a.metrics_jsonl = (root_ / "a.jsonl").string();
  a.check_replicas_every = 4;
  TrainResult ra = Trainer(a).run();
  EXPECT_EQ(ra.steps_done, 12);
  EXPECT_LT(ra.bytes_moved * 10, ra.fp32_bytes_moved);  // ternary moves > 10x less than fp32

  TrainConfig b = config("b");
  b.max_steps = 6;
  TrainResult rb1 = Trainer(b).run();
  EXPECT_EQ(rb1.steps_done, 6);
  b.max_steps = 12;
  b.num_preprocess_threads = 1;  // the input pipeline's thread count does not change the batches
  TrainResult rb2 = Trainer(b).run();
  EXPECT_EQ(rb2.start_step, 6);
  EXPECT_EQ(rb2.steps_done, 12);
  EXPECT_EQ(ra.parameter_digest, rb2.parameter_digest);
  EXPECT_TRUE(param_bytes(checkpoint_path(a.train_dir, 12)) == param_bytes(checkpoint_path(b.train_dir, 12)))
      << "parameters, EMA, BN state and optimizer slots must all match";

  // metrics: one line per logged step and a summary
  std::ifstream in(a.metrics_jsonl);
  std::string line, last;
  int lines = 0;
  while (std::getline(in, line)) ++lines, last = line;
  EXPECT_EQ(lines, 12 / 3 + 1);
  EXPECT_NE(last.find("\"summary\": true"), std::string::npos) << last;
  EXPECT_NE(last.find(ra.parameter_digest), std::string::npos) << last;
}

// --fp32_warmup_steps: the first steps exchange fp32 (all of them: the fp32 run's bits), then TernGrad with
// per-bucket scalers and error feedback; the metrics name each logged step's exchange; a resume before or after
// the switch gives the uninterrupted run's bits.
TEST_F(TrainerTest, Fp32WarmupSwitchesTheExchangeAndResumesBitForBit) {
  auto warm = [&](const std::string& dir, int64_t steps) {
    TrainConfig c = config(dir);
    c.fp32_warmup_steps = steps;
    c.scaler_bucket = 256;
    c.error_feedback = true;
    return c;
  };
  TrainConfig all = warm("all", 12);
  TrainConfig fp32 = config("fp32");
  fp32.grad_bits = 32;
  EXPECT_EQ(Trainer(all).run().parameter_digest, Trainer(fp32).run().parameter_digest)
      << "a warm-up of every step is the fp32 run";
  for (int64_t switch_at : {4, 8}) {  // the resume at step 6 after the switch, or before it
    TrainConfig a = warm("a" + std::to_string(switch_at), switch_at);
    a.metrics_jsonl = (root_ / ("a" + std::to_string(switch_at) + ".jsonl")).string();
    const TrainResult ra = Trainer(a).run();
    std::ifstream in(a.metrics_jsonl);
    std::string line;
    std::vector<std::string> exchanges;
    while (std::getline(in, line)) {
      const size_t at = line.find("\"exchange\": \"");
      if (at != std::string::npos) exchanges.push_back(line.substr(at + 13, line.find('"', at + 13) - at - 13));
    }
    const std::vector<std::string> want =
        switch_at == 4 ? std::vector<std::string>{"fp32 warm-up", "terngrad", "terngrad", "terngrad"}
                       : std::vector<std::string>{"fp32 warm-up", "fp32 warm-up", "terngrad", "terngrad"};
    EXPECT_EQ(exchanges, want) << "steps 3, 6, 9, 12 with the switch after step " << switch_at;
    TrainConfig b = warm("b" + std::to_string(switch_at), switch_at);
    b.max_steps = 6;
    Trainer(b).run();
    b.max_steps = 12;
    const TrainResult rb = Trainer(b).run();
    EXPECT_EQ(rb.start_step, 6);
    EXPECT_EQ(ra.parameter_digest, rb.parameter_digest) << "switch after step " << switch_at;
    EXPECT_NE(ra.parameter_digest, Trainer(warm("c" + std::to_string(switch_at), 0)).run().parameter_digest)
        << "the warm-up changes the run";
  }
}

TEST_F(TrainerTest, ForeignTrainDirIsRefused) {
  TrainConfig a = config("a");
  a.max_steps = 2;
  Trainer(a).run();
  TrainConfig other = a;
  other.dataset = "mnist";
  try {
    Trainer t(other);
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "--dataset mnist differs from the checkpoint's fashion_mnist in --train_dir " + a.train_dir +
                  ": a resumed run goes on with the settings it was written with; leave --dataset out (the run "
                  "continues with fashion_mnist) or train in another --train_dir");
  }
}

TEST_F(TrainerTest, BadFlagsNameTheFlagBeforeAnyWork) {
  struct Case {
    std::function<void(TrainConfig&)> mutate;
    const char* flag;
  };
  const std::vector<Case> cases = {
      {[](TrainConfig& c) { c.batch_size = 33; }, "--batch_size"},
      {[](TrainConfig& c) { c.grad_bits = 7; }, "--grad_bits"},
      {[](TrainConfig& c) { c.clip_factor = -1; }, "--clip_factor"},
      {[](TrainConfig& c) { c.optimizer = "sgd"; }, "--optimizer"},
      {[](TrainConfig& c) { c.learning_rate_decay_type = "step"; }, "--learning_rate_decay_type"},
      {[](TrainConfig& c) { c.data_dir = ""; }, "--data_dir"},
      {[](TrainConfig& c) { c.exchange = "ring"; }, "--exchange"},
      {[](TrainConfig& c) { c.net = "vgg"; }, "--net"},
      {[](TrainConfig& c) { c.data_dir = "/nonexistent/data"; }, "--data_dir"},
      {[](TrainConfig& c) { c.bucket_mb = 0; }, "--bucket_mb"},
      {[](TrainConfig& c) { c.bucket_mb = -3; }, "--bucket_mb"},
      {[](TrainConfig& c) { c.timeline = "/nonexistent/folder/trace.json"; }, "--timeline"},
      {[](TrainConfig& c) { c.timeline = "t.json", c.timeline_steps = "9-2"; }, "--timeline_steps"},
      {[](TrainConfig& c) { c.timeline_layers = true; }, "--timeline_layers"},  // without --timeline
      {[](TrainConfig& c) { c.cpu_replicas = 0; }, "--cpu_replicas"},
      {[](TrainConfig& c) { c.cpu_replicas = 3; }, "--num_nodes"},  // 2 workers on 3 replicas
      {[](TrainConfig& c) { c.device = "cuda", c.cpu_replicas = 2; }, "--cpu_replicas"},
      {[](TrainConfig& c) { c.grad_bits = 1, c.scaler_bucket = -256; }, "--scaler_bucket -256"},
      {[](TrainConfig& c) { c.grad_bits = 1, c.scaler_bucket = 100; }, "--scaler_bucket 100"},
      {[](TrainConfig& c) { c.grad_bits = 32, c.scaler_bucket = 1024; }, "--scaler_bucket 1024"},
      {[](TrainConfig& c) { c.grad_bits = 16, c.fp32_warmup_steps = 100; }, "--fp32_warmup_steps 100"},
      {[](TrainConfig& c) { c.fp32_warmup_steps = -1; }, "--fp32_warmup_steps -1"},
  };
  for (const auto& k : cases) {
    TrainConfig c = config("bad");
    k.mutate(c);
    try {
      Trainer t(c);
      ADD_FAILURE() << "no error for " << k.flag;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(k.flag), std::string::npos) << e.what();
    }
  }
  EXPECT_FALSE(fs::exists(root_ / "bad" / "checkpoint"));
  // The binary: one line on stderr, exit 2 (a usage error: a value its flag's check refuses).
  std::string out;
  EXPECT_EQ(
      run(bin("terngrad-train") + " --benchmark_mode --grad_bits 7 --train_dir " + (root_ / "cli").string(), &out), 2);
  EXPECT_NE(out.find("--grad_bits 7 is not one of 1 (TernGrad), 16 (fp16), 32 (fp32)"), std::string::npos) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  EXPECT_EQ(
      run(bin("terngrad-train") + " --benchmark_mode --bucket_mb 0 --train_dir " + (root_ / "cli").string(), &out), 2);
  EXPECT_NE(out.find("--bucket_mb 0 must be a positive number of MiB"), std::string::npos) << out;
  EXPECT_EQ(run(bin("terngrad-train") + " --benchmark_mode --timeline /nonexistent/folder/t.json --train_dir " +
                    (root_ / "cli").string(),
                &out),
            1);
  EXPECT_NE(out.find("/nonexistent/folder"), std::string::npos) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  EXPECT_FALSE(fs::exists(root_ / "cli")) << "nothing is written before the flags are checked";
}

// Reads a JSON (or JSON lines) file with python3 and prints what `expr` (over `d`, the parsed document) gives.
std::string python_json(const std::string& path, const std::string& expr) {
  const std::string expr_file = path + ".expr";
  std::ofstream(expr_file) << expr;
  const std::string cmd =
      "python3 -c \"import json,sys; p=sys.argv[1]; d=[json.loads(l) for l in open(p)] if p.endswith('.jsonl') "
      "else json.load(open(p)); print(eval(open(sys.argv[2]).read()))\" " +
      path + " " + expr_file + " 2>&1";
  std::string out;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return "popen failed";
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  pclose(pipe);
  fs::remove(expr_file);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Where the time goes: every logged step carries the phase times (log line, metrics JSON, TensorBoard), and
// --timeline writes a Chrome trace of the chosen steps with a track per worker and the exchange's work.
TEST_F(TrainerTest, PhaseTimesAndTimeline) {
  if (run("command -v python3") != 0) GTEST_SKIP() << "python3 not found (needed to parse the JSON)";
  TrainConfig c = config("phases");
  c.max_steps = 9;
  c.save_iter = 100;
  c.metrics_jsonl = (root_ / "metrics.jsonl").string();
  c.timeline = (root_ / "trace.json").string();
  c.timeline_steps = "4-5";
  Trainer(c).run();
  const std::string trace = c.timeline, metrics = c.metrics_jsonl;
  ASSERT_TRUE(fs::exists(trace));
  EXPECT_EQ(python_json(trace, "sorted(set(e['args']['name'] for e in d['traceEvents'] if e['name']=='thread_name'))"),
            "['exchange (rank 0)', 'worker 0', 'worker 1']");
  EXPECT_EQ(python_json(trace, "sorted(set(e['args']['step'] for e in d['traceEvents'] if e['ph']=='X'))"), "[4, 5]");
  EXPECT_EQ(python_json(trace, "sorted(set(e['name'] for e in d['traceEvents'] if e['ph']=='X'))"),
            "['backward', 'decode', 'encode', 'forward', 'input_wait', 'optimizer + EMA', 'scalers']");
  // Every phase is in the metrics; the compute thread's phases add up to the step's wall time.
  EXPECT_EQ(python_json(metrics, "sorted(d[0]['time'].keys())"),
            "['comm_blocked', 'comm_cpu', 'comm_in_flight', 'decode', 'encode', 'forward_backward', 'input_wait', "
            "'optimizer_ema', 'other', 'scalers']");
  EXPECT_EQ(python_json(metrics,
                        "all(abs(sum(v for k,v in l['time'].items() if k not in ('comm_in_flight', 'comm_cpu')) - "
                        "l['sec_per_batch']) < 0.05*l['sec_per_batch'] + 1e-3 for l in d if 'time' in l and "
                        "'step' in l)"),
            "True");
  EXPECT_EQ(python_json(metrics, "[len(l['worker_forward_backward']) for l in d if 'step' in l]"), "[2, 2, 2]");
  EXPECT_EQ(python_json(metrics, "d[-1]['summary'] and d[-1]['time']['forward_backward'] > 0"), "True");
}

// --timeline_layers: every layer's forward and backward is one span per step on its worker's track, in the
// net's order (backward reversed), inside that worker's forward / backward phase of the same step.
TEST_F(TrainerTest, TimelineLayers) {
  if (run("command -v python3") != 0) GTEST_SKIP() << "python3 not found (needed to parse the JSON)";
  TrainConfig c = config("layers");
  c.max_steps = 4;
  c.save_iter = 100;
  c.timeline = (root_ / "trace.json").string();
  c.timeline_steps = "2-3";
  c.timeline_layers = true;
  Trainer(c).run();
  const std::string lenet =
      "['conv1', 'conv1/relu', 'pool1', 'conv2', 'conv2/relu', 'pool2', 'flatten', 'fc3', "
      "'fc3/relu', 'logits', 'loss']";
  const std::string x = "[e for e in d['traceEvents'] if e['ph']=='X']";
  for (const char* step : {"2", "3"})
    for (const char* tid : {"0", "1"}) {
      const std::string mine = "[e for e in " + x + " if e['args']['step']==" + step + " and e['tid']==" + tid + "]";
      SCOPED_TRACE(std::string("step ") + step + ", track " + tid);
      EXPECT_EQ(python_json(c.timeline, "[e['name'] for e in " + mine + " if e['cat']=='layer_forward']"), lenet);
      EXPECT_EQ(python_json(c.timeline, "[e['name'] for e in " + mine + " if e['cat']=='layer_backward'][::-1]"),
                lenet);
      // Each layer span lies inside the phase of its kind (1 us of rounding either side).
      EXPECT_EQ(python_json(c.timeline,
                            "all(any(p['name']==e['cat'][6:] and p['ts']-1<=e['ts'] and "
                            "e['ts']+e['dur']<=p['ts']+p['dur']+1 for p in " +
                                mine + " if p['cat']=='step') for e in " + mine + " if e['cat'].startswith('layer_'))"),
                "True");
    }
  EXPECT_EQ(python_json(c.timeline, "sorted(set(e['args']['step'] for e in " + x + "))"), "[2, 3]");
}

// --overlap (buckets exchanged by a communication thread while backward runs) gives the serial path's bits,
// across two MPI processes of two workers each; the timeline shows both processes' communication threads.
TEST_F(TrainerTest, OverlapIsBitIdenticalToSerialAcrossTwoMpiProcesses) {
  if (run("command -v mpirun") != 0) GTEST_SKIP() << "mpirun not found";
  if (run("command -v python3") != 0) GTEST_SKIP() << "python3 not found (needed to parse the JSON)";
  auto train = [&](const std::string& name, const std::string& extra) {
    const std::string dir = (root_ / name).string();
    std::string out;
    const int rc = run("timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 " + bin("terngrad-train") +
                           " --data_dir " + data_dir_ +
                           " --dataset fashion_mnist --net lenet --num_nodes 2 --batch_size 32 --grad_bits 1"
                           " --clip_factor 2.5 --max_steps 5 --save_iter 100 --log_every 5 --threads 1"
                           " --num_readers 1 --num_preprocess_threads 1 --train_dir " +
                           dir + " " + extra,
                       &out);
    EXPECT_EQ(rc, 0) << out;
    auto latest = latest_checkpoint(dir);
    EXPECT_TRUE(latest.has_value()) << out;
    return latest ? param_bytes(*latest) : std::vector<char>();
  };
  const std::string trace = (root_ / "trace.json").string(), metrics = (root_ / "m.jsonl").string();
  const auto overlapped = train("overlap", "--overlap=true --bucket_mb 0.25 --timeline " + trace +
                                               " --timeline_steps 2-3 --metrics_jsonl " + metrics);
  const auto serial = train("serial", "--overlap=false");
  ASSERT_FALSE(serial.empty());
  EXPECT_TRUE(overlapped == serial) << "overlapped and serial exchanges must give the same parameters";
  EXPECT_EQ(python_json(trace, "sorted(set(e['args']['name'] for e in d['traceEvents'] if e['name']=='thread_name'))"),
            "['communication (rank 0)', 'communication (rank 1)', 'exchange (rank 0)', 'exchange (rank 1)', "
            "'worker 0', 'worker 1', 'worker 2', 'worker 3']");
  EXPECT_EQ(python_json(trace, "sorted(set(e['pid'] for e in d['traceEvents']))"), "[0, 1]");
  EXPECT_EQ(python_json(trace, "len([e for e in d['traceEvents'] if e['name']=='exchange codes']) > 4"), "True");
  // Both processes' phase times are in the metrics; the wire carried bytes.
  EXPECT_EQ(python_json(metrics, "[len(l['process_time']) for l in d if 'step' in l]"), "[2]");
  EXPECT_EQ(python_json(metrics, "[l['wire_bytes'] > 0 for l in d if 'step' in l]"), "[True]");
}

// Two CPU replicas, each on its own thread with its own backend and exchange, meeting through the in-process
// communicator, give the bits of one replica running both workers: same Philox keys (the global worker index),
// same shared scalers, and sums formed in worker order; for ternary, fp16 and fp32 gradients, with and without
// overlap. LeNet has no batch norm, whose moving statistics are per replica. The same through the loopback groups
// (TG_CPU_REPLICA_GROUPS=loopback: the code replicas sharing a GPU run, on host memory), with the same bytes counted.
TEST_F(TrainerTest, CpuReplicasOnTheirOwnThreadsGiveTheBitsOfOneReplica) {
  for (int bits : {1, 16, 32}) {
    for (bool overlap : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "grad_bits " << bits << (overlap ? ", overlap" : ", serial"));
      TrainConfig one = config("one_" + std::to_string(bits) + "_" + std::to_string(overlap));
      one.grad_bits = bits;
      one.overlap = overlap;
      one.max_steps = 6;
      one.bucket_mb = 0.05;  // several buckets
      one.check_replicas_every = 3;
      TrainConfig two = one;
      two.train_dir = (root_ / ("two_" + std::to_string(bits) + "_" + std::to_string(overlap))).string();
      two.cpu_replicas = 2;
      two.threads = 2;  // one thread per replica
      const TrainResult r1 = Trainer(one).run();
      const TrainResult r2 = Trainer(two).run();
      EXPECT_EQ(r1.steps_done, 6);
      EXPECT_EQ(r2.steps_done, 6);
      EXPECT_EQ(r1.parameter_digest, r2.parameter_digest);
      EXPECT_EQ(r1.bytes_moved, r2.bytes_moved);
      TrainConfig loop = two;
      loop.train_dir += "_loopback";
      ASSERT_EQ(setenv("TG_CPU_REPLICA_GROUPS", "loopback", 1), 0);
      const TrainResult r3 = Trainer(loop).run();
      unsetenv("TG_CPU_REPLICA_GROUPS");
      EXPECT_EQ(r3.steps_done, 6);
      EXPECT_EQ(r3.parameter_digest, r1.parameter_digest);
      EXPECT_EQ(r3.bytes_moved, r1.bytes_moved);
    }
  }
}

// The optimizer decoding TernGrad's average inside its update (--decode_in_update, the default) gives the bits of
// the exchange decoding it into the gradient first: one replica of two workers (no group) and two CPU replicas
// (a thread group), allgather2 and allreduce8, with error feedback and the moving average, overlapped.
TEST_F(TrainerTest, DecodeInUpdateGivesTheBitsOfDecodingFirst) {
  for (const char* exchange : {"allgather2", "allreduce8"})
    for (int replicas : {1, 2}) {
      SCOPED_TRACE(::testing::Message() << exchange << ", " << replicas << " replicas");
      TrainConfig in = config(std::string("in_update_") + exchange + std::to_string(replicas));
      in.exchange = exchange;
      in.cpu_replicas = replicas;
      in.threads = replicas;
      in.error_feedback = true;
      in.max_steps = 6;
      in.bucket_mb = 0.05;
      TrainConfig first = in;
      first.train_dir += "_first";
      first.decode_in_update = false;
      const TrainResult a = Trainer(in).run();
      const TrainResult b = Trainer(first).run();
      EXPECT_EQ(a.steps_done, 6);
      EXPECT_EQ(a.parameter_digest, b.parameter_digest);
      TrainConfig fp32 = in;
      fp32.train_dir += "_fp32";
      fp32.grad_bits = 32;
      fp32.error_feedback = false;
      EXPECT_NE(Trainer(fp32).run().parameter_digest, a.parameter_digest) << "the digest tells runs apart";
    }
}

// A diverging run (learning rate 1e6) stops with one line naming what diverged (the loss, or the tensor whose
// gradient scaler is not finite) and the step, and the last checkpoint stays intact. Steps count from 0 in the message:
// "step N" is the step that runs after N completed ones, so with a checkpoint every step the last one kept is step N's.
// In fp32 and in TernGrad. (A gradient that goes non-finite while the loss stays finite is stopped by the exchange
// naming the tensor and the step: GradientExchange.NonFiniteGradientNamesTensorAndStep and
// MpiGradientExchange.NonFiniteGradientStopsEveryProcess.)
TEST_F(TrainerTest, DivergenceStopsNamingTheStepAndKeepsTheLastCheckpoint) {
  for (int bits : {32, 1}) {
    TrainConfig c = config("diverge" + std::to_string(bits));
    c.grad_bits = bits;
    c.initial_learning_rate = 1e6;
    c.save_iter = 1;
    c.max_steps = 40;
    std::string what;
    try {
      Trainer(c).run();
      ADD_FAILURE() << "a learning rate of 1e6 must diverge (grad_bits " << bits << ")";
      continue;
    } catch (const Error& e) {
      what = e.what();
    }
    // fp32: the loss check (read before every checkpoint); TernGrad: the exchange's check of the shared scalers,
    // which sees the non-finite gradient in the same step, before the loss is read, and names the tensor.
    std::smatch m;
    const std::regex pattern(bits == 32 ? "loss is not finite at step (\\d+): cross-entropy "
                                        : "non-finite gradient scaler \\S+ for tensor '([a-z0-9_/]+)' at step (\\d+)");
    ASSERT_TRUE(std::regex_search(what, m, pattern)) << "grad_bits " << bits << ": " << what;
    const int64_t step = std::stoll(m[bits == 32 ? 1 : 2]);
    EXPECT_GT(step, 0) << what;
    EXPECT_LT(step, c.max_steps) << what;
    auto latest = latest_checkpoint(c.train_dir);
    ASSERT_TRUE(latest.has_value());
    EXPECT_EQ(*latest, checkpoint_path(c.train_dir, step)) << "grad_bits " << bits << ": " << what;
    EXPECT_NO_THROW(param_bytes(*latest));  // every tensor present with a valid checksum
  }
}

TEST_F(TrainerTest, SigintSavesACheckpointAndExitsCleanly) {
  const std::string dir = (root_ / "sigint").string();
  std::string out;
  int rc = run(signal_after_first_step(bin("terngrad-train") +
                                           " --benchmark_mode --net lenet --dataset fashion_mnist --max_steps 1000000 "
                                           "--threads 1 --train_dir " +
                                           dir,
                                       (root_ / "sigint.log").string(), "INT"),
               &out);
  EXPECT_NE(out.find("entropy_loss"), std::string::npos) << "no training step was logged\n" << out;
  EXPECT_EQ(rc, 0) << out;
  auto latest = latest_checkpoint(dir);
  ASSERT_TRUE(latest.has_value()) << out;
  CheckpointReader r(*latest);
  EXPECT_LT(r.meta().step, 1000000);
  EXPECT_NE(out.find("checkpoint saved"), std::string::npos) << out;
}

TEST_F(TrainerTest, EvalPrintsTheReferenceLine) {
  TrainConfig a = config("a");
  a.max_steps = 6;
  Trainer(a).run();
  expect_eval_line(a.train_dir);
}

// A train_dir whose name holds a quote, a backslash and a newline: terngrad-eval's eval.jsonl line is still
// JSON and names the checkpoint exactly (python3's json module reads it back).
TEST_F(TrainerTest, EvalJsonLineEscapesTheCheckpointPath) {
  if (run("command -v python3") != 0) GTEST_SKIP() << "python3 not found (needed to parse the JSON)";
  TrainConfig a = config("odd \"quoted\" back\\slash\nnewline");
  a.max_steps = 3;
  a.save_iter = 3;
  Trainer(a).run();
  const std::string eval_dir = (root_ / "eval").string();
  ::setenv("TG_ODD_TRAIN_DIR", a.train_dir.c_str(), 1);  // the shell passes it through unchanged
  ::setenv("TG_ODD_CHECKPOINT", checkpoint_path(a.train_dir, 3).c_str(), 1);
  std::string out;
  const int rc = run(bin("terngrad-eval") + " --checkpoint_dir \"$TG_ODD_TRAIN_DIR\" --data_dir " + data_dir_ +
                         " --run_once --threads 1 --eval_dir " + eval_dir,
                     &out);
  ASSERT_EQ(rc, 0) << out;
  const std::string jsonl = (fs::path(eval_dir) / "eval.jsonl").string();
  EXPECT_EQ(python_json(jsonl,
                        "[len(d), d[0]['checkpoint'] == __import__('os').environ['TG_ODD_CHECKPOINT'], "
                        "d[0]['step'], d[0]['examples']]"),
            "[1, True, 3, 500]");
  ::unsetenv("TG_ODD_TRAIN_DIR");
  ::unsetenv("TG_ODD_CHECKPOINT");
}

// Reads every tensorflow.Event of the one events.out.tfevents.* file in dir.
std::vector<tensorflow::Event> read_events(const std::string& dir) {
  std::vector<tensorflow::Event> events;
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().filename().string().rfind("events.out.tfevents.", 0) != 0) continue;
    ++files;
    TfRecordReader reader(entry.path().string());
    std::string record;
    while (reader.next(&record)) {
      tensorflow::Event e;
      EXPECT_TRUE(e.ParseFromString(record));
      events.push_back(e);
    }
  }
  EXPECT_EQ(files, 1) << dir;
  return events;
}

TEST_F(TrainerTest, WritesTensorBoardEventFiles) {
  TrainConfig a = config("a");
  a.max_steps = 6;
  Trainer(a).run();
  std::vector<tensorflow::Event> ev = read_events(a.train_dir);
  // file_version, the training time's origin (run/train_seconds 0 at the first step), one event per logged step.
  ASSERT_EQ(ev.size(), 2u + 6 / 3);
  EXPECT_EQ(ev[0].file_version(), "brain.Event:2");
  EXPECT_EQ(ev[1].step(), 0);
  ASSERT_EQ(ev[1].summary().value_size(), 1);
  EXPECT_EQ(ev[1].summary().value(0).tag(), "run/train_seconds");
  EXPECT_EQ(ev[1].summary().value(0).simple_value(), 0.f);
  EXPECT_EQ(ev[3].step(), 6);
  std::map<std::string, float> tags;
  for (const auto& v : ev[3].summary().value()) tags[v.tag()] = v.simple_value();
  EXPECT_GT(tags.at("run/train_seconds"), 0.f);
  EXPECT_GT(tags.at("losses/total_loss"), 0.f);
  EXPECT_FLOAT_EQ(tags.at("learning_rate"), 0.01f);
  EXPECT_GT(tags.at("scaler/conv1/weights"), 0.f);
  const float zf = tags.at("zero_fraction/fc3/weights");  // most of fc3's gradient rounds to 0
  EXPECT_GT(zf, 0.5f);
  EXPECT_LT(zf, 1.f);
  EXPECT_LT(tags.at("exchange/bytes_per_step") * 10, tags.at("exchange/fp32_bytes_per_step"));

  const std::string eval_dir = (root_ / "eval").string();
  std::string out;
  ASSERT_EQ(run(bin("terngrad-eval") + " --checkpoint_dir " + a.train_dir + " --data_dir " + data_dir_ +
                    " --run_once --threads 1 --eval_dir " + eval_dir,
                &out),
            0)
      << out;
  std::vector<tensorflow::Event> eval = read_events(eval_dir);
  ASSERT_EQ(eval.size(), 2u);
  EXPECT_EQ(eval[1].step(), 6);
  EXPECT_EQ(eval[1].summary().value(0).tag(), "Accuracy @ 1");
  EXPECT_TRUE(fs::exists(fs::path(eval_dir) / "eval.jsonl"));
}

TEST_F(TrainerTest, TrainsAcrossTwoMpiProcesses) {
  if (run("command -v mpirun") != 0) GTEST_SKIP() << "mpirun not found";
  const std::string dir = (root_ / "mpi").string();
  std::string out;
  int rc =
      run("mpirun --allow-run-as-root --oversubscribe -np 2 " + bin("terngrad-train") + " --data_dir " + data_dir_ +
              " --dataset fashion_mnist --net lenet --num_nodes 1 --batch_size 32"
              " --grad_bits 1 --clip_factor 2.5 --max_steps 6 --save_iter 3 --log_every 3 --threads 1"
              " --num_readers 1 --num_preprocess_threads 1 --check_replicas_every 2 --train_dir " +
              dir,
          &out);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("2 workers x 16 examples"), std::string::npos) << out;
  auto latest = latest_checkpoint(dir);
  ASSERT_TRUE(latest.has_value()) << out;
  EXPECT_EQ(CheckpointReader(*latest).meta().step, 6);
}

TEST_F(TrainerTest, TwoMpiProcessesOfTwoWorkersEach) {
  if (run("command -v mpirun") != 0) GTEST_SKIP() << "mpirun not found";
  const std::string dir = (root_ / "mpi2x2").string();
  std::string out;
  int rc =
      run("mpirun --allow-run-as-root --oversubscribe -np 2 " + bin("terngrad-train") + " --data_dir " + data_dir_ +
              " --dataset fashion_mnist --net lenet --num_nodes 2 --batch_size 32"
              " --grad_bits 1 --clip_factor 2.5 --max_steps 4 --save_iter 4 --log_every 2 --threads 1"
              " --num_readers 1 --num_preprocess_threads 1 --check_replicas_every 2 --train_dir " +
              dir,
          &out);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("4 workers x 8 examples"), std::string::npos) << out;
  auto latest = latest_checkpoint(dir);
  ASSERT_TRUE(latest.has_value()) << out;
  EXPECT_EQ(CheckpointReader(*latest).meta().step, 4);
}

TEST_F(TrainerTest, CorruptRecordStopsNamingFileAndOffsetOrIsSkippedAndCounted) {
  const fs::path bad = root_ / "bad_data";
  fs::create_directories(bad);
  for (const auto& entry : fs::directory_iterator(data_dir_))
    fs::copy_file(entry.path(), bad / entry.path().filename());
  {
    std::fstream f(bad / "train-00000-of-00002", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);  // inside the data of the first record: its data CRC no longer matches
    char c = 0;
    f.read(&c, 1);
    f.seekp(100);
    c = static_cast<char>(c ^ 0x5a);
    f.write(&c, 1);
  }
  const std::string common = bin("terngrad-train") + " --data_dir " + bad.string() +
                             " --dataset fashion_mnist --net lenet --batch_size 32 --max_steps 3 --threads 1"
                             " --num_readers 1 --num_preprocess_threads 1 --shuffle_buffer 64";
  std::string out;
  EXPECT_EQ(run(common + " --train_dir " + (root_ / "t1").string(), &out), 1) << out;
  EXPECT_NE(out.find("train-00000-of-00002"), std::string::npos) << out;
  EXPECT_NE(out.find("offset 0"), std::string::npos) << out;
  EXPECT_FALSE(latest_checkpoint((root_ / "t1").string()).has_value()) << "no checkpoint of a failed start";
  EXPECT_NE(out.find("--skip_corrupt_records skips and counts such records"), std::string::npos) << out;
  EXPECT_EQ(run(common + " --skip_corrupt_records --train_dir " + (root_ / "t2").string(), &out), 0) << out;
  EXPECT_NE(out.find("skipped 1 corrupt records"), std::string::npos) << out;
  // A corrupt record met after some steps (the last one of a shard): the steps done are saved first.
  fs::copy_file(data_dir_ + "/train-00000-of-00002", bad / "train-00000-of-00002",
                fs::copy_options::overwrite_existing);
  {
    std::fstream f(bad / "train-00000-of-00002", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(0, std::ios::end);
    const std::streamoff end = f.tellg();
    f.seekp(end - 10);  // inside the last record's data
    char c = 0;
    f.seekg(end - 10);
    f.read(&c, 1);
    f.seekp(end - 10);
    c = static_cast<char>(c ^ 0x5a);
    f.write(&c, 1);
  }
  const std::string late = bin("terngrad-train") + " --data_dir " + bad.string() +
                           " --dataset fashion_mnist --net lenet --batch_size 32 --max_steps 1000 --threads 1"
                           " --num_readers 1 --num_preprocess_threads 1 --shuffle_buffer 64 --train_dir " +
                           (root_ / "t3").string();
  EXPECT_EQ(run(late, &out), 1) << out;
  const size_t at = out.find("; the checkpoint of step ");
  ASSERT_NE(at, std::string::npos) << out;
  const int64_t step = std::stoll(out.substr(at + 25));
  EXPECT_GT(step, 0) << out;
  EXPECT_EQ(latest_checkpoint((root_ / "t3").string()).value_or(""), checkpoint_path((root_ / "t3").string(), step));
  EXPECT_NE(out.find("was saved first: the same command resumes from it"), std::string::npos) << out;
}

TEST_F(TrainerTest, ResumeWithAnotherDataLayoutIsRefusedAndTheIndexNamesAKeptFile) {
  TrainConfig a = config("a");
  a.max_steps = 4;
  a.save_iter = 1;
  a.keep_checkpoints = 1;
  Trainer(a).run();
  EXPECT_EQ(list_checkpoint_steps(a.train_dir), (std::vector<int64_t>{4}));
  EXPECT_EQ(*latest_checkpoint(a.train_dir), checkpoint_path(a.train_dir, 4));
  TrainConfig b = a;
  b.max_steps = 8;
  b.batch_size = 64;
  try {
    Trainer t(b);
    FAIL() << "a different --batch_size must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--batch_size 64 differs"), std::string::npos) << e.what();
  }
}

TEST_F(TrainerTest, AnErrorInOneMpiProcessEndsTheWholeJob) {
  if (run("command -v mpirun") != 0) GTEST_SKIP() << "mpirun not found";
  // Only process 0 creates the train_dir, so only it fails; the other waits in a collective and must not
  // keep the job alive. 300 s only tells a hang from a slow start (sanitizer build, slow CPU).
  std::string out;
  const int rc = run("timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 " + bin("terngrad-train") +
                         " --benchmark_mode --net lenet --dataset fashion_mnist --num_nodes 1 --batch_size 32"
                         " --max_steps 5 --threads 1 --train_dir /proc/no_such_dir/train",
                     &out);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(rc, 124) << "the job hung instead of ending\n" << out;
  // The failing process's one line names it.
  EXPECT_NE(out.find("terngrad-train (process 0 of 2): error: "), std::string::npos) << out;
}

// SIGTERM while training on real data: the step finishes, a checkpoint is saved, exit 0 within seconds.
TEST_F(TrainerTest, SigtermOnRealDataSavesAndExitsWithinSeconds) {
  const std::string dir = (root_ / "sigterm").string();
  std::string out;
  const std::string train = bin("terngrad-train") + " --data_dir " + data_dir_ +
                            " --dataset fashion_mnist --net lenet --batch_size 32 --max_steps 1000000 --threads 1"
                            " --num_readers 1 --num_preprocess_threads 1 --train_dir " +
                            dir;
  int rc = run(signal_after_first_step(train, (root_ / "sigterm.log").string(), "TERM"), &out);
  EXPECT_NE(out.find("entropy_loss"), std::string::npos) << "no training step was logged\n" << out;
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("checkpoint saved"), std::string::npos) << out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex("elapsed_ms (\\d+)"))) << out;
  EXPECT_LE(std::stoi(m[1].str()), 10000) << out;  // the claim: the step ends, the save and exit follow at once
  ASSERT_TRUE(latest_checkpoint(dir).has_value()) << out;
}

// The stop-signal mechanism itself (src/apps/app_cli.h), in forked children that never act on the flag (a
// step that does not end): a second signal a second or more after the first exits at once, and without one
// the process exits when the grace period ends; both with 128 + signal and one line. The child says on a pipe
// when its watcher is set up ('r') and when it took the first signal ('f'): the parent signals on those events.
// The times that remain are the mechanism's own rule (a repeat within a second is the same request); the
// bounds on how long an exit takes only tell "at once" and "after the grace period" from "never".
TEST(StopSignalsTest, SecondSignalOrGracePeriodExitsWith128PlusSignal) {
  int events = -1;
  auto child = [&events](double grace) {
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      apps::StopSignals signals("child", grace);
      (void)!write(fds[1], "r", 1);
      while (!signals.flag()->load()) usleep(1000);  // only observes; the "step" goes on
      (void)!write(fds[1], "f", 1);
      for (;;) pause();  // signals are blocked here: only the watcher thread takes them
    }
    close(fds[1]);
    if (events >= 0) close(events);
    events = fds[0];
    return pid;
  };
  auto event = [&events] {
    char c = 0;
    return read(events, &c, 1) == 1 ? c : '-';
  };
  auto wait_exit = [](pid_t pid, double* seconds) {
    const auto t0 = std::chrono::steady_clock::now();
    int status = 0;
    waitpid(pid, &status, 0);
    *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  double secs = 0;
  pid_t pid = child(30);
  ASSERT_EQ(event(), 'r');
  kill(pid, SIGINT);
  ASSERT_EQ(event(), 'f');
  kill(pid, SIGINT);    // the same request arriving twice (timeout, mpirun): not a second one
  usleep(1300 * 1000);  // past a second after the first: the next signal is a second request
  ASSERT_EQ(waitpid(pid, nullptr, WNOHANG), 0) << "a repeat within a second must not end the process";
  kill(pid, SIGINT);
  EXPECT_EQ(wait_exit(pid, &secs), 128 + SIGINT);
  EXPECT_LT(secs, 10.0) << "not at once: the grace period is 30 s";
  pid = child(1.5);
  ASSERT_EQ(event(), 'r');
  kill(pid, SIGTERM);
  EXPECT_EQ(wait_exit(pid, &secs), 128 + SIGTERM);
  EXPECT_GT(secs, 1.0);   // the grace period counts from when the watcher took the signal: never earlier
  EXPECT_LT(secs, 20.0);  // it ended without a second signal
  close(events);
}

// Re-running a finished training says so with the real digest (it printed loss 0 and an empty digest).
TEST_F(TrainerTest, RerunOfAFinishedTrainingSaysSo) {
  TrainConfig a = config("done");
  a.max_steps = 3;
  const TrainResult first = Trainer(a).run();
  const TrainResult again = Trainer(a).run();
  EXPECT_TRUE(again.already_finished);
  EXPECT_EQ(again.steps_done, 3);
  EXPECT_EQ(again.parameter_digest, first.parameter_digest);
  std::string out;
  ASSERT_EQ(run(bin("terngrad-train") + " --data_dir " + data_dir_ +
                    " --dataset fashion_mnist --net lenet "
                    "--num_nodes 2 --batch_size 32 --max_steps 3 --grad_bits 1 --clip_factor 2.5 --threads 1 "
                    "--num_readers 1 --shuffle_buffer 256 --seed 5 --log_every 3 --train_dir " +
                    a.train_dir,
                &out),
            0)
      << out;
  EXPECT_NE(out.find("training already finished at step 3 (checkpoint " + checkpoint_path(a.train_dir, 3) +
                     ", parameter digest " + first.parameter_digest + ")"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("done:"), std::string::npos) << out;
}

// Bad data and bad values: one line naming the folder/flag, a non-zero exit, no checkpoint written.
TEST_F(TrainerTest, BadDataAndBadNumbersAreOneLineErrors) {
  const fs::path empty = root_ / "empty_data";
  fs::create_directories(empty);
  std::ofstream((empty / "train-00000-of-00001").string()).close();
  std::ofstream((empty / "test-00000-of-00001").string()).close();
  const fs::path garbage = root_ / "garbage_data";
  fs::create_directories(garbage);
  {
    std::ofstream f((garbage / "train-00000-of-00001").string(), std::ios::binary);
    for (int i = 0; i < 4096; ++i) f.put(static_cast<char>(i * 31 % 253));
  }
  const std::string train = "timeout 300 " + bin("terngrad-train") + " --max_steps 3 --threads 1";
  const std::string lenet = " --dataset fashion_mnist --net lenet";
  struct Case {
    std::string args, expect;
    int rc;
  };
  const std::vector<Case> cases = {
      {lenet + " --data_dir " + empty.string(), "--data_dir '" + empty.string() + "': the 1 file 'train-*' is empty",
       1},
      {lenet + " --skip_corrupt_records --data_dir " + garbage.string(), "found no usable record", 1},
      {" --data_dir " + data_dir_ + " --dataset cifar10 --net cifarnet", "1-channel image where cifar10", 1},
      {lenet + " --data_dir " + data_dir_ + " --batch_size 99999999999999999999",
       "--batch_size: '99999999999999999999' is out of range", 2},
      {lenet + " --data_dir " + data_dir_ + " --batch_size 1099511627776",
       "--batch_size 1099511627776 is above the limit", 2},
      {lenet + " --data_dir " + data_dir_ + " --no_such_flag", "--no_such_flag", 2},
  };
  for (const auto& k : cases) {
    std::string out;
    const std::string dir = (root_ / "bad_train").string();
    EXPECT_EQ(run(train + k.args + " --train_dir " + dir, &out), k.rc) << k.args << "\n" << out;
    EXPECT_NE(out.find(k.expect), std::string::npos) << out;
    const std::string last = out.substr(out.rfind('\n', out.size() - 2) + 1);
    EXPECT_EQ(last.rfind("terngrad-train: error: ", 0), 0u) << out;
    EXPECT_FALSE(latest_checkpoint(dir).has_value()) << out;
  }
  std::string out;
  const std::string cfg = (root_ / "bad.ini").string();
  std::ofstream(cfg) << "batch_size = [1, 2\n";
  EXPECT_EQ(run(train + " --benchmark_mode --config " + cfg, &out), 2) << out;
  EXPECT_NE(out.find("--config " + cfg + " line 1: batch_size = [1, 2: malformed value"), std::string::npos) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  // terngrad-eval: an empty subset, a CifarNet checkpoint on Fashion-MNIST shards, a usage error.
  const std::string cifar = (root_ / "cifar").string();
  ASSERT_EQ(run(bin("terngrad-train") +
                    " --benchmark_mode --dataset cifar10 --net cifarnet --batch_size 8 "
                    "--max_steps 1 --threads 1 --train_dir " +
                    cifar,
                &out),
            0)
      << out;
  const std::string eval = "timeout 300 " + bin("terngrad-eval") + " --run_once --threads 1 --checkpoint_dir ";
  EXPECT_EQ(run(eval + cifar + " --subset train --data_dir " + data_dir_, &out), 1) << out;
  EXPECT_NE(out.find("1-channel image where cifar10 has 3-channel images"), std::string::npos) << out;
  EXPECT_EQ(out.find("precision @ 1"), std::string::npos) << out;
  EXPECT_EQ(run(eval + cifar + " --subset test --data_dir " + empty.string(), &out), 1) << out;
  EXPECT_NE(out.find("--data_dir '" + empty.string() + "'"), std::string::npos) << out;
  EXPECT_EQ(run(eval + cifar + " --batch_size x --data_dir " + data_dir_, &out), 2) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  EXPECT_EQ(run(bin("terngrad-data") + " inspect --bogus", &out), 2) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
}

// Temporary checkpoint files of killed writers are removed when the chief starts.
TEST_F(TrainerTest, StaleTemporaryCheckpointFilesAreRemovedAtStart) {
  TrainConfig a = config("stale");
  a.max_steps = 2;
  fs::create_directories(a.train_dir);
  const std::string stale = (fs::path(a.train_dir) / "model.ckpt-1.tmp-999999999").string();
  std::ofstream(stale) << "torn";
  Trainer(a).run();
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_EQ(list_checkpoint_steps(a.train_dir), (std::vector<int64_t>{2}));
}

// Mixed precision (--precision bf16, where the CPU runs it): resuming a bf16 run gives the bits of the
// uninterrupted one, the checkpoint holds fp32 tensors only, and terngrad-eval evaluates it with no precision
// flag, in fp32.
TEST_F(TrainerTest, Bf16ResumeIsBitIdenticalAndItsCheckpointEvaluatesInFp32) {
  const auto cpu = make_backend("cpu", {1});
  if (!cpu->supports_compute(DType::kBf16)) GTEST_SKIP() << cpu->why_not(DType::kBf16);
  TrainConfig a = config("a");
  a.precision = "bf16";
  TrainResult ra = Trainer(a).run();
  TrainConfig b = config("b");
  b.precision = "bf16";
  b.max_steps = 6;
  Trainer(b).run();
  b.max_steps = 12;
  TrainResult rb = Trainer(b).run();
  EXPECT_EQ(rb.start_step, 6);
  EXPECT_EQ(ra.parameter_digest, rb.parameter_digest);
  EXPECT_TRUE(param_bytes(checkpoint_path(a.train_dir, 12)) == param_bytes(checkpoint_path(b.train_dir, 12)))
      << "parameters, EMA and optimizer slots must match";  // param_bytes reads every tensor as f32
  EXPECT_NE(Trainer(config("f32")).run().parameter_digest, ra.parameter_digest) << "bf16 must have computed in bf16";
  CheckpointReader r(checkpoint_path(a.train_dir, 12));
  EXPECT_EQ(r.meta().flags.at("precision"), "bf16");
  expect_eval_line(a.train_dir);
}

// --precision: an unknown value, and fp16 on the CPU, are one line naming the flag before any step.
TEST_F(TrainerTest, PrecisionTheDeviceCannotRunIsRefusedByName) {
  for (const auto& [precision, words] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"half", {"--precision 'half'", "fp32, fp16, bf16"}}, {"fp16", {"--precision fp16", "GPU"}}}) {
    TrainConfig c = config("p");
    c.precision = precision;
    try {
      Trainer t(c);
      ADD_FAILURE() << "accepted --precision " << precision;
    } catch (const Error& e) {
      for (const auto& w : words) EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << e.what();
    }
  }
  std::string out;
  EXPECT_NE(
      run(bin("terngrad-train") + " --fp16 --benchmark_mode=true --max_steps 1 --train_dir " + (root_ / "cli").string(),
          &out),
      0);
  EXPECT_NE(out.find("--precision fp16 on --device cpu"), std::string::npos) << out;
}

}  // namespace
}  // namespace tg

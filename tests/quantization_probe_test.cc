// Tests of --quantization_error_every (QuantizationProbe):
//   - the probe's numbers against a reference computed here from their definition (the fp32 mean of the workers'
//     gradients plus the weight decay the exchange adds, the decoded average of the very same exchange run without
//     a probe), decoded first or left coded for the optimizer, with per-bucket scalers; the gradients and the
//     decoded average are exactly those of a step without the probe;
//   - through the Trainer: probes do not change the run's bits (one replica; two CPU replicas, whose exchanges
//     overlap backward on other steps), they report every ternary tensor at the probed steps and none during an
//     fp32 warm-up; per-bucket scalers lower the error the probe measures; bad flags are one line naming the flag.
#include "terngrad/exchange/quantization_probe.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "common/fashion_mnist.h"
#include "common/fashion_mnist_trainer_test.h"
#include "terngrad/backend/backend.h"
#include "terngrad/core/error.h"
#include "terngrad/exchange/gradient_exchange.h"
#include "terngrad/train/trainer.h"

namespace tg {
namespace {

namespace fs = std::filesystem;

const std::vector<ParamInfo> kParams = {
    {"conv/weights", 1000}, {"conv/biases", 12}, {"fc/weights", 3000}, {"logits/weights", 40}, {"logits/biases", 4}};

// Two local workers' gradients, each one slab (the tensors back to back) with heavy-tailed values.
struct Workers {
  std::vector<std::vector<float>> slab;  // [worker][element]
  int64_t total = 0;
  explicit Workers(int n) {
    for (const ParamInfo& p : kParams) total += p.numel;
    std::mt19937 rng(7);
    std::student_t_distribution<float> heavy(2.5f);
    slab.assign(static_cast<size_t>(n), std::vector<float>(static_cast<size_t>(total)));
    for (auto& s : slab)
      for (float& v : s) v = 0.01f * heavy(rng);
  }
  Tensor flat(int w) {
    return Tensor(slab[w].data(), Shape{static_cast<int64_t>(slab[w].size() * 4)}, DType::kU8, Device::cpu());
  }
  std::vector<Tensor> views(int w) {
    std::vector<Tensor> v;
    int64_t at = 0;
    for (const ParamInfo& p : kParams) {
      v.emplace_back(slab[w].data() + at, Shape{p.numel}, DType::kF32, Device::cpu());
      at += p.numel;
    }
    return v;
  }
  std::vector<std::vector<Tensor>> all_views() { return {views(0), views(1)}; }
};

struct ProbeCase {
  bool defer_decode = false;
  int64_t scaler_bucket = 0;
};

// The probe on one replica of two workers against its definition.
void check_probe(const ProbeCase& pc) {
  SCOPED_TRACE(::testing::Message() << (pc.defer_decode ? "left coded" : "decoded first") << ", scaler bucket "
                                    << pc.scaler_bucket);
  CompressionFlags tf;
  tf.grad_bits = 1;
  tf.clip_factor = 2.5f;
  tf.scaler_bucket = pc.scaler_bucket;
  tf.size_to_binarize = 100;  // conv/biases stays fp32, as the logits
  const CompressionPolicy ternary_policy(tf, kParams);
  CompressionFlags ff = tf;
  ff.grad_bits = 32;
  ff.scaler_bucket = 0;
  const CompressionPolicy fp32_policy(ff, kParams);
  ASSERT_EQ(ternary_policy.num_ternary(), 2);
  std::unique_ptr<Backend> be = make_backend("cpu", BackendOptions{});
  ExchangeOptions xo;
  xo.seed = 11;

  // The weight decay the ternary exchange adds (on the weights), as the trainer hands it over.
  std::vector<std::vector<float>> params;
  WeightDecayTerms terms;
  for (const ParamInfo& p : kParams) {
    params.emplace_back(static_cast<size_t>(p.numel));
    for (int64_t i = 0; i < p.numel; ++i) params.back()[i] = 0.1f * std::sin(0.37f * static_cast<float>(i));
  }
  for (size_t t = 0; t < kParams.size(); ++t) {
    const bool decayed = kParams[t].name.find("weights") != std::string::npos;
    terms.coefficients.push_back(decayed ? 0.05f : 0.f);
    terms.params.push_back(decayed ? Tensor(params[t].data(), Shape{kParams[t].numel}, DType::kF32, Device::cpu())
                                   : Tensor());
  }

  // Without the probe: the decoded average of the step (the reference for the bits).
  Workers plain(2);
  GradientExchange plain_x(*be, ternary_policy, plain.all_views(), {0}, nullptr, xo);
  plain_x.apply_weight_decay(terms);
  plain_x.run(3);
  const std::vector<float> decoded = plain.slab[0];

  // With the probe.
  Workers w(2);
  const std::vector<std::vector<float>> before = w.slab;
  GradientExchange ternary(*be, ternary_policy, w.all_views(), {0}, nullptr, xo);
  ternary.apply_weight_decay(terms);
  if (pc.defer_decode) ternary.defer_decode();
  GradientExchange fp32(*be, fp32_policy, w.all_views(), {0}, nullptr, xo);
  QuantizationProbe probe(*be, ternary_policy, w.views(0), w.flat(0), &ternary.weight_decay());
  probe.reference(fp32, 3);
  EXPECT_TRUE(w.slab == before) << "the gradients after the fp32 exchange are those backward left";
  ternary.run(3);
  const QuantizationReport& q = probe.measure(ternary, 4);
  if (pc.defer_decode) {
    const std::vector<CodedAverage>* coded = ternary.coded_averages();
    ASSERT_NE(coded, nullptr);
    for (const CodedAverage& c : *coded) EXPECT_FALSE(c.defined()) << "measure() decoded everything";
  }
  EXPECT_TRUE(w.slab[0] == decoded) << "the probe's step decodes the bits of a step without it";

  // The definition: the fp32 mean (+ weight decay) against the decoded average, per ternary tensor.
  EXPECT_EQ(q.step, 4);
  ASSERT_EQ(q.tensors.size(), 2u);
  // The scheme's summaries of the step, per tensor (what the probe reports).
  std::map<std::pair<std::string, int>, double> summary;
  for (const TensorSummary& x : ternary.summaries()) summary[{x.quantity, x.tensor}] = x.value;
  double all_e2 = 0, all_r2 = 0;
  int64_t at = 0, k = 0;
  for (size_t t = 0; t < kParams.size(); ++t) {
    const TensorCodingPlan& plan = ternary_policy.tensors()[t];
    if (plan.coding != GradCoding::kTernary) {
      at += kParams[t].numel;
      continue;
    }
    double e2 = 0, r2 = 0;
    for (int64_t i = 0; i < kParams[t].numel; ++i) {
      const float mean = (before[0][at + i] + before[1][at + i]) / 2 + terms.coefficients[t] * params[t][i];
      e2 += double(decoded[at + i] - mean) * double(decoded[at + i] - mean);
      r2 += double(mean) * double(mean);
    }
    const TensorQuantization& got = q.tensors[k];
    EXPECT_EQ(got.name, kParams[t].name);
    EXPECT_EQ(got.numel, kParams[t].numel);
    EXPECT_NEAR(got.relative_error, std::sqrt(e2 / r2), 1e-4 * std::sqrt(e2 / r2));
    EXPECT_GT(got.relative_error, 0.05) << "ternary codes are not the fp32 average";
    ASSERT_EQ(summary.count({"scaler", static_cast<int>(t)}), 1u);
    const float s = static_cast<float>(summary.at({"scaler", static_cast<int>(t)}));
    EXPECT_EQ(got.scaler, s);
    if (plan.num_scalers == 1)  // the decoded average of two workers' codes is s * (c0 + c1) / 2, c in {-1, 0, 1}
      for (int64_t i = 0; i < kParams[t].numel; ++i) {
        const float m = 2 * decoded[at + i] / s;
        ASSERT_NEAR(m, std::round(m), 1e-5) << kParams[t].name << " element " << i << ": not a multiple of s/2";
        ASSERT_LE(std::fabs(m), 2.f + 1e-5f);
      }
    EXPECT_EQ(got.num_scalers, plan.num_scalers);
    ASSERT_EQ(summary.count({"zero_fraction", static_cast<int>(t)}), 1u);
    EXPECT_DOUBLE_EQ(got.nonzero_fraction, 1.0 - summary.at({"zero_fraction", static_cast<int>(t)}));
    EXPECT_GT(got.nonzero_fraction, 0.0);
    EXPECT_LT(got.nonzero_fraction, 1.0);
    all_e2 += e2;
    all_r2 += r2;
    at += kParams[t].numel;
    ++k;
  }
  EXPECT_NEAR(q.relative_error, std::sqrt(all_e2 / all_r2), 1e-4 * std::sqrt(all_e2 / all_r2));
  EXPECT_GE(q.seconds, 0.0);
}

TEST(QuantizationProbe, MeasuresTheDecodedAverageAgainstTheFp32Mean) {
  for (bool defer : {false, true})
    for (int64_t bucket : {0, 256}) check_probe({defer, bucket});
}

TEST(QuantizationProbe, RefusesGradientsOutsideTheSlab) {
  CompressionFlags f;
  f.grad_bits = 1;
  const CompressionPolicy pol(f, kParams);
  std::unique_ptr<Backend> be = make_backend("cpu", BackendOptions{});
  Workers w(2);
  std::vector<Tensor> views = w.views(0);
  views[2] = w.views(1)[2];  // another worker's slab
  try {
    QuantizationProbe probe(*be, pol, views, w.flat(0), nullptr);
    FAIL() << "a view outside the slab was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not an f32 view of the gradient slab"), std::string::npos) << e.what();
  }
}

// ---- through the Trainer --------------------------------------------------------------------------------------
struct QuantizationProbeTrainerData {
  static constexpr const char* kTag = "tg_probe";
  static constexpr int kTrainCount = 1024, kTrainShards = 2, kTestCount = 0;
};

class QuantizationProbeTrainer : public testing::FashionMnistTrainerTest<QuantizationProbeTrainerData> {
 protected:
  TrainConfig config(const std::string& name) const {
    TrainConfig c = small_lenet(name);
    c.save_iter = 100;
    c.num_preprocess_threads = 1;
    c.log_every = 6;
    return c;
  }
  // The probe lines of a metrics file: step -> (relative error, non-zero fraction, tensor names).
  struct Probe {
    int64_t step;
    double error, nonzero;
    std::vector<std::string> names;
    std::vector<double> tensor_errors;
  };
  static std::vector<Probe> probes(const std::string& path) {
    std::vector<Probe> out;
    std::ifstream in(path);
    std::string line;
    auto number = [](const std::string& s, const std::string& key, size_t from = 0) {
      const size_t at = s.find("\"" + key + "\": ", from);
      return at == std::string::npos ? NAN : std::stod(s.substr(at + key.size() + 4));
    };
    while (std::getline(in, line)) {
      if (line.find("\"quantization\": true") == std::string::npos) continue;
      const size_t tensors = line.find("\"tensors\"");
      Probe p{static_cast<int64_t>(number(line, "step")),
              number(line, "relative_error"),
              number(line, "nonzero_fraction"),
              {},
              {}};
      for (size_t at = line.find("\"name\": \"", tensors); at != std::string::npos;
           at = line.find("\"name\": \"", at + 1)) {
        p.names.push_back(line.substr(at + 9, line.find('"', at + 9) - at - 9));
        p.tensor_errors.push_back(number(line, "relative_error", at));
      }
      out.push_back(p);
    }
    return out;
  }
};

// Probes at steps 4, 8, 12 leave the run's bits as they are: one replica of two workers, and two CPU replicas
// (a thread group: their exchanges overlap backward on the other steps), with error feedback and per-bucket
// scalers; every ternary tensor is reported (LeNet with the logits in fp32: conv1, conv2, fc3 weights and biases).
TEST_F(QuantizationProbeTrainer, ProbesLeaveTheRunsBitsAndReportEveryTernaryTensor) {
  for (int replicas : {1, 2}) {
    SCOPED_TRACE(::testing::Message() << replicas << " replica(s)");
    TrainConfig plain = config("plain" + std::to_string(replicas));
    plain.cpu_replicas = replicas;
    plain.threads = replicas;
    plain.bucket_mb = 0.05;  // several buckets
    plain.error_feedback = true;
    plain.scaler_bucket = 256;
    TrainConfig probed = plain;
    probed.train_dir += "_probed";
    probed.quantization_error_every = 4;
    probed.metrics_jsonl = (root_ / ("m" + std::to_string(replicas) + ".jsonl")).string();
    const TrainResult a = Trainer(plain).run();
    const TrainResult b = Trainer(probed).run();
    EXPECT_EQ(b.steps_done, 12);
    EXPECT_EQ(a.parameter_digest, b.parameter_digest) << "a probe changes no bit of the run";
    const std::vector<Probe> p = probes(probed.metrics_jsonl);
    ASSERT_EQ(p.size(), 3u);
    for (size_t k = 0; k < p.size(); ++k) {
      EXPECT_EQ(p[k].step, 4 * static_cast<int64_t>(k + 1));
      EXPECT_EQ(p[k].names, (std::vector<std::string>{"conv1/weights", "conv1/biases", "conv2/weights", "conv2/biases",
                                                      "fc3/weights", "fc3/biases"}));
      EXPECT_GT(p[k].error, 0.0);
      EXPECT_LT(p[k].error, 10.0);
      EXPECT_GT(p[k].nonzero, 0.0);
      EXPECT_LE(p[k].nonzero, 1.0);
    }
  }
}

// During an fp32 warm-up nothing is ternary: no probe; after it, the probed steps report.
TEST_F(QuantizationProbeTrainer, NoProbeDuringTheFp32WarmUp) {
  TrainConfig c = config("warm");
  c.fp32_warmup_steps = 6;
  c.quantization_error_every = 2;
  c.metrics_jsonl = (root_ / "warm.jsonl").string();
  Trainer(c).run();
  std::vector<int64_t> steps;
  for (const Probe& p : probes(c.metrics_jsonl)) steps.push_back(p.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{8, 10, 12}));
}

// The lever the probe is for: a scaler per 256 elements instead of one per tensor lowers the error of the averaged
// gradient. Without clipping (s = max|g|, where one large element sets the scaler of a whole tensor) by far at every
// probed step, most on the largest tensor (fc3/weights, 1.6M elements); with the paper's clipping at 2.5 sigma,
// which already bounds s, a little (the mean over the probes: the codes' variance s|g| - g^2 falls with s, what is
// clipped stays the same).
TEST_F(QuantizationProbeTrainer, PerBucketScalersLowerTheMeasuredError) {
  auto errors = [&](int64_t bucket, float clip) {
    TrainConfig c = config("bucket" + std::to_string(bucket) + "_" + std::to_string(clip > 0));
    c.scaler_bucket = bucket;
    c.clip_factor = clip;
    c.quantization_error_every = 3;
    c.metrics_jsonl = (root_ / ("b" + std::to_string(bucket) + "_" + std::to_string(clip > 0) + ".jsonl")).string();
    Trainer(c).run();
    return probes(c.metrics_jsonl);
  };
  const std::vector<Probe> tensor = errors(0, 0.f), bucket = errors(256, 0.f);
  ASSERT_EQ(tensor.size(), 4u);
  ASSERT_EQ(bucket.size(), 4u);
  for (size_t k = 0; k < tensor.size(); ++k) {
    SCOPED_TRACE(::testing::Message() << "step " << tensor[k].step);
    EXPECT_LT(bucket[k].error, 0.8 * tensor[k].error);
    ASSERT_EQ(tensor[k].names[4], "fc3/weights");
    EXPECT_LT(bucket[k].tensor_errors[4], 0.7 * tensor[k].tensor_errors[4]);
  }
  const std::vector<Probe> clipped = errors(0, 2.5f), clipped_bucket = errors(256, 2.5f);
  ASSERT_EQ(clipped_bucket.size(), 4u);
  double mean = 0, mean_bucket = 0;
  for (size_t k = 0; k < clipped.size(); ++k) {
    mean += clipped[k].error / 4;
    mean_bucket += clipped_bucket[k].error / 4;
    EXPECT_LT(clipped[k].error, tensor[k].error) << "clipping lowers the error too";
  }
  EXPECT_LT(mean_bucket, mean);
}

TEST_F(QuantizationProbeTrainer, BadFlagsAreOneLineNamingTheFlag) {
  auto message = [&](const TrainConfig& c) {
    try {
      Trainer t(c);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  TrainConfig fp32 = config("fp32");
  fp32.grad_bits = 32;
  fp32.clip_factor = 0;
  fp32.quantization_error_every = 5;
  EXPECT_EQ(message(fp32),
            "--quantization_error_every 5 measures ternary gradients (--grad_bits 1), not --grad_bits 32");
  TrainConfig none = config("none");
  none.exchange = "none";
  none.quantization_error_every = 5;
  EXPECT_EQ(message(none),
            "--quantization_error_every 5 compares the compressed exchange with its fp32 form: --exchange none "
            "compresses nothing");
  TrainConfig negative = config("negative");
  negative.quantization_error_every = -1;
  EXPECT_NE(message(negative).find("--quantization_error_every"), std::string::npos) << message(negative);
  EXPECT_FALSE(fs::exists(root_ / "fp32")) << "nothing written";
}

}  // namespace
}  // namespace tg

// Exchange dumps: one step's exchange written out by the trainer, and redone on the CPU from it (see the header).
#include "terngrad/exchange/exchange_dump.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "terngrad/core/atomic_file.h"
#include "terngrad/core/error.h"
#include "terngrad/core/json_value.h"
#include "terngrad/core/json_writer.h"
#include "terngrad/core/npy_file.h"
#include "terngrad/core/read_file.h"
#include "terngrad/exchange/gradient_exchange.h"
#include "terngrad/exchange/scheme_registry.h"

namespace tg {

namespace {
constexpr const char* kFormat = "terngrad exchange dump 1";
constexpr const char* kManifest = "exchange_dump.json";
constexpr double kOtherTolerance = 1e-6;  // fp32/fp16 tensors: relative to the largest magnitude

std::string file_in(const std::string& dir, const std::string& name) { return dir + "/" + name; }
std::string rank_file(const std::string& dir, int rank, const char* what) {
  return file_in(dir, fmt::format("rank{}_{}.npy", rank, what));
}

// Appends the tensors' elements (host copies of `be`'s f32 tensors) to `out`; an undefined tensor stands for zeros of
// like[i]'s size (a tensor without weight decay has no parameter tensor in the exchange's terms).
void append_host(Backend& be, const std::vector<Tensor>& ts, const std::vector<Tensor>& like, std::vector<float>& out) {
  TG_CHECK(ts.size() == like.size(), "exchange dump: {} tensors for {} gradients", ts.size(), like.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    const int64_t n = like[i].numel();
    const size_t at = out.size();
    out.resize(at + static_cast<size_t>(n), 0.f);
    if (!ts[i].defined() || n == 0) continue;
    TG_CHECK(ts[i].dtype() == DType::kF32 && ts[i].numel() == n, "exchange dump: tensor {} is not f32 of {} elements",
             ts[i].str(), n);
    be.copy(Tensor(out.data() + at, Shape{n}, DType::kF32, Device::cpu()), ts[i]);
  }
}

NpyArray read_shaped(const std::string& path, const std::vector<int64_t>& shape) {
  NpyArray a = read_npy_f32(path);
  if (a.shape != shape) {
    auto text = [](const std::vector<int64_t>& s) {
      std::string t;
      for (int64_t d : s) t += fmt::format("{}{}", t.empty() ? "" : " x ", d);
      return t.empty() ? std::string("a scalar") : t;
    };
    TG_THROW("{}: shape {}, the manifest says {}", path, text(a.shape), text(shape));
  }
  return a;
}
}  // namespace

int64_t ExchangeDumpManifest::total_elements() const {
  int64_t n = 0;
  for (const ParamInfo& p : tensors) n += p.numel;
  return n;
}

std::string ExchangeDumpManifest::to_json() const {
  std::vector<std::string> ts;
  for (const ParamInfo& p : tensors) ts.push_back(JsonObject().add("name", p.name).add("elements", p.numel).str());
  std::vector<double> wd(weight_decay.begin(), weight_decay.end());
  return JsonObject()
             .add("format", kFormat)
             .add("step", static_cast<int64_t>(step))
             .add("seed", std::to_string(seed))  // a string: every uint64 exactly
             .add("exchange", exchange)
             .add("grad_bits", static_cast<int64_t>(compression.grad_bits))
             .add("clip_factor", static_cast<double>(compression.clip_factor))
             .add("size_to_binarize", compression.size_to_binarize)
             .add("quantize_logits", compression.quantize_logits)
             .add("scaler_bucket", compression.scaler_bucket)
             .add("ranks", static_cast<int64_t>(ranks))
             .add("workers_per_rank", static_cast<int64_t>(workers_per_rank))
             .add_json("tensors", json_array(ts))
             .add("weight_decay", wd)
             .str() +
         "\n";
}

ExchangeDumpManifest ExchangeDumpManifest::from_json(const std::string& text, const std::string& what) {
  const JsonValue root = parse_json(text, what);
  root.as_object(what);
  auto member = [&](const char* key) -> const JsonValue& {
    const JsonValue* v = root.find(key);
    if (!v) TG_THROW("{}: no \"{}\"", what, key);
    return *v;
  };
  auto name = [&](const char* key) { return fmt::format("{}: \"{}\"", what, key); };
  if (member("format").as_string(name("format")) != kFormat)
    TG_THROW("{}: format \"{}\", this program reads \"{}\"", what, member("format").as_string(name("format")), kFormat);
  ExchangeDumpManifest m;
  const int64_t step = member("step").as_int64(name("step"));
  TG_CHECK(step >= 0 && step <= UINT32_MAX, "{}: step {} is not a 32-bit step", what, step);
  m.step = static_cast<uint32_t>(step);
  const std::string& seed = member("seed").as_string(name("seed"));
  TG_CHECK(!seed.empty() && seed.find_first_not_of("0123456789") == std::string::npos && seed.size() <= 20,
           "{}: seed \"{}\" is not an unsigned integer", what, seed);
  m.seed = std::stoull(seed);
  m.exchange = member("exchange").as_string(name("exchange"));
  m.compression.grad_bits = static_cast<int>(member("grad_bits").as_int64(name("grad_bits")));
  m.compression.clip_factor = static_cast<float>(member("clip_factor").as_double(name("clip_factor")));
  m.compression.size_to_binarize = member("size_to_binarize").as_int64(name("size_to_binarize"));
  m.compression.quantize_logits = member("quantize_logits").as_bool(name("quantize_logits"));
  m.compression.scaler_bucket = member("scaler_bucket").as_int64(name("scaler_bucket"));
  m.compression.validate();
  m.ranks = static_cast<int>(member("ranks").as_int64(name("ranks")));
  m.workers_per_rank = static_cast<int>(member("workers_per_rank").as_int64(name("workers_per_rank")));
  TG_CHECK(m.ranks >= 1 && m.ranks <= 4096 && m.workers_per_rank >= 1 && m.workers_per_rank <= 4096,
           "{}: {} ranks of {} workers is not a job", what, m.ranks, m.workers_per_rank);
  for (const JsonValue& t : member("tensors").as_array(name("tensors"))) {
    t.as_object(name("tensors"));
    const JsonValue *n = t.find("name"), *e = t.find("elements");
    TG_CHECK(n && e, "{}: a tensor without \"name\" or \"elements\"", what);
    m.tensors.push_back({n->as_string(name("tensors")), e->as_int64(name("tensors"))});
    TG_CHECK(m.tensors.back().numel >= 0, "{}: tensor {} has {} elements", what, m.tensors.back().name,
             m.tensors.back().numel);
  }
  TG_CHECK(!m.tensors.empty(), "{}: no tensors", what);
  for (const JsonValue& d : member("weight_decay").as_array(name("weight_decay")))
    m.weight_decay.push_back(static_cast<float>(d.as_double(name("weight_decay"))));
  TG_CHECK(m.weight_decay.empty() || m.weight_decay.size() == m.tensors.size(),
           "{}: {} weight decay coefficients for {} tensors", what, m.weight_decay.size(), m.tensors.size());
  return m;
}

void write_exchange_dump_inputs(const std::string& dir, int rank, Backend& be,
                                const std::vector<std::vector<Tensor>>& worker_grads,
                                const std::vector<Tensor>& params) {
  TG_CHECK(!worker_grads.empty(), "exchange dump: no workers");
  const std::vector<Tensor>& like = worker_grads[0];
  std::vector<float> all;
  for (const std::vector<Tensor>& g : worker_grads) append_host(be, g, like, all);
  const auto per_worker = static_cast<int64_t>(all.size() / worker_grads.size());
  write_npy(rank_file(dir, rank, "gradients"), all.data(), DType::kF32,
            {static_cast<int64_t>(worker_grads.size()), per_worker});
  if (params.empty()) return;
  std::vector<float> p;
  append_host(be, params, like, p);
  write_npy(rank_file(dir, rank, "params"), p.data(), DType::kF32, {per_worker});
}

void write_exchange_dump_average(const std::string& dir, int rank, Backend& be, const std::vector<Tensor>& average) {
  std::vector<float> a;
  append_host(be, average, average, a);
  write_npy(rank_file(dir, rank, "average"), a.data(), DType::kF32, {static_cast<int64_t>(a.size())});
}

void write_exchange_dump_manifest(const std::string& dir, const ExchangeDumpManifest& m) {
  AtomicFile f(file_in(dir, kManifest), AtomicFile::TempName::kBeside, 1 << 16);
  f.write(m.to_json());
  f.commit();
}

std::string ExchangeReplayResult::summary() const {
  std::string s = fmt::format(
      "exchange replay: {} ternary-coded elements per rank, {} different; {} other elements per rank, worst relative "
      "difference {:.3g} (tolerance {:g})",
      ternary_elements, ternary_mismatches, other_elements, worst_other, kOtherTolerance);
  if (!first_mismatch.empty()) s += "; first difference: " + first_mismatch;
  return s + (passed() ? ": PASS" : ": FAIL");
}

ExchangeReplayResult replay_exchange_dump(const std::string& dir) {
  const std::string manifest_path = file_in(dir, kManifest);
  const ExchangeDumpManifest m =
      ExchangeDumpManifest::from_json(read_file(manifest_path, " (is this an --exchange_dump folder?)"), manifest_path);
  const CompressionPolicy policy(m.compression, m.tensors);
  const int L = m.workers_per_rank, N = m.ranks * L;
  const int64_t T = m.total_elements();
  // Every rank's workers as the local workers of one replica: worker p * L + l keeps its global index.
  std::vector<std::vector<float>> grads(static_cast<size_t>(N));
  for (int r = 0; r < m.ranks; ++r) {
    const NpyArray a = read_shaped(rank_file(dir, r, "gradients"), {L, T});
    for (int l = 0; l < L; ++l)
      grads[static_cast<size_t>(r * L + l)].assign(a.data.begin() + l * T, a.data.begin() + (l + 1) * T);
  }
  std::vector<std::vector<Tensor>> views(static_cast<size_t>(N));
  for (int w = 0; w < N; ++w) {
    int64_t at = 0;
    for (const ParamInfo& p : m.tensors) {
      views[static_cast<size_t>(w)].emplace_back(grads[static_cast<size_t>(w)].data() + at, Shape{p.numel}, DType::kF32,
                                                 Device::cpu());
      at += p.numel;
    }
  }
  std::unique_ptr<Backend> be = make_backend("cpu");
  ExchangeOptions xo;
  check_exchange_value(m.exchange, "the manifest's exchange");
  xo.exchange = m.exchange;
  xo.seed = m.seed;
  xo.overlap = false;
  GradientExchange ex(*be, policy, views, {0}, ExchangeComms{}, xo);
  check_replayable(ex.scheme_name(), false);
  NpyArray params;
  if (!m.weight_decay.empty()) {
    params = read_shaped(rank_file(dir, 0, "params"), {T});
    WeightDecayTerms terms;
    int64_t at = 0;
    for (size_t t = 0; t < m.tensors.size(); ++t) {
      const int64_t n = m.tensors[t].numel;
      terms.coefficients.push_back(m.weight_decay[t]);
      terms.params.push_back(
          m.weight_decay[t] != 0.f ? Tensor(params.data.data() + at, Shape{n}, DType::kF32, Device::cpu()) : Tensor());
      at += n;
    }
    ex.apply_weight_decay(std::move(terms));
  }
  ex.run(m.step);
  const std::vector<float>& replay = grads[0];
  ExchangeReplayResult res;
  for (const TensorCodingPlan& t : policy.tensors())
    (t.coding == GradCoding::kTernary ? res.ternary_elements : res.other_elements) += t.numel;
  double scale = 0;
  for (float v : replay) scale = std::max(scale, static_cast<double>(std::fabs(v)));
  for (int r = 0; r < m.ranks; ++r) {
    const NpyArray dump = read_shaped(rank_file(dir, r, "average"), {T});
    int64_t at = 0;
    for (const TensorCodingPlan& t : policy.tensors()) {
      for (int64_t i = 0; i < t.numel; ++i) {
        const float a = dump.data[static_cast<size_t>(at + i)], b = replay[static_cast<size_t>(at + i)];
        bool differs = false;
        if (t.coding == GradCoding::kTernary) {
          differs = std::memcmp(&a, &b, sizeof(float)) != 0;
          res.ternary_mismatches += differs ? 1 : 0;
        } else {
          const double d = std::isfinite(a) && std::isfinite(b)
                               ? std::fabs(static_cast<double>(a) - b) / std::max(scale, 1e-30)
                               : std::numeric_limits<double>::infinity();
          res.worst_other = std::max(res.worst_other, d);
          differs = d > kOtherTolerance;
        }
        if (differs && res.first_mismatch.empty())
          res.first_mismatch = fmt::format("rank {} {}[{}]: dump {:.9g}, replay {:.9g}", r, t.name, i, a, b);
      }
      at += t.numel;
    }
  }
  return res;
}

}  // namespace tg

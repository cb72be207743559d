// The optimizer update from a TernGrad average still coded (Backend::optimizer_update_coded, Optimizer::apply's
// coded averages): against its definition, the decode into a gradient tensor (ternary_decode_gathered /
// ternary_decode_sums) followed by optimizer_update, bit for bit:
//   - the CPU op for every optimizer kind, with and without the moving average, gathered codes of 1, 2, 3, 127
//     and 130 workers (byte lanes and the plain loop beyond 127) and int8 sums, sizes around the op's 4096-element
//     tiles and the decode kernels' 64-element steps, 1 and 2 threads, every instruction-set path, scalers 0, NaN
//     and Inf; outputs followed by guard bytes that must survive;
//   - bad arguments: one line naming what is wrong;
//   - Optimizer::apply with coded averages for some parameters (first, middle, last; fused slab path and the
//     per-tensor path) against decoding them into the gradient slab first;
//   - many updates in one call (optimizer_update_coded_many): each one's bits, a bad item refusing the whole call;
//   - the CUDA op against the CPU's, one tensor and tables (SKIPPED without a CUDA device).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "common/cuda_test_fixture.h"
#include "common/error_of.h"
#include "common/random_inputs.h"
#include "terngrad/backend/backend.h"
#include "terngrad/backend/ternary_codec.h"
#include "terngrad/core/buffer.h"
#include "terngrad/core/error.h"
#include "terngrad/core/parallel.h"
#include "terngrad/core/slab.h"
#include "terngrad/math/ternary_math.h"
#include "terngrad/optim/moving_average.h"
#include "terngrad/optim/optimizer.h"

namespace tg {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr size_t kGuard = 16;  // floats after every output
constexpr float kGuardValue = -12345.5f;

const OptimizerKind kKinds[] = {OptimizerKind::kGd, OptimizerKind::kMomentum, OptimizerKind::kAdam,
                                OptimizerKind::kRmsprop};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b, std::string* where) {
  if (a.size() != b.size()) {
    *where = "sizes differ";
    return false;
  }
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      *where = "element " + std::to_string(i) + ": " + std::to_string(a[i]) + " vs " + std::to_string(b[i]);
      return false;
    }
  return true;
}

OptimizerStep step_of(OptimizerKind kind, bool ema) {
  OptimizerStep s;
  s.kind = kind;
  s.lr = 0.0625f;
  s.momentum = 0.9f;
  s.beta1 = 0.9f, s.beta2 = 0.999f, s.epsilon = 1e-8f;
  s.decay = 0.9f;
  s.ema_decay = ema ? 0.75f : -1.f;
  return s;
}

// The update's state on the host: w, two slots, the moving average, each followed by guard values.
struct State {
  std::vector<float> w, s1, s2, ema;
  explicit State(int64_t n) {
    w = testing::normal_floats(n, 11, 0.5f);
    s1 = testing::normal_floats(n, 12, 0.1f);
    s2 = testing::normal_floats(n, 13, 0.1f);
    for (float& v : s2) v = std::fabs(v) + 0.5f;  // adam's v and rmsprop's ms are positive
    ema = testing::normal_floats(n, 14, 0.5f);
    for (std::vector<float>* v : {&w, &s1, &s2, &ema}) v->insert(v->end(), kGuard, kGuardValue);
  }
  static Tensor t(std::vector<float>& v, int64_t n) { return Tensor(v.data(), Shape{n}, DType::kF32, Device::cpu()); }
  bool guards_intact(int64_t n) const {
    for (const std::vector<float>* v : {&w, &s1, &s2, &ema})
      for (size_t i = static_cast<size_t>(n); i < v->size(); ++i)
        if (std::memcmp(&(*v)[i], &kGuardValue, sizeof(float)) != 0) return false;
    return true;
  }
};

// got's w, slots and moving average have want's bits, and its guards are intact.
void expect_same_state(const State& got, const State& want, int64_t n) {
  std::string where;
  EXPECT_TRUE(same_bits(got.w, want.w, &where)) << "w: " << where;
  EXPECT_TRUE(same_bits(got.s1, want.s1, &where)) << "slot 1: " << where;
  EXPECT_TRUE(same_bits(got.s2, want.s2, &where)) << "slot 2: " << where;
  EXPECT_TRUE(same_bits(got.ema, want.ema, &where)) << "moving average: " << where;
  EXPECT_TRUE(got.guards_intact(n));
}

// The codes of `workers` workers of n elements, gathered at `stride` bytes, and their int8 sums.
struct Codes {
  int64_t stride;
  std::vector<uint8_t> gathered;
  std::vector<int8_t> sums;
  Codes(int64_t n, int workers) : stride((n + 3) / 4 + 3) {  // bytes between the blocks that must not be read
    gathered = testing::random_bytes(static_cast<size_t>((workers - 1) * stride + (n + 3) / 4), 17 + workers);
    sums.assign(static_cast<size_t>(n), 0);
    for (int64_t i = 0; i < n; ++i) {
      int s = 0;
      for (int w = 0; w < workers; ++w) s += unpack_ternary(gathered.data() + w * stride, i);
      sums[i] = static_cast<int8_t>(workers <= 127 ? s : 0);
    }
  }
};

// One case on the CPU backend: the coded update against decode then update.
void check_cpu_case(Backend& be, OptimizerKind kind, bool ema, int64_t n, int workers, bool from_sums, float s) {
  const std::string what = std::string(enum_name(kind)) + (ema ? " +ema" : "") + " n=" + std::to_string(n) +
                           " workers=" + std::to_string(workers) + (from_sums ? " sums" : " gathered") +
                           " s=" + std::to_string(s);
  SCOPED_TRACE(what);
  Codes codes(n, workers);
  float scaler = s;
  const Tensor sc(&scaler, Shape{1}, DType::kF32, Device::cpu());
  const Tensor gathered(codes.gathered.data(), Shape{static_cast<int64_t>(codes.gathered.size())}, DType::kU8,
                        Device::cpu());
  const Tensor sums(codes.sums.data(), Shape{n}, DType::kI8, Device::cpu());
  const OptimizerStep step = step_of(kind, ema);

  State want(n), got(n);
  std::vector<float> g(static_cast<size_t>(n));
  const Tensor gt(g.data(), Shape{n}, DType::kF32, Device::cpu());
  if (from_sums)
    be.ternary_decode_sums(sums, sc, workers, gt);
  else
    be.ternary_decode_gathered(gathered, codes.stride, workers, sc, gt);
  be.optimizer_update(step, State::t(want.w, n), gt, State::t(want.s1, n), State::t(want.s2, n),
                      ema ? State::t(want.ema, n) : Tensor());

  CodedAverage c;
  if (from_sums) {
    c.code_sums = sums;
  } else {
    c.gathered = gathered;
    c.stride = codes.stride;
  }
  c.scaler = sc;
  c.num_workers = workers;
  be.optimizer_update_coded(step, State::t(got.w, n), c, State::t(got.s1, n), State::t(got.s2, n),
                            ema ? State::t(got.ema, n) : Tensor());
  expect_same_state(got, want, n);
}

TEST(CodedUpdateCpu, MatchesDecodeThenUpdate) {
  for (int threads : {1, 2}) {
    auto be = make_backend("cpu", BackendOptions{threads});
    be->bind_thread();
    for (OptimizerKind kind : kKinds)
      for (bool ema : {false, true})
        for (int64_t n :
             {int64_t{1}, int64_t{3}, int64_t{64}, int64_t{4095}, int64_t{4096}, int64_t{4097}, int64_t{40000 + 5}})
          for (int workers : {1, 2, 3}) {
            check_cpu_case(*be, kind, ema, n, workers, false, 3.25e-3f);
            check_cpu_case(*be, kind, ema, n, workers, true, 3.25e-3f);
          }
  }
  set_compute_threads(2);
}

TEST(CodedUpdateCpu, EveryIsaManyWorkersAndSpecialScalers) {
  auto be = make_backend("cpu", BackendOptions{2});
  be->bind_thread();
  for (CodecIsa isa : {CodecIsa::kGeneric, CodecIsa::kAvx2, CodecIsa::kAvx512}) {
    const CodecIsa used = set_ternary_codec_isa(isa);
    SCOPED_TRACE(std::string("isa ") + enum_name(used));
    for (int64_t n : {int64_t{5}, int64_t{4096 * 3 + 70}}) {
      for (int workers : {127, 130}) check_cpu_case(*be, OptimizerKind::kMomentum, true, n, workers, false, 0.5f);
      check_cpu_case(*be, OptimizerKind::kAdam, true, n, 127, true, 0.5f);
      for (float s : {0.f, kNaN, kInf}) {
        check_cpu_case(*be, OptimizerKind::kMomentum, true, n, 2, false, s);
        check_cpu_case(*be, OptimizerKind::kRmsprop, false, n, 3, true, s);
      }
    }
  }
  set_ternary_codec_isa(CodecIsa::kAuto);
}

// A coded average in parts (the hierarchical scheme's: part p's codes of every worker, or its sums, in a block
// of its own `block` bytes on): the bits of decoding each part into a gradient and then updating; a 2-D w.
TEST(CodedUpdateCpu, InPartsMatchesDecodingEachPart) {
  auto be = make_backend("cpu", BackendOptions{2});
  be->bind_thread();
  for (int64_t n : {int64_t{10}, int64_t{4097}, int64_t{9002}})
    for (int parts : {2, 3})
      for (bool from_sums : {false, true}) {
        SCOPED_TRACE("n=" + std::to_string(n) + " parts=" + std::to_string(parts) + (from_sums ? " sums" : ""));
        const int workers = 3;
        const int64_t part = (n + parts - 1) / parts, stride = (part + 3) / 4 + 1;
        const int64_t block = from_sums ? part + 5 : workers * stride + 7;
        std::vector<uint8_t> bytes = testing::random_bytes(static_cast<size_t>(parts * block), 41);
        if (from_sums)
          for (uint8_t& b : bytes) b = static_cast<uint8_t>(static_cast<int8_t>(b % 7) - 3);  // sums of 3 workers
        const Tensor all(bytes.data(), Shape{parts * block}, from_sums ? DType::kI8 : DType::kU8, Device::cpu());
        float scaler = 2.5e-3f;
        const Tensor sc(&scaler, Shape{1}, DType::kF32, Device::cpu());
        const OptimizerStep step = step_of(OptimizerKind::kAdam, true);
        State want(n), got(n);
        std::vector<float> g(static_cast<size_t>(n));
        const Tensor gt(g.data(), Shape{n}, DType::kF32, Device::cpu());
        for (int p = 0; p * part < n; ++p) {
          const int64_t b = p * part, count = std::min(part, n - b);
          if (from_sums)
            be->ternary_decode_sums(all.slice0(p * block, p * block + count), sc, workers, gt.slice0(b, b + count));
          else
            be->ternary_decode_gathered(all.slice0(p * block, all.numel()), stride, workers, sc,
                                        gt.slice0(b, b + count));
        }
        be->optimizer_update(step, State::t(want.w, n), gt, State::t(want.s1, n), State::t(want.s2, n),
                             State::t(want.ema, n));
        CodedAverage c;
        (from_sums ? c.code_sums : c.gathered) = all;
        c.stride = from_sums ? 0 : stride;
        c.scaler = sc;
        c.num_workers = workers;
        c.part = part;
        c.part_stride = block;
        const Tensor w2(got.w.data(), Shape{2, n / 2}, DType::kF32, Device::cpu());
        be->optimizer_update_coded(step, n % 2 == 0 ? w2 : State::t(got.w, n), c, State::t(got.s1, n),
                                   State::t(got.s2, n), State::t(got.ema, n));
        expect_same_state(got, want, n);
        // Parts whose codes lie beyond the view, and negative parts, are refused before anything is written.
        State keep(n);
        const std::vector<float> before(keep.w.begin(), keep.w.begin() + n);
        CodedAverage bad = c;
        bad.part_stride = parts * block;
        EXPECT_FALSE(testing::error_of([&] {
                       be->optimizer_update_coded(step, State::t(keep.w, n), bad, State::t(keep.s1, n),
                                                  State::t(keep.s2, n), State::t(keep.ema, n));
                     }).empty());
        bad = c;
        bad.part = -1;
        EXPECT_NE(testing::error_of([&] {
                    be->optimizer_update_coded(step, State::t(keep.w, n), bad, State::t(keep.s1, n),
                                               State::t(keep.s2, n), State::t(keep.ema, n));
                  }).find("parts of -1 elements"),
                  std::string::npos);
        EXPECT_EQ(std::vector<float>(keep.w.begin(), keep.w.begin() + n), before) << "a refused update wrote w";
      }
}

// Many coded updates in one call (optimizer_update_coded_many): 40 tensors of odd sizes, gathered codes and int8
// sums alternating, every fourth in 3 parts (the hierarchical scheme's form), 46 parts in all (two CUDA tables).
struct ManyCase {
  static constexpr int kTensors = 40, kWorkers = 3;
  std::vector<int64_t> n, part, stride, block;
  std::vector<std::vector<uint8_t>> codes;  // per tensor: gathered bytes or int8 sums, all its parts
  std::vector<State> state;
  float scaler = 2.75e-3f;
  ManyCase() {
    for (int k = 0; k < kTensors; ++k) {
      n.push_back(1 + (k * 517) % 5003);
      const int parts = k % 4 == 3 ? 3 : 1;
      part.push_back(parts == 1 ? 0 : (n[k] + parts - 1) / parts);
      const int64_t per = parts == 1 ? n[k] : part[k];
      stride.push_back((per + 3) / 4 + 1);
      block.push_back(sums(k) ? per + 5 : kWorkers * stride[k] + 7);
      codes.push_back(testing::random_bytes(static_cast<size_t>(parts * block[k]), 50 + k));
      if (sums(k))
        for (uint8_t& b : codes.back()) b = static_cast<uint8_t>(static_cast<int8_t>(b % 7) - 3);
      state.emplace_back(n[k]);
    }
  }
  bool sums(int k) const { return k % 2 == 1; }
  // Tensor k's coded average over `bytes` (its codes wherever they live) and scaler `sc`.
  CodedAverage average(int k, const Tensor& bytes, const Tensor& sc) const {
    CodedAverage c;
    (sums(k) ? c.code_sums : c.gathered) = bytes;
    c.stride = sums(k) ? 0 : stride[k];
    c.scaler = sc;
    c.num_workers = kWorkers;
    c.part = part[k];
    c.part_stride = part[k] > 0 ? block[k] : 0;
    if (part[k] == 0 && sums(k)) c.code_sums = bytes.slice0(0, n[k]);
    return c;
  }
  Tensor bytes(int k) {
    return Tensor(codes[k].data(), Shape{static_cast<int64_t>(codes[k].size())}, sums(k) ? DType::kI8 : DType::kU8,
                  Device::cpu());
  }
  std::vector<CodedUpdateItem> cpu_items(const Tensor& sc) {
    std::vector<CodedUpdateItem> items;
    for (int k = 0; k < kTensors; ++k)
      items.push_back({State::t(state[k].w, n[k]), average(k, bytes(k), sc), State::t(state[k].s1, n[k]),
                       State::t(state[k].s2, n[k]), State::t(state[k].ema, n[k])});
    return items;
  }
};

TEST(CodedUpdateCpu, ManyGivesEachUpdatesBitsAndRefusesAllOrNothing) {
  auto be = make_backend("cpu", BackendOptions{2});
  be->bind_thread();
  const OptimizerStep step = step_of(OptimizerKind::kAdam, true);
  ManyCase one, many;
  const Tensor sc1(&one.scaler, Shape{1}, DType::kF32, Device::cpu()),
      sc2(&many.scaler, Shape{1}, DType::kF32, Device::cpu());
  for (const CodedUpdateItem& it : one.cpu_items(sc1))
    be->optimizer_update_coded(step, it.w, it.g, it.s1, it.s2, it.ema);
  const std::vector<CodedUpdateItem> items = many.cpu_items(sc2);
  be->optimizer_update_coded_many(step, items.data(), static_cast<int>(items.size()));
  for (int k = 0; k < ManyCase::kTensors; ++k) {
    SCOPED_TRACE("tensor " + std::to_string(k));
    expect_same_state(many.state[k], one.state[k], many.n[k]);
  }
  // A bad item among good ones (codes beyond its view): nothing is written, the earlier items' included.
  ManyCase keep;
  const Tensor sc3(&keep.scaler, Shape{1}, DType::kF32, Device::cpu());
  std::vector<CodedUpdateItem> bad = keep.cpu_items(sc3);
  bad[30].g.part_stride = 10 * keep.block[30] + 1;
  bad[30].g.part = keep.part[30] > 0 ? keep.part[30] : 1;
  const ManyCase fresh;
  EXPECT_FALSE(testing::error_of([&] {
                 be->optimizer_update_coded_many(step, bad.data(), static_cast<int>(bad.size()));
               }).empty());
  for (int k = 0; k < ManyCase::kTensors; ++k)
    ASSERT_EQ(keep.state[k].w, fresh.state[k].w) << "a refused call wrote tensor " << k;
  EXPECT_NO_THROW(be->optimizer_update_coded_many(step, nullptr, 0));
}

// Expects `f` to throw an Error whose message contains `needle`.
void expect_error(const std::function<void()>& f, const std::string& needle) {
  const std::string e = testing::error_of(f);
  EXPECT_NE(e.find(needle), std::string::npos) << "message: " << e;
}

TEST(CodedUpdateCpu, BadArgumentsAreErrors) {
  auto be = make_backend("cpu", BackendOptions{1});
  const int64_t n = 100;
  State st(n);
  Codes codes(n, 2);
  float scaler = 0.5f, two[2] = {0.5f, 0.5f};
  const Tensor w = State::t(st.w, n), s1 = State::t(st.s1, n);
  const Tensor gathered(codes.gathered.data(), Shape{static_cast<int64_t>(codes.gathered.size())}, DType::kU8,
                        Device::cpu());
  const Tensor sums(codes.sums.data(), Shape{n}, DType::kI8, Device::cpu());
  const OptimizerStep step = step_of(OptimizerKind::kMomentum, false);
  const std::vector<float> before(st.w.begin(), st.w.begin() + n);
  auto coded = [&](bool g, bool s) {
    CodedAverage c;
    if (g) {
      c.gathered = gathered;
      c.stride = codes.stride;
    }
    if (s) c.code_sums = sums;
    c.scaler = Tensor(&scaler, Shape{1}, DType::kF32, Device::cpu());
    c.num_workers = 2;
    return c;
  };
  expect_error([&] { be->optimizer_update_coded(step, w, coded(true, true), s1, Tensor(), Tensor()); },
               "exactly one of gathered codes and code sums");
  expect_error([&] { be->optimizer_update_coded(step, w, coded(false, false), s1, Tensor(), Tensor()); },
               "exactly one of gathered codes and code sums");
  CodedAverage c = coded(true, false);
  c.scaler = Tensor();
  expect_error([&] { be->optimizer_update_coded(step, w, c, s1, Tensor(), Tensor()); }, "has no scaler");
  c = coded(true, false);
  c.scaler = Tensor(two, Shape{2}, DType::kF32, Device::cpu());
  expect_error([&] { be->optimizer_update_coded(step, w, c, s1, Tensor(), Tensor()); }, "scaler");
  c = coded(true, false);
  c.num_workers = 3;  // a third block beyond the buffer
  expect_error([&] { be->optimizer_update_coded(step, w, c, s1, Tensor(), Tensor()); }, "need");
  c.num_workers = 0;
  expect_error([&] { be->optimizer_update_coded(step, w, c, s1, Tensor(), Tensor()); }, "0 workers");
  c = coded(false, true);
  c.code_sums = sums.slice0(0, n - 1);
  expect_error([&] { be->optimizer_update_coded(step, w, c, s1, Tensor(), Tensor()); }, "code sums");
  expect_error([&] { be->optimizer_update_coded(step, w, coded(true, false), Tensor(), Tensor(), Tensor()); },
               "first slot missing");
  OptimizerStep with_ema = step;
  with_ema.ema_decay = 0.5f;
  expect_error([&] { be->optimizer_update_coded(with_ema, w, coded(true, false), s1, Tensor(), Tensor()); },
               "moving average missing");
  EXPECT_EQ(std::vector<float>(st.w.begin(), st.w.begin() + n), before) << "a refused update wrote w";
}

// ---- Optimizer::apply with coded averages -------------------------------------------------------------------
// Four parameters with padding between them; the gradient slab of the same layout (or reordered).
struct Model {
  Slab params, grads;
  Model(Backend& be, bool reorder) {
    const std::vector<std::pair<std::string, int64_t>> shapes = {{"a", 5000}, {"b", 7}, {"c", 9001}, {"d", 33}};
    for (const auto& [name, n] : shapes) params.add(name, Shape{n});
    for (size_t k = 0; k < shapes.size(); ++k) {
      const auto& p = shapes[reorder ? shapes.size() - 1 - k : k];
      grads.add(p.first, Shape{p.second});
    }
    params.allocate(be.allocator());
    grads.allocate(be.allocator());
    be.zero(params.flat_bytes());
    be.zero(grads.flat_bytes());
    for (int i = 0; i < params.size(); ++i) {
      const Tensor t = params.view(i);
      const std::vector<float> v = testing::normal_floats(t.numel(), 30 + i, 0.5f);
      std::memcpy(t.data<float>(), v.data(), v.size() * sizeof(float));
    }
  }
};

TEST(CodedUpdateOptimizer, ApplyWithCodedAveragesMatchesDecodingFirst) {
  auto be = make_backend("cpu", BackendOptions{2});
  be->bind_thread();
  const int workers = 3;
  for (OptimizerKind kind : kKinds)
    for (bool reorder : {false, true})
      for (const std::vector<int>& coded_ones : std::vector<std::vector<int>>{{0}, {2}, {3}, {0, 2}, {1, 3}, {}}) {
        SCOPED_TRACE(std::string(enum_name(kind)) + (reorder ? " reordered grads" : "") + " coded " +
                     std::to_string(coded_ones.size()));
        Model one(*be, reorder), two(*be, reorder);
        OptimizerOptions o;
        o.optimizer = enum_name(kind);
        Optimizer a(o, one.params, *be), b(o, two.params, *be);
        ExponentialMovingAverage ea(*be, std::vector<const Slab*>{&one.params}, 0.99f),
            eb(*be, std::vector<const Slab*>{&two.params}, 0.99f);
        std::vector<Codes> codes;
        std::vector<float> scalers(4);
        for (int i = 0; i < 4; ++i) {
          codes.emplace_back(one.params.view(i).numel(), workers);
          scalers[i] = 1e-2f * static_cast<float>(i + 1);
        }
        for (int step = 0; step < 3; ++step) {
          std::vector<CodedAverage> coded(4);
          for (int i = 0; i < 4; ++i) {
            const std::string& name = one.params.entry(i).name;
            const std::vector<float> g = testing::normal_floats(one.params.view(i).numel(), 50 + 7 * step + i, 0.1f);
            for (Slab* s : {&one.grads, &two.grads}) std::memcpy(s->view(name).data<float>(), g.data(), g.size() * 4);
            const bool is_coded = std::find(coded_ones.begin(), coded_ones.end(), i) != coded_ones.end();
            if (!is_coded) continue;
            CodedAverage& c = coded[i];
            c.gathered = Tensor(codes[i].gathered.data(), Shape{static_cast<int64_t>(codes[i].gathered.size())},
                                DType::kU8, Device::cpu());
            c.stride = codes[i].stride;
            c.scaler = Tensor(&scalers[i], Shape{1}, DType::kF32, Device::cpu());
            c.num_workers = workers;
            be->ternary_decode_gathered(c.gathered, c.stride, workers, c.scaler, two.grads.view(name));
            std::memset(one.grads.view(name).data<float>(), 0xFF, g.size() * 4);  // NaNs: must not be read
          }
          a.apply(*be, one.params, one.grads, step, 0.05f, &ea, &coded);
          b.apply(*be, two.params, two.grads, step, 0.05f, &eb);
        }
        std::string where;
        for (int i = 0; i < 4; ++i) {
          const Tensor x = one.params.view(i), y = two.params.view(i);
          const std::vector<float> vx(x.data<float>(), x.data<float>() + x.numel()),
              vy(y.data<float>(), y.data<float>() + y.numel());
          EXPECT_TRUE(same_bits(vx, vy, &where)) << one.params.entry(i).name << ": " << where;
          const Tensor ex = ea.average(one.params.entry(i).name), ey = eb.average(one.params.entry(i).name);
          EXPECT_TRUE(same_bits(std::vector<float>(ex.data<float>(), ex.data<float>() + ex.numel()),
                                std::vector<float>(ey.data<float>(), ey.data<float>() + ey.numel()), &where))
              << "average of " << one.params.entry(i).name << ": " << where;
        }
      }
}

TEST(CodedUpdateOptimizer, WrongNumberOfCodedAveragesIsAnError) {
  auto be = make_backend("cpu", BackendOptions{1});
  Model m(*be, false);
  Optimizer opt(OptimizerOptions{}, m.params, *be);
  std::vector<CodedAverage> three(3);
  expect_error([&] { opt.apply(*be, m.params, m.grads, 0, 0.1f, nullptr, &three); },
               "3 coded averages given for 4 parameters");
}

// ---- CUDA against the CPU ---------------------------------------------------------------------------------
TEST(CodedUpdateCuda, MatchesCpuBitForBit) {
  cuda_test::Backends& backends = cuda_test::backends();
  if (!backends.cuda) GTEST_SKIP() << backends.skip;
  Backend* gpu = backends.cuda.get();
  auto cpu = make_backend("cpu", BackendOptions{2});
  cpu->bind_thread();
  for (OptimizerKind kind : kKinds)
    for (bool from_sums : {false, true})
      for (int64_t n : {int64_t{1}, int64_t{4097}, int64_t{1000003}}) {
        const int workers = 3;
        SCOPED_TRACE(std::string(enum_name(kind)) + (from_sums ? " sums" : " gathered") + " n=" + std::to_string(n));
        Codes codes(n, workers);
        float s = 3.25e-3f;
        const OptimizerStep step = step_of(kind, true);
        State host(n), dev_out(n);
        // CPU.
        CodedAverage c;
        if (from_sums) {
          c.code_sums = Tensor(codes.sums.data(), Shape{n}, DType::kI8, Device::cpu());
        } else {
          c.gathered = Tensor(codes.gathered.data(), Shape{static_cast<int64_t>(codes.gathered.size())}, DType::kU8,
                              Device::cpu());
          c.stride = codes.stride;
        }
        c.scaler = Tensor(&s, Shape{1}, DType::kF32, Device::cpu());
        c.num_workers = workers;
        // The GPU's copies of the same inputs.
        auto upload = [&](const void* src, int64_t count, DType dt, Buffer& keep) {
          keep = Buffer(gpu->allocator(), static_cast<size_t>(count) * dtype_size(dt));
          const Tensor d(keep.data(), Shape{count}, dt, gpu->device());
          gpu->copy(d, Tensor(const_cast<void*>(src), Shape{count}, dt, Device::cpu()));
          return d;
        };
        Buffer bw, b1, b2, be_, bg, bs;
        const Tensor w = upload(host.w.data(), n, DType::kF32, bw), s1 = upload(host.s1.data(), n, DType::kF32, b1),
                     s2 = upload(host.s2.data(), n, DType::kF32, b2),
                     ema = upload(host.ema.data(), n, DType::kF32, be_);
        CodedAverage d = c;
        if (from_sums)
          d.code_sums = upload(codes.sums.data(), n, DType::kI8, bg);
        else
          d.gathered = upload(codes.gathered.data(), static_cast<int64_t>(codes.gathered.size()), DType::kU8, bg);
        d.scaler = upload(&s, 1, DType::kF32, bs);
        cpu->optimizer_update_coded(step, State::t(host.w, n), c, State::t(host.s1, n), State::t(host.s2, n),
                                    State::t(host.ema, n));
        gpu->optimizer_update_coded(step, w, d, s1, s2, ema);
        gpu->copy(State::t(dev_out.w, n), w), gpu->copy(State::t(dev_out.s1, n), s1);
        gpu->copy(State::t(dev_out.s2, n), s2), gpu->copy(State::t(dev_out.ema, n), ema);
        std::string where;
        EXPECT_TRUE(same_bits(dev_out.w, host.w, &where)) << "w: " << where;
        EXPECT_TRUE(same_bits(dev_out.s1, host.s1, &where)) << "slot 1: " << where;
        EXPECT_TRUE(same_bits(dev_out.s2, host.s2, &where)) << "slot 2: " << where;
        EXPECT_TRUE(same_bits(dev_out.ema, host.ema, &where)) << "moving average: " << where;
      }
}

// The table launches (32 parts a launch, parts and both code forms mixed) against the CPU's, bit for bit.
TEST(CodedUpdateCuda, ManyMatchesCpuBitForBit) {
  cuda_test::Backends& backends = cuda_test::backends();
  if (!backends.cuda) GTEST_SKIP() << backends.skip;
  Backend* gpu = backends.cuda.get();
  auto cpu = make_backend("cpu", BackendOptions{2});
  cpu->bind_thread();
  const OptimizerStep step = step_of(OptimizerKind::kMomentum, true);
  ManyCase host, dev;
  const Tensor sc(&host.scaler, Shape{1}, DType::kF32, Device::cpu());
  std::vector<CodedUpdateItem> cpu_items = host.cpu_items(sc);
  cpu->optimizer_update_coded_many(step, cpu_items.data(), static_cast<int>(cpu_items.size()));
  std::vector<Buffer> keep;
  auto upload = [&](const void* src, int64_t count, DType dt) {
    keep.emplace_back(gpu->allocator(), static_cast<size_t>(count) * dtype_size(dt) + 1);
    const Tensor d(keep.back().data(), Shape{count}, dt, gpu->device());
    gpu->copy(d, Tensor(const_cast<void*>(src), Shape{count}, dt, Device::cpu()));
    return d;
  };
  const Tensor dsc = upload(&dev.scaler, 1, DType::kF32);
  std::vector<CodedUpdateItem> items;
  std::vector<std::array<Tensor, 4>> state;
  for (int k = 0; k < ManyCase::kTensors; ++k) {
    const int64_t n = dev.n[k];
    state.push_back({upload(dev.state[k].w.data(), n, DType::kF32), upload(dev.state[k].s1.data(), n, DType::kF32),
                     upload(dev.state[k].s2.data(), n, DType::kF32), upload(dev.state[k].ema.data(), n, DType::kF32)});
    const Tensor bytes =
        upload(dev.codes[k].data(), static_cast<int64_t>(dev.codes[k].size()), dev.sums(k) ? DType::kI8 : DType::kU8);
    items.push_back({state[k][0], dev.average(k, bytes, dsc), state[k][1], state[k][2], state[k][3]});
  }
  gpu->optimizer_update_coded_many(step, items.data(), static_cast<int>(items.size()));
  for (int k = 0; k < ManyCase::kTensors; ++k) {
    SCOPED_TRACE("tensor " + std::to_string(k));
    const int64_t n = dev.n[k];
    gpu->copy(State::t(dev.state[k].w, n), state[k][0]), gpu->copy(State::t(dev.state[k].s1, n), state[k][1]);
    gpu->copy(State::t(dev.state[k].s2, n), state[k][2]), gpu->copy(State::t(dev.state[k].ema, n), state[k][3]);
    expect_same_state(dev.state[k], host.state[k], n);
  }
}

}  // namespace
}  // namespace tg

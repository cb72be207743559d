// Backend ops from one table, in the style of ggml's test-backend-ops: each row names an op, its inputs (random
// f32 tensors of given shapes), its output (pre-filled with NaN, so an unwritten element fails, or with an input for
// the in-place ops), how to run it on a backend, and a plain reference written from the op's contract in
// backend.h. Every row runs on the CPU against its reference and, with a CUDA device, on CUDA against the CPU:
// bit for bit where the row's tolerance is 0 (the shared element-wise math), else within the tolerance relative
// to the largest magnitude (or bit for bit on CUDA where the row says so). Outputs carry guard bytes that must
// survive. A new op is one row (common/op_case.h). The layer ops with descriptors (convolution, inner product,
// pooling, LRN, batch norm; an op of several outputs as a row per output) are rows from common/layer_op_rows.cc,
// held to the double-precision loops of common/reference_ops.h; cpu_ops_test.cc keeps the CPU's own checks of them
// (its primitive caches, partial requests, more shapes), cuda_backend_test.cc the CUDA backend's. The codec ops bit
// for bit in codec_ops_test.cc. Element-wise rows run on 1003 and 100003 elements, ReLU also on NaN and +-Inf; the
// reductions also at double precision on 1 to 1234567 elements, repeated.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "common/cuda_test_fixture.h"
#include "common/op_case.h"
#include "terngrad/core/half_convert.h"

namespace tg {
namespace {

using cuda_test::backends;
using cuda_test::Mem;
using cuda_test::random_floats;
using testing::Inputs;
using testing::OpCase;

float to_half_and_back(float v) {
  half_bits h;
  floats_to_halves(&v, &h, 1);
  float back;
  halves_to_floats(&h, &back, 1);
  return back;
}

// NaN and +-Inf among random values: every 5th element NaN, every 7th (from 1) -Inf, every 11th (from 2) +Inf.
std::vector<float> with_special_values(std::vector<float> v) {
  for (size_t i = 0; i < v.size(); i += 5) v[i] = std::numeric_limits<float>::quiet_NaN();
  for (size_t i = 1; i < v.size(); i += 7) v[i] = -std::numeric_limits<float>::infinity();
  for (size_t i = 2; i < v.size(); i += 11) v[i] = std::numeric_limits<float>::infinity();
  return v;
}

// A double as two floats (its float rounding, then what that leaves): a reduction's double result compared at
// double precision through the table's f32 outputs.
void fill_double(Backend& be, double d, const Tensor& out) {
  const float hi = static_cast<float>(d);
  const float lo = static_cast<float>(d - static_cast<double>(hi));
  float both[2] = {hi, lo};
  be.copy(out, Tensor(both, Shape{2}, DType::kF32, Device::cpu()));
}
std::vector<double> as_double_pair(double d) {
  // Each part stored and loaded as an f32: GCC 12.2's SLP vectorizer at -O2 drops the f32 rounding of a pair of
  // double -> float -> double conversions written together (both parts came out as the unrounded doubles).
  volatile float hi = static_cast<float>(d);
  const double h = hi;
  volatile float lo = static_cast<float>(d - h);
  return {h, static_cast<double>(lo)};
}

// out[i] = f(i) over n elements.
std::vector<double> each(size_t n, const std::function<double(size_t)>& f) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = f(i);
  return v;
}

// Row-major (m, k) x (k, n) with optional transposes, in double.
std::vector<double> ref_matmul(const std::vector<float>& a, const Shape& as, bool ta, const std::vector<float>& b,
                               const Shape& bs, bool tb) {
  const int64_t m = ta ? as[1] : as[0], k = ta ? as[0] : as[1], n = tb ? bs[0] : bs[1];
  std::vector<double> c(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t q = 0; q < k; ++q)
        c[i * n + j] +=
            static_cast<double>(ta ? a[q * as[1] + i] : a[i * as[1] + q]) * (tb ? b[j * bs[1] + q] : b[q * bs[1] + j]);
  return c;
}

double sum_of(const std::vector<float>& x) {
  double s = 0;
  for (float e : x) s += e;
  return s;
}
double sum_of_squares(const std::vector<float>& x) {
  double s = 0;
  for (float e : x) s += static_cast<double>(e) * e;
  return s;
}
void max_abs_run(Backend& be, const std::vector<Tensor>& in, const Tensor& out) { be.fill(out, be.max_abs(in[0])); }
std::vector<double> max_abs_reference(const Inputs& x) {
  float m = 0;
  for (float e : x[0]) m = std::max(m, std::fabs(e));
  return {m};
}

const std::vector<OpCase>& cases() {
  static const std::vector<OpCase> table = [] {
    const Shape v{1003};  // odd: vector loops and their tails
    std::vector<OpCase> t;
    t.push_back({"add",
                 {v, v},
                 v,
                 -1,
                 [](Backend& be, const auto& in, const Tensor& out) { be.add(in[0], in[1], out); },
                 [](const Inputs& x) { return each(x[0].size(), [&](size_t i) { return x[0][i] + x[1][i]; }); }});
    t.push_back({"axpy",
                 {v, v},
                 v,
                 1,
                 [](Backend& be, const auto& in, const Tensor& out) { be.axpy(0.75f, in[0], out); },
                 [](const Inputs& x) { return each(x[0].size(), [&](size_t i) { return x[1][i] + 0.75 * x[0][i]; }); },
                 1e-6});
    t.push_back({"scale",
                 {v},
                 v,
                 0,
                 [](Backend& be, const auto&, const Tensor& out) { be.scale(1.5f, out); },
                 [](const Inputs& x) { return each(x[0].size(), [&](size_t i) { return 1.5f * x[0][i]; }); }});
    t.push_back({"fill",
                 {v},
                 v,
                 -1,
                 [](Backend& be, const auto&, const Tensor& out) { be.fill(out, -2.5f); },
                 [](const Inputs& x) { return std::vector<double>(x[0].size(), -2.5); }});
    t.push_back({"relu_forward",
                 {v},
                 v,
                 -1,
                 [](Backend& be, const auto& in, const Tensor& out) { be.relu_forward(in[0], out); },
                 [](const Inputs& x) { return each(x[0].size(), [&](size_t i) { return std::max(x[0][i], 0.f); }); }});
    t.push_back(
        {"relu_backward",
         {v, v},
         v,
         -1,
         [](Backend& be, const auto& in, const Tensor& out) { be.relu_backward(in[0], in[1], out); },
         [](const Inputs& x) { return each(x[0].size(), [&](size_t i) { return x[0][i] > 0 ? x[1][i] : 0.0; }); }});
    t.push_back(
        {"cast_f16_round_trip",
         {v},
         v,
         -1,
         [](Backend& be, const auto& in, const Tensor& out) {
           Mem half(be, in[0].shape(), DType::kF16);
           be.cast(half.t, in[0]);
           be.cast(out, half.t);
         },
         [](const Inputs& x) { return each(x[0].size(), [&](size_t i) { return to_half_and_back(x[0][i]); }); }});
    // cast_many: 70 tensors of 1 to 1381 elements to f16 (two tables on CUDA, the second partial), back one by one.
    {
      std::vector<Shape> parts;
      int64_t total = 0;
      for (int k = 0; k < 70; ++k) {
        parts.push_back(Shape{1 + (k * 613) % 1381});
        total += parts.back().numel();
      }
      t.push_back({"cast_many_f16_70_tensors", parts, Shape{total}, -1,
                   [](Backend& be, const std::vector<Tensor>& in, const Tensor& out) {
                     std::vector<Mem> halves;
                     std::vector<Tensor> dst;
                     halves.reserve(in.size());
                     for (const Tensor& x : in) {
                       halves.emplace_back(be, x.shape(), DType::kF16);
                       dst.push_back(halves.back().t);
                     }
                     be.cast_many(dst.data(), in.data(), static_cast<int>(in.size()));
                     int64_t at = 0;
                     for (const Tensor& h : dst) {
                       be.cast(out.slice0(at, at + h.numel()), h);
                       at += h.numel();
                     }
                   },
                   [](const Inputs& x) {
                     std::vector<double> out;
                     for (const auto& part : x)
                       for (float v : part) out.push_back(to_half_and_back(v));
                     return out;
                   }});
    }
    // cast_many with transposing pairs (a filter (KH, KW, C/g, out_c) into (out_c, KH, KW, C/g) in the cast):
    // f16 transposed, f16 in order, f32 transposed (a copy that moves), f16 transposed of one output channel; each
    // read back in order.
    {
      const std::vector<Shape> parts = {Shape{3, 3, 4, 5}, Shape{7}, Shape{1, 1, 6, 10}, Shape{5, 5, 3, 1}};
      int64_t total = 0;
      for (const Shape& p : parts) total += p.numel();
      t.push_back({"cast_many_transposing_filters", parts, Shape{total}, -1,
                   [](Backend& be, const std::vector<Tensor>& in, const Tensor& out) {
                     std::vector<Mem> copies;
                     std::vector<Tensor> dst;
                     std::vector<int64_t> rows;
                     copies.reserve(in.size());
                     for (size_t k = 0; k < in.size(); ++k) {
                       const Shape& p = in[k].shape();
                       copies.emplace_back(be, p, k == 2 ? DType::kF32 : DType::kF16);
                       dst.push_back(copies.back().t);
                       rows.push_back(p.rank() == 4 ? p.numel() / p[3] : 0);
                     }
                     be.cast_many(dst.data(), in.data(), static_cast<int>(in.size()), rows.data());
                     int64_t at = 0;
                     for (const Tensor& h : dst) {
                       be.cast(out.slice0(at, at + h.numel()), h);
                       at += h.numel();
                     }
                   },
                   [parts](const Inputs& x) {
                     std::vector<double> out;
                     for (size_t k = 0; k < x.size(); ++k) {
                       const int64_t n = parts[k].numel();
                       const int64_t cols = parts[k].rank() == 4 ? parts[k][3] : 1, rows = n / cols;
                       for (int64_t i = 0; i < n; ++i) {  // output (o, r) from input (r, o)
                         const float v = parts[k].rank() == 4 ? x[k][(i % rows) * cols + i / rows] : x[k][i];
                         out.push_back(k == 2 ? v : to_half_and_back(v));
                       }
                     }
                     return out;
                   }});
    }
    t.push_back(
        {"ema_update",
         {v, v},
         v,
         1,
         [](Backend& be, const auto& in, const Tensor& out) { be.ema_update(0.9f, in[0], out); },
         [](const Inputs& x) { return each(x[0].size(), [&](size_t i) { return 0.9 * x[1][i] + 0.1 * x[0][i]; }); },
         1e-6});
    t.back().cuda_same_bits = true;  // the shared update math
    t.push_back(
        {"encode_f32_sum_3",
         {v, v, v},
         v,
         -1,
         [](Backend& be, const auto& in, const Tensor& out) { be.encode_f32_sum(in.data(), 3, out); },
         [](const Inputs& x) { return each(x[0].size(), [&](size_t i) { return (x[0][i] + x[1][i]) + x[2][i]; }); }});
    t.push_back({"average_f32_3",
                 {v, v, v},
                 v,
                 -1,
                 [](Backend& be, const auto& in, const Tensor& out) { be.average_f32(in.data(), 3, out); },
                 [](const Inputs& x) {
                   return each(x[0].size(), [&](size_t i) { return (x[0][i] + x[1][i] + x[2][i]) / 3.0; });
                 },
                 1e-6});
    t.push_back({"decode_f32_sum_4",
                 {v},
                 v,
                 -1,
                 [](Backend& be, const auto& in, const Tensor& out) { be.decode_f32_sum(in[0], 4, out); },
                 [](const Inputs& x) { return each(x[0].size(), [&](size_t i) { return x[0][i] / 4.0; }); },
                 1e-7});
    t.push_back({"average_f16_2",
                 {v, v},
                 v,
                 -1,
                 [](Backend& be, const auto& in, const Tensor& out) { be.average_f16(in.data(), 2, out); },
                 [](const Inputs& x) {
                   return each(x[0].size(), [&](size_t i) {
                     return to_half_and_back(to_half_and_back(x[0][i]) + to_half_and_back(x[1][i])) / 2.0;
                   });
                 },
                 1e-7});
    t.push_back({"max_scalers_3",
                 {v, v, v},
                 v,
                 -1,
                 [](Backend& be, const auto& in, const Tensor& out) { be.max_scalers(in.data(), 3, out); },
                 [](const Inputs& x) {
                   return each(x[0].size(), [&](size_t i) { return std::max({0.f, x[0][i], x[1][i], x[2][i]}); });
                 }});
    t.push_back(
        {"sum",
         {v},
         Shape{1},
         -1,
         [](Backend& be, const auto& in, const Tensor& out) { be.fill(out, static_cast<float>(be.sum(in[0]))); },
         [](const Inputs& x) { return std::vector<double>{sum_of(x[0])}; },
         1e-6});
    t.push_back({"sum_squares",
                 {v},
                 Shape{1},
                 -1,
                 [](Backend& be, const auto& in, const Tensor& out) {
                   be.fill(out, static_cast<float>(be.sum_squares(in[0])));
                 },
                 [](const Inputs& x) { return std::vector<double>{sum_of_squares(x[0])}; },
                 1e-6});
    t.push_back({"max_abs", {v}, Shape{1}, -1, max_abs_run, max_abs_reference});
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const Shape as = ta ? Shape{513, 7} : Shape{7, 513}, bs = tb ? Shape{5, 513} : Shape{513, 5};
        t.push_back(
            {std::string("matmul_") + (ta ? "T" : "N") + (tb ? "T" : "N"),
             {as, bs},
             Shape{7, 5},
             -1,
             [ta, tb](Backend& be, const auto& in, const Tensor& out) { be.matmul(in[0], ta, in[1], tb, 0.f, out); },
             [ta, tb, as, bs](const Inputs& x) { return ref_matmul(x[0], as, ta, x[1], bs, tb); },
             1e-5});
      }
    t.push_back({"orthogonalize_columns",
                 {Shape{301, 3}},
                 Shape{301, 3},
                 0,
                 [](Backend& be, const auto&, const Tensor& out) { be.orthogonalize_columns(out, 0.f); },
                 [](const Inputs& x) {
                   std::vector<double> p(x[0].begin(), x[0].end());
                   const int64_t rows = 301, cols = 3;
                   for (int64_t i = 0; i < cols; ++i) {
                     double n2 = 0;
                     for (int64_t r = 0; r < rows; ++r) n2 += p[r * cols + i] * p[r * cols + i];
                     for (int64_t r = 0; r < rows; ++r) p[r * cols + i] /= std::sqrt(n2);
                     for (int64_t j = i + 1; j < cols; ++j) {
                       double d = 0;
                       for (int64_t r = 0; r < rows; ++r) d += p[r * cols + i] * p[r * cols + j];
                       for (int64_t r = 0; r < rows; ++r) p[r * cols + j] -= d * p[r * cols + i];
                     }
                   }
                   return p;
                 },
                 1e-5});
    // The element-wise rows again on 100003 elements (partial blocks of a GPU's grid), and ReLU on NaN and +-Inf.
    const Shape big{100003};
    const size_t elementwise = t.size();
    for (size_t i = 0; i < elementwise; ++i) {
      const OpCase& c = t[i];
      if (c.name != "add" && c.name != "axpy" && c.name != "scale" && c.name != "relu_forward" &&
          c.name != "relu_backward")
        continue;
      OpCase b = c;
      b.name += "_100003";
      for (Shape& in : b.inputs) in = big;
      b.output = big;
      t.push_back(b);
      if (c.name != "relu_forward") continue;
      for (const Shape& shape : {v, big}) {
        OpCase special = c;
        special.name = "relu_forward_nan_inf_" + std::to_string(shape.numel());
        special.inputs = {shape};
        special.output = shape;
        special.special_values = true;
        special.reference = [](const Inputs& x) {
          return each(x[0].size(), [&](size_t i) {
            return std::isnan(x[0][i]) ? std::numeric_limits<double>::quiet_NaN() : std::max(x[0][i], 0.f);
          });
        };
        t.push_back(special);
      }
    }
    // The reductions at double precision (hi, lo) on 1, 1000 and 1234567 elements of [-3, 2) (a sum far from 0: the
    // tolerance is relative to it), each repeatable on CUDA.
    for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{1234567}}) {
      const std::string at = "_" + std::to_string(n);
      OpCase sum{"sum_double" + at,
                 {Shape{n}},
                 Shape{2},
                 -1,
                 [](Backend& be, const auto& in, const Tensor& out) { fill_double(be, be.sum(in[0]), out); },
                 [](const Inputs& x) { return as_double_pair(sum_of(x[0])); },
                 1e-12};
      OpCase squares{
          "sum_squares_double" + at,
          {Shape{n}},
          Shape{2},
          -1,
          [](Backend& be, const auto& in, const Tensor& out) { fill_double(be, be.sum_squares(in[0]), out); },
          [](const Inputs& x) { return as_double_pair(sum_of_squares(x[0])); },
          1e-12};
      OpCase max_abs{"max_abs" + at, {Shape{n}}, Shape{1}, -1, max_abs_run, max_abs_reference};
      for (OpCase* c : {&sum, &squares, &max_abs}) {
        c->repeatable = true;
        c->low = -3.f, c->high = 2.f;
        t.push_back(*c);
      }
    }
    for (OpCase& c : testing::layer_op_cases()) t.push_back(std::move(c));
    return t;
  }();
  return table;
}

// The row run on `be` with `inputs`: the output's values (guards checked).
std::vector<float> run_on(Backend& be, const OpCase& c, const Inputs& inputs) {
  std::vector<Mem> in;
  in.reserve(c.inputs.size());
  std::vector<Tensor> ts;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    in.emplace_back(be, c.inputs[i], DType::kF32);
    in.back().write(inputs[i]);
    ts.push_back(in.back().t);
  }
  Mem out(be, c.output, DType::kF32);
  if (c.output_from >= 0) out.write(inputs[static_cast<size_t>(c.output_from)]);
  c.run(be, ts, out.t);
  EXPECT_TRUE(out.guard_intact()) << c.name << " on " << be.name() << ": a write past the end";
  return out.read<float>();
}

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// Against a reference: within the tolerance relative to the largest magnitude (0: the same float), a NaN where the
// reference has one (and not the output's "not written" fill), +-Inf as +-Inf.
void expect_matches(const std::vector<float>& got, const std::vector<double>& want, double tolerance,
                    const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1.0;
  for (double w : want)
    if (std::isfinite(w)) scale = std::max(scale, std::fabs(w));
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      ASSERT_TRUE(std::isnan(got[i])) << what << ": element " << i << " is " << got[i] << ", want NaN";
      ASSERT_NE(bits_of(got[i]), 0xFFFFFFFFu) << what << ": element " << i << " not written (the fill's NaN)";
      continue;
    }
    ASSERT_FALSE(std::isnan(got[i])) << what << ": element " << i << " not written (NaN)";
    if (std::isinf(want[i])) {
      ASSERT_EQ(got[i], static_cast<float>(want[i])) << what << ": element " << i;
      continue;
    }
    if (tolerance == 0) {
      ASSERT_EQ(got[i], static_cast<float>(want[i])) << what << ": element " << i;
    } else {
      ASSERT_LE(std::fabs(got[i] - want[i]) / scale, tolerance)
          << what << ": element " << i << " is " << got[i] << ", want " << want[i];
    }
  }
}

class BackendOps : public ::testing::TestWithParam<size_t> {
 protected:
  const OpCase& op() const { return cases()[GetParam()]; }
  Inputs inputs() const {
    Inputs in;
    for (size_t i = 0; i < op().inputs.size(); ++i) {
      const bool own = i < op().ranges.size();
      in.push_back(random_floats(op().inputs[i].numel(), 100 + static_cast<uint32_t>(i),
                                 own ? op().ranges[i].first : op().low, own ? op().ranges[i].second : op().high));
    }
    if (op().special_values) in[0] = with_special_values(in[0]);
    return in;
  }
};

TEST_P(BackendOps, CpuMatchesTheReference) {
  const Inputs in = inputs();
  expect_matches(run_on(*backends().cpu, op(), in), op().reference(in), op().tolerance,
                 op().name + " on the CPU against its reference");
}

TEST_P(BackendOps, CudaMatchesTheCpu) {
  if (!backends().cuda) GTEST_SKIP() << backends().skip;
  const Inputs in = inputs();
  const std::vector<float> cpu = run_on(*backends().cpu, op(), in);
  const std::vector<float> cuda = run_on(*backends().cuda, op(), in);
  const std::string what = op().name + " on CUDA against the CPU";
  if (op().tolerance == 0 || op().cuda_same_bits) {  // the same bits, NaN's included
    ASSERT_EQ(cuda.size(), cpu.size()) << what;
    for (size_t i = 0; i < cpu.size(); ++i)
      ASSERT_EQ(bits_of(cuda[i]), bits_of(cpu[i]))
          << what << ": element " << i << " is " << cuda[i] << ", want " << cpu[i];
  } else {
    expect_matches(cuda, std::vector<double>(cpu.begin(), cpu.end()), op().tolerance, what);
  }
  if (op().repeatable) {
    const std::vector<float> again = run_on(*backends().cuda, op(), in);
    for (size_t i = 0; i < cuda.size(); ++i)
      ASSERT_EQ(bits_of(again[i]), bits_of(cuda[i])) << op().name << " on CUDA twice: element " << i << " differs";
  }
}

INSTANTIATE_TEST_SUITE_P(Table, BackendOps, ::testing::Range<size_t>(0, cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           std::string n = cases()[info.param].name;
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace tg

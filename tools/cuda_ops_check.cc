// cuda_ops_check: the CUDA backend's heavy ops at real training shapes, checked against plain host
// references in double, timed, and run twice for bit-identical results. No GoogleTest and no CPU backend
// (oneDNN), so it builds wherever the CUDA backend does (scripts/gpu_check.sh builds it on a bare GPU machine).
//
//   cuda_ops_check [--group conv|fc|bn|optim|reduce|amp|codec|pool|lrn|concat|all] [--small] [--allow_tf32]
//                  [--nondeterministic] [--conv_search]
//   cuda_ops_check --versions
// Groups in other files: amp (cuda_ops_check_amp.cc), codec (cuda_ops_check_codec.cc), pool, lrn, concat
// (cuda_ops_check_layers.cc); --versions (cuda_ops_check_versions.cc).
//
// One line per op and shape: op, shape, max abs error, max error relative to the reference's scale, max ulps,
// bad/checked elements, median ms, algorithm, deterministic (two runs gave the same bits), PASS/FAIL.
// Big outputs (convolution, FC) are checked on a fixed random sample of elements, each computed exactly in
// double with its condition sum(|term|); an element is bad when |got - ref| > tol * (sum |term|) or it is not
// finite (outputs are filled with NaN first, so an unwritten element is bad). Batch norm is checked in full
// against tests/common/reference_ops.cc; optimizer updates must equal the shared host math bit for bit.
// Compute dtypes: conv, FC and batch norm also run in f16 and bf16 at their tensor-core shapes ("... f16" /
// "... bf16" lines; a device without the dtype prints a SKIP line): inputs are rounded to the dtype on the host,
// the references are computed in double from those rounded values (what the fp32 CPU reference computes on
// them), and the tolerance (kTol below, printed on the line) allows the output's rounding to the dtype. The
// amp group (tools/cuda_ops_check_amp.cc) checks cast, unscale_and_check and the element-wise ops in f16/bf16.
// Exit status: 0 all PASS, 1 any FAIL, 77 no CUDA device ("cuda_ops_check: no CUDA device (...)").
#include "tools/cuda_ops_check.h"

#include <memory>

#include "common/reference_ops.h"
#include "terngrad/math/optim_math.h"

namespace tg::ops_check {
namespace {

constexpr const char* kUsage =
    "usage: cuda_ops_check [--group conv|fc|bn|optim|reduce|amp|codec|pool|lrn|concat|all] [--small] [--allow_tf32]\n"
    "                      [--nondeterministic] [--conv_search]\n"
    "       cuda_ops_check --versions   (the CUDA runtime, driver, cuDNN, cuBLAS and NCCL loaded; no GPU needed)";

// Tolerances of the sampled GEMM-like checks, relative to the element's sum |term|: fp32 FMA is ~1e-7 (TF32
// operands give ~1e-5 and more); an f16 output carries up to 2^-11 = 4.9e-4 of rounding, bf16 up to 2^-8 =
// 3.9e-3, and a bias added after cuDNN/cuBLAS rounds once more.
double gemm_tol(DType t) { return t == DType::kF32 ? 5e-6 : t == DType::kF16 ? 2e-3 : 1.6e-2; }
// Batch norm outputs, relative to the tensor's max |ref|: f32 as before; one rounding of the output in f16/bf16.
double bn_tol(DType t, double f32_tol) { return t == DType::kF32 ? f32_tol : t == DType::kF16 ? 2e-3 : 1.6e-2; }
std::string tol_text(DType t, double tol) { return t == DType::kF32 ? "" : fmt::format("  tol {:g}", tol); }

// ---- convolution ------------------------------------------------------------------------------------------------
struct ConvCase {
  const char* name;
  int64_t n, h, w, c, k, o, stride;
  bool bias;
};

// Exact sampled references (double) of y, dx, dw with sum |term| of each.
struct ConvRef {
  const ConvDesc& d;
  const std::vector<float>&x, &w, &b, &dy;
  int64_t cg() const { return d.c / d.groups; }
  int64_t og() const { return d.out_c / d.groups; }
  float X(int64_t n, int64_t h, int64_t ww, int64_t c) const { return x[((n * d.h + h) * d.w + ww) * d.c + c]; }
  float W(int64_t kh, int64_t kw, int64_t ci, int64_t o) const {
    return w[((kh * d.kw + kw) * cg() + ci) * d.out_c + o];
  }
  float DY(int64_t n, int64_t oh, int64_t ow, int64_t o) const {
    return dy[((n * d.out_h + oh) * d.out_w + ow) * d.out_c + o];
  }
  void y(int64_t i, double* ref, double* scale) const {
    const int64_t o = i % d.out_c, ow = (i / d.out_c) % d.out_w, oh = (i / d.out_c / d.out_w) % d.out_h,
                  n = i / d.out_c / d.out_w / d.out_h, g = o / og();
    double s = d.has_bias ? b[o] : 0.0, a = std::fabs(s);
    for (int64_t kh = 0; kh < d.kh; ++kh)
      for (int64_t kw = 0; kw < d.kw; ++kw) {
        const int64_t h = oh * d.stride_h - d.pad_top + kh, ww = ow * d.stride_w - d.pad_left + kw;
        if (h < 0 || h >= d.h || ww < 0 || ww >= d.w) continue;
        for (int64_t ci = 0; ci < cg(); ++ci) {
          const double t = static_cast<double>(X(n, h, ww, g * cg() + ci)) * W(kh, kw, ci, o);
          s += t, a += std::fabs(t);
        }
      }
    *ref = s, *scale = a;
  }
  void dx(int64_t i, double* ref, double* scale) const {
    const int64_t c = i % d.c, ww = (i / d.c) % d.w, h = (i / d.c / d.w) % d.h, n = i / d.c / d.w / d.h;
    const int64_t g = c / cg(), ci = c % cg();
    double s = 0, a = 0;
    for (int64_t kh = 0; kh < d.kh; ++kh)
      for (int64_t kw = 0; kw < d.kw; ++kw) {
        const int64_t th = h + d.pad_top - kh, tw = ww + d.pad_left - kw;
        if (th < 0 || tw < 0 || th % d.stride_h || tw % d.stride_w) continue;
        const int64_t oh = th / d.stride_h, ow = tw / d.stride_w;
        if (oh >= d.out_h || ow >= d.out_w) continue;
        for (int64_t o = g * og(); o < (g + 1) * og(); ++o) {
          const double t = static_cast<double>(DY(n, oh, ow, o)) * W(kh, kw, ci, o);
          s += t, a += std::fabs(t);
        }
      }
    *ref = s, *scale = a;
  }
  void dw(int64_t i, double* ref, double* scale) const {
    const int64_t o = i % d.out_c, ci = (i / d.out_c) % cg(), kw = (i / d.out_c / cg()) % d.kw,
                  kh = i / d.out_c / cg() / d.kw, c = (o / og()) * cg() + ci;
    double s = 0, a = 0;
    for (int64_t n = 0; n < d.n; ++n)
      for (int64_t oh = 0; oh < d.out_h; ++oh) {
        const int64_t h = oh * d.stride_h - d.pad_top + kh;
        if (h < 0 || h >= d.h) continue;
        for (int64_t ow = 0; ow < d.out_w; ++ow) {
          const int64_t ww = ow * d.stride_w - d.pad_left + kw;
          if (ww < 0 || ww >= d.w) continue;
          const double t = static_cast<double>(X(n, h, ww, c)) * DY(n, oh, ow, o);
          s += t, a += std::fabs(t);
        }
      }
    *ref = s, *scale = a;
  }
};

std::string algo_text(const ConvAlgorithm& a) {
  if (!a.chosen) return "(not run)";
  std::string s = "cuDNN " + a.name + (a.tensor_op ? " tensor-op" : " fma") + (a.deterministic ? " det" : " nondet");
  if (a.measured_ms >= 0) s += fmt::format(" (fastest of {} timed: {:.3f} ms)", a.timed, a.measured_ms);
  return s;
}

void check_conv(CudaBackend& be, const Options& o, const ConvCase& cc, DType t) {
  const std::string name = std::string("conv ") + cc.name;
  if (skip_dtype(be, t, name)) return;
  const int64_t n = o.small ? 4 : cc.n;
  const ConvDesc d = make_conv_desc(n, cc.h, cc.w, cc.c, cc.k, cc.k, cc.o, cc.stride, Padding::kSame, 1, cc.bias);
  const std::string shape = fmt::format("{}x{}x{}x{} k{} /{} ->{}", n, cc.h, cc.w, cc.c, cc.k, cc.stride, cc.o);
  const Shape xs{d.n, d.h, d.w, d.c}, ws{d.kh, d.kw, d.c, d.out_c}, ys{d.n, d.out_h, d.out_w, d.out_c};
  auto hx = randoms(xs.numel(), 1), hw = randoms(ws.numel(), 2), hb = randoms(d.out_c, 3), hdy = randoms(ys.numel(), 4);
  for (auto* v : {&hx, &hw, &hb, &hdy}) round_all(t, *v);  // the reference sees the values the device holds
  Dev x(be, xs, t), w(be, ws, t), b(be, Shape{d.out_c}, t), y(be, ys, t), dy(be, ys, t), dx(be, xs, t), dw(be, ws, t),
      db(be, Shape{d.out_c}, t);
  upload_as(be, x.t, hx), upload_as(be, w.t, hw), upload_as(be, b.t, hb), upload_as(be, dy.t, hdy);
  const Tensor bias = cc.bias ? b.t : Tensor();
  const ConvRef ref{d, hx, hw, hb, hdy};
  const double kTol = gemm_tol(t);
  const std::string tol = tol_text(t, kTol);
  const bool det_required = o.backend.deterministic;
  const std::string sfx = suffix(t);

  guarded(name + " fwd" + sfx, shape, [&] {
    poison_any(be, y.t);
    be.conv2d_forward(d, x.t, w.t, bias, y.t);
    auto first = download_as(be, y.t);
    be.conv2d_forward(d, x.t, w.t, bias, y.t);
    const bool det = same_bits(first, download_as(be, y.t));
    const double ms = time_ms(be, [&] { be.conv2d_forward(d, x.t, w.t, bias, y.t); });
    const Stats st = check_sampled(first, sample(ys.numel(), 2048, 5), kTol,
                                   [&](int64_t i, double* r, double* s) { ref.y(i, r, s); });
    const double flops = 2.0 * ys.numel() * d.kh * d.kw * d.c;
    report(name + " fwd" + sfx, shape, st, ms, algo_text(be.conv_algorithms(d, t)[0]), det, det_required,
           fmt::format("  {:.1f} TFLOP/s", flops / ms * 1e-9) + tol);
  });
  guarded(name + " bwd data" + sfx, shape, [&] {
    poison_any(be, dx.t);
    be.conv2d_backward(d, x.t, w.t, dy.t, dx.t, Tensor(), Tensor());
    auto first = download_as(be, dx.t);
    be.conv2d_backward(d, x.t, w.t, dy.t, dx.t, Tensor(), Tensor());
    const bool det = same_bits(first, download_as(be, dx.t));
    const double ms = time_ms(be, [&] { be.conv2d_backward(d, x.t, w.t, dy.t, dx.t, Tensor(), Tensor()); });
    const Stats st = check_sampled(first, sample(xs.numel(), 2048, 6), kTol,
                                   [&](int64_t i, double* r, double* s) { ref.dx(i, r, s); });
    report(name + " bwd data" + sfx, shape, st, ms, algo_text(be.conv_algorithms(d, t)[1]), det, det_required, tol);
  });
  guarded(name + " bwd filter" + sfx, shape, [&] {
    poison_any(be, dw.t);
    be.conv2d_backward(d, x.t, w.t, dy.t, Tensor(), dw.t, Tensor());
    auto first = download_as(be, dw.t);
    be.conv2d_backward(d, x.t, w.t, dy.t, Tensor(), dw.t, Tensor());
    const bool det = same_bits(first, download_as(be, dw.t));
    const double ms = time_ms(be, [&] { be.conv2d_backward(d, x.t, w.t, dy.t, Tensor(), dw.t, Tensor()); });
    const Stats st = check_sampled(first, sample(ws.numel(), 512, 7), kTol,
                                   [&](int64_t i, double* r, double* s) { ref.dw(i, r, s); });
    report(name + " bwd filter" + sfx, shape, st, ms, algo_text(be.conv_algorithms(d, t)[2]), det, det_required, tol);
  });
  if (!cc.bias) return;
  guarded(name + " bias grad" + sfx, shape, [&] {
    poison_any(be, db.t);
    be.conv2d_backward(d, x.t, w.t, dy.t, Tensor(), Tensor(), db.t);
    auto first = download_as(be, db.t);
    be.conv2d_backward(d, x.t, w.t, dy.t, Tensor(), Tensor(), db.t);
    const bool det = same_bits(first, download_as(be, db.t));
    const double ms = time_ms(be, [&] { be.conv2d_backward(d, x.t, w.t, dy.t, Tensor(), Tensor(), db.t); });
    const int64_t rows = d.n * d.out_h * d.out_w;
    const Stats st = check_sampled(first, sample(d.out_c, d.out_c, 8), kTol, [&](int64_t o, double* r, double* s) {
      double sum = 0, abs = 0;
      for (int64_t row = 0; row < rows; ++row) sum += hdy[row * d.out_c + o], abs += std::fabs(hdy[row * d.out_c + o]);
      *r = sum, *s = abs;
    });
    report(name + " bias grad" + sfx, fmt::format("{} rows x {}", rows, d.out_c), st, ms, "column_sum 2-D grid", det,
           det_required, tol);
  });
}

void group_conv(CudaBackend& be, const Options& o) {
  const ConvCase cases[] = {
      {"alexnet conv1", 128, 224, 224, 3, 11, 48, 4, true},  // bias here only to time the column sum
      {"alexnet conv2", 128, 27, 27, 48, 5, 128, 1, false},
      {"resnet50 3x3", 64, 56, 56, 64, 3, 64, 1, false},
  };
  for (const ConvCase& cc : cases) check_conv(be, o, cc, DType::kF32);
  // Mixed precision at ResNet-50 shapes (tensor-core friendly channel counts), bias included (its column sum).
  const ConvCase half_cases[] = {
      {"resnet50 3x3", 64, 56, 56, 64, 3, 64, 1, true},
      {"resnet50 1x1", 64, 56, 56, 256, 1, 64, 1, false},
  };
  for (DType t : {DType::kF16, DType::kBf16})
    for (const ConvCase& cc : half_cases) check_conv(be, o, cc, t);
  // TensorFlow's asymmetric SAME pads both ways (src/backend/conv_padding.h), in f16: a stride-2 3x3 as an output
  // shift, the 3-channel stem on an input copy (alexnet conv1 above: an output shift in f32).
  const ConvCase asymmetric[] = {
      {"resnet50 3x3 /2", 64, 56, 56, 128, 3, 128, 2, false},
      {"resnet50 stem", 64, 224, 224, 3, 7, 64, 2, false},
  };
  for (const ConvCase& cc : asymmetric) check_conv(be, o, cc, DType::kF16);
}

// ---- fully connected ---------------------------------------------------------------------------------------------
void check_fc(CudaBackend& be, const Options& o, const char* name, int64_t n, int64_t in, int64_t out, DType t) {
  if (skip_dtype(be, t, std::string("fc ") + name)) return;
  if (o.small) n = 8;
  InnerProductDesc d;
  d.n = n, d.in = in, d.out = out, d.has_bias = true;
  const std::string shape = fmt::format("{}x{} -> {}", n, in, out);
  auto hx = randoms(n * in, 11), hw = randoms(in * out, 12), hb = randoms(out, 13), hdy = randoms(n * out, 14);
  for (auto* v : {&hx, &hw, &hb, &hdy}) round_all(t, *v);
  Dev x(be, Shape{n, in}, t), w(be, Shape{in, out}, t), b(be, Shape{out}, t), y(be, Shape{n, out}, t),
      dy(be, Shape{n, out}, t);
  Dev dx(be, Shape{n, in}, t), dw(be, Shape{in, out}, t), db(be, Shape{out}, t);
  upload_as(be, x.t, hx), upload_as(be, w.t, hw), upload_as(be, b.t, hb), upload_as(be, dy.t, hdy);
  const double kTol = gemm_tol(t);
  const std::string algo = t != DType::kF32          ? fmt::format("cublasGemmEx {} (f32 accumulate)", dtype_name(t))
                           : be.options().allow_tf32 ? "cublasGemmEx tf32"
                                                     : "cublasGemmEx fp32";
  const std::string op = std::string("fc ") + name;
  const std::string sfx = suffix(t), tol = tol_text(t, kTol);
  struct Part {
    const char* what;
    Tensor out;
    std::function<void()> run;
    std::function<void(int64_t, double*, double*)> ref;
    int64_t samples;
  };
  // sum_k a[k * sa] * b[k * sb] (+ init) in double, and its sum |term|
  auto dot = [](const float* a, int64_t sa, const float* b, int64_t sb, int64_t k, double init, double* r, double* s) {
    double sum = init, abs = std::fabs(init);
    for (int64_t i = 0; i < k; ++i) {
      const double t = static_cast<double>(a[i * sa]) * (b ? b[i * sb] : 1.f);
      sum += t, abs += std::fabs(t);
    }
    *r = sum, *s = abs;
  };
  const float *px = hx.data(), *pw = hw.data(), *pdy = hdy.data();
  const Part parts[] = {
      {"fwd", y.t, [&] { be.inner_product_forward(d, x.t, w.t, b.t, y.t); },
       [&](int64_t i, double* r, double* s) { dot(px + i / out * in, 1, pw + i % out, out, in, hb[i % out], r, s); },
       2048},
      {"bwd data", dx.t, [&] { be.inner_product_backward(d, x.t, w.t, dy.t, dx.t, Tensor(), Tensor()); },
       [&](int64_t i, double* r, double* s) { dot(pdy + i / in * out, 1, pw + i % in * out, 1, out, 0, r, s); }, 2048},
      {"bwd weights", dw.t, [&] { be.inner_product_backward(d, x.t, w.t, dy.t, Tensor(), dw.t, Tensor()); },
       [&](int64_t i, double* r, double* s) { dot(px + i / out, in, pdy + i % out, out, n, 0, r, s); }, 4096},
      {"bias grad", db.t, [&] { be.inner_product_backward(d, x.t, w.t, dy.t, Tensor(), Tensor(), db.t); },
       [&](int64_t c, double* r, double* s) { dot(pdy + c, out, nullptr, 0, n, 0, r, s); }, out},
  };
  for (const Part& p : parts) {
    guarded(op + " " + p.what + sfx, shape, [&] {
      poison_any(be, p.out);
      p.run();
      auto first = download_as(be, p.out);
      p.run();
      const bool det = same_bits(first, download_as(be, p.out));
      const double ms = time_ms(be, p.run);
      const Stats st = check_sampled(first, sample(p.out.numel(), p.samples, 15), kTol, p.ref);
      const bool gemm = std::strcmp(p.what, "bias grad") != 0;
      report(op + " " + p.what + sfx, shape, st, ms, gemm ? algo : "column_sum 2-D grid", det, o.backend.deterministic,
             (gemm ? fmt::format("  {:.1f} TFLOP/s", 2.0 * n * in * out / ms * 1e-9) : "") + tol);
    });
  }
}

void group_fc(CudaBackend& be, const Options& o) {
  check_fc(be, o, "alexnet fc6", 128, 9216, 4096, DType::kF32);
  check_fc(be, o, "alexnet fc7", 128, 4096, 4096, DType::kF32);
  for (DType t : {DType::kF16, DType::kBf16}) check_fc(be, o, "resnet50 fc", 256, 2048, 1000, t);
}

// ---- batch norm ----------------------------------------------------------------------------------------------------

void check_bn(CudaBackend& be, const Options& o, const char* name, int64_t rows, int64_t c, bool has_gamma, DType t) {
  if (skip_dtype(be, t, std::string("bn ") + name)) return;
  if (o.small) rows = std::min<int64_t>(rows, 40000);
  BatchNormDesc d;
  d.rows = rows, d.c = c, d.epsilon = 0.001f, d.has_gamma = has_gamma;
  const std::string shape = fmt::format("{} rows x {}{}", rows, c, has_gamma ? " gamma" : "");
  const std::string op = std::string("bn ") + name;
  auto hx = randoms(rows * c, 21, -1.f, 3.f), hdy = randoms(rows * c, 22), hg = randoms(c, 23, 0.5f, 1.5f),
       hb = randoms(c, 24);
  round_all(t, hx), round_all(t, hdy);  // activations in the dtype; gamma, beta and the statistics stay f32
  Dev x(be, Shape{rows, c}, t), dy(be, Shape{rows, c}, t), y(be, Shape{rows, c}, t), dx(be, Shape{rows, c}, t);
  Dev gamma(be, Shape{c}), beta(be, Shape{c}), mean(be, Shape{c}), var(be, Shape{c}), dg(be, Shape{c}),
      dbeta(be, Shape{c});
  upload_as(be, x.t, hx), upload_as(be, dy.t, hdy), upload(be, gamma.t, hg), upload(be, beta.t, hb);
  const Tensor g = has_gamma ? gamma.t : Tensor(), dgt = has_gamma ? dg.t : Tensor();
  const ref::Vec rx = to_double(hx), rg = has_gamma ? to_double(hg) : ref::Vec{}, rb = to_double(hb);
  ref::Vec rmean, rvar;
  const ref::Vec ry = ref::batch_norm_forward_training(d, rx, rg, rb, &rmean, &rvar);

  const std::string sfx = suffix(t);
  const double es = static_cast<double>(dtype_size(t));
  guarded(op + " fwd train" + sfx, shape, [&] {
    poison_any(be, y.t), poison(be, mean.t), poison(be, var.t);
    auto run = [&] { be.batch_norm_forward_training(d, x.t, g, beta.t, y.t, mean.t, var.t); };
    run();
    auto first = download_as(be, y.t);
    run();
    const bool det = same_bits(first, download_as(be, y.t));
    const double ms = time_ms(be, run);
    Stats st = check_full(first, ry, bn_tol(t, 1e-5));
    st.merge(check_full(download(be, mean.t), rmean, 1e-6));
    st.merge(check_full(download(be, var.t), rvar, 1e-5));
    report(op + " fwd train" + sfx, shape, st, ms, "tg kernels (CPU order)", det, true,
           fmt::format("  {:.0f} GB/s", 3.0 * rows * c * es / ms * 1e-6) + tol_text(t, bn_tol(t, 1e-5)));
  });
  guarded(op + " bwd" + sfx, shape, [&] {
    // the reference's statistics on the device too: backward uses the given mean/var
    auto fm = std::vector<float>(rmean.begin(), rmean.end()), fv = std::vector<float>(rvar.begin(), rvar.end());
    upload(be, mean.t, fm), upload(be, var.t, fv);
    ref::Vec rdx, rdg, rdb;
    ref::batch_norm_backward(d, rx, rg, to_double(fm), to_double(fv), to_double(hdy), &rdx, &rdg, &rdb);
    poison_any(be, dx.t), poison(be, dbeta.t);
    if (has_gamma) poison(be, dg.t);
    auto run = [&] { be.batch_norm_backward(d, x.t, g, mean.t, var.t, dy.t, dx.t, dgt, dbeta.t); };
    run();
    auto first = download_as(be, dx.t);
    run();
    const bool det = same_bits(first, download_as(be, dx.t));
    const double ms = time_ms(be, run);
    Stats st = check_full(first, rdx, bn_tol(t, 1e-4));
    st.merge(check_full(download(be, dbeta.t), rdb, 1e-5));
    if (has_gamma) st.merge(check_full(download(be, dg.t), rdg, 1e-5));
    report(op + " bwd" + sfx, shape, st, ms, "tg kernels (CPU order)", det, true,
           fmt::format("  {:.0f} GB/s", 5.0 * rows * c * es / ms * 1e-6) + tol_text(t, bn_tol(t, 1e-4)));
  });
}

void group_bn(CudaBackend& be, const Options& o) {
  check_bn(be, o, "alexnet conv1", 128 * 56 * 56, 48, false, DType::kF32);        // 401,408 rows
  check_bn(be, o, "resnet50 stem b128", 128 * 112 * 112, 64, true, DType::kF32);  // 1,605,632 rows: past cuDNN's limits
  for (DType t : {DType::kF16, DType::kBf16}) check_bn(be, o, "resnet50 stem b128", 128 * 112 * 112, 64, true, t);
}

// ---- optimizer
// ---------------------------------------------------------------------------------------------------------
void check_optimizer(CudaBackend& be, const Options& /*o*/, const char* name, OptimizerStep step, int64_t n) {
  const std::string shape = fmt::format("{} params + EMA", n);
  const std::string op = std::string("optimizer ") + name;
  guarded(op, shape, [&] {
    auto hw = randoms(n, 31), hg = randoms(n, 32), hs1 = randoms(n, 33, 0.f, 0.1f), hs2 = randoms(n, 34, 0.f, 0.01f),
         hema = randoms(n, 35);
    Dev w(be, Shape{n}), g(be, Shape{n}), s1(be, Shape{n}), s2(be, Shape{n}), ema(be, Shape{n});
    upload(be, w.t, hw), upload(be, g.t, hg), upload(be, s1.t, hs1), upload(be, s2.t, hs2), upload(be, ema.t, hema);
    const bool two = step.kind == OptimizerKind::kAdam || step.kind == OptimizerKind::kRmsprop;
    be.optimizer_update(step, w.t, g.t, s1.t, two ? s2.t : Tensor(), ema.t);
    auto gw = download(be, w.t), gs1 = download(be, s1.t), gema = download(be, ema.t);
#pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) {  // the CPU backend's fused pass, element by element
      optimizer_update_one(step, hw[i], hg[i], &hs1[i], two ? &hs2[i] : nullptr);
      ema_update_one(hema[i], hw[i], step.ema_decay);
    }
    Stats st;
    st.checked = 3 * n;
    for (int64_t i = 0; i < n; ++i)
      st.bad += (std::memcmp(&gw[i], &hw[i], 4) != 0) + (std::memcmp(&gs1[i], &hs1[i], 4) != 0) +
                (std::memcmp(&gema[i], &hema[i], 4) != 0);
    if (st.bad) st.max_rel = 1;
    const double ms = time_ms(be, [&] { be.optimizer_update(step, w.t, g.t, s1.t, two ? s2.t : Tensor(), ema.t); });
    const double bytes = (two ? 9.0 : 7.0) * 4.0 * n;  // read w g s1 (s2) ema, write w s1 (s2) ema
    report(
        op, shape, st, ms, "tg kernel (shared math)", true, true,
        fmt::format("  {:.0f} GB/s = {:.0f}% of 4.8 TB/s", bytes / ms * 1e-6, 100 * bytes / ms * 1e3 / kH200Bandwidth));
  });
}

void group_optim(CudaBackend& be, const Options& o) {
  const int64_t n = o.small ? 1000003 : 61100840;  // AlexNet's parameter count
  OptimizerStep mom;
  mom.kind = OptimizerKind::kMomentum, mom.lr = 0.01f, mom.momentum = 0.9f, mom.ema_decay = 0.9999f;
  OptimizerStep adam;
  adam.kind = OptimizerKind::kAdam, adam.lr = 0.001f, adam.ema_decay = 0.9999f;
  check_optimizer(be, o, "momentum", mom, n);
  check_optimizer(be, o, "adam", adam, n);
}

// ---- reductions
// ------------------------------------------------------------------------------------------------------------
void group_reduce(CudaBackend& be, const Options& o) {
  const int64_t n = o.small ? 1000003 : 61100840;
  const std::string shape = fmt::format("{}", n);
  auto hx = randoms(n, 41, -3.f, 2.f);
  Dev x(be, Shape{n});
  upload(be, x.t, hx);
  double sum = 0, abs = 0, sq = 0;
  float mx = 0;
  for (float v : hx) sum += v, abs += std::fabs(v), sq += static_cast<double>(v) * v, mx = std::max(mx, std::fabs(v));
  guarded("sum", shape, [&] {
    const double a = be.sum(x.t), b = be.sum(x.t);
    Stats st;
    st.add(static_cast<float>(a), sum, abs, 1e-12);
    st.max_abs = std::fabs(a - sum), st.max_rel = std::fabs(a - sum) / abs, st.bad = st.max_rel > 1e-12;
    report("sum (double)", shape, st, time_ms(be, [&] { be.sum(x.t); }), "tg two-pass", a == b, true);
  });
  guarded("sum_squares", shape, [&] {
    const double a = be.sum_squares(x.t);
    Stats st;
    st.add(static_cast<float>(a), sq, sq, 1e-12);
    st.max_abs = std::fabs(a - sq), st.max_rel = st.max_abs / sq, st.bad = st.max_rel > 1e-12;
    report("sum_squares (double)", shape, st, time_ms(be, [&] { be.sum_squares(x.t); }), "tg two-pass",
           a == be.sum_squares(x.t), true);
  });
  guarded("max_abs", shape, [&] {
    Stats st;
    st.add(be.max_abs(x.t), mx, mx, 0);
    // a NaN followed by finite values must come back as NaN
    std::vector<float> nan = {std::nanf("")};
    be.copy(Tensor(x.buf.data(), Shape{1}, DType::kF32, be.device()),
            Tensor(nan.data(), Shape{1}, DType::kF32, Device::cpu()));
    const bool nan_ok = std::isnan(be.max_abs(x.t));
    if (!nan_ok) ++st.bad;
    report("max_abs (+NaN case)", shape, st, time_ms(be, [&] { be.max_abs(x.t); }), "tg two-pass", true, true,
           nan_ok ? "" : "  NaN lost");
  });
}

// ---- main ---------------------------------------------------------------------------------------------------------
int run(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--versions") return print_versions();
    if (a == "--help" || a == "-h") {
      std::printf("cuda_ops_check: the CUDA backend's ops checked against host references and timed\n%s\n", kUsage);
      return 0;
    }
    if (a == "--group" && i + 1 < argc)
      o.group = argv[++i];
    else if (a == "--small")
      o.small = true;
    else if (a == "--allow_tf32")
      o.backend.allow_tf32 = true;
    else if (a == "--nondeterministic")
      o.backend.deterministic = false;
    else if (a == "--conv_search")
      o.backend.conv_search = true;
    else {
      std::fprintf(stderr, "%s\n", kUsage);
      return 2;
    }
  }
  const std::vector<std::pair<std::string, void (*)(CudaBackend&, const Options&)>> groups = {
      {"conv", group_conv},     {"fc", group_fc},        {"bn", group_bn},       {"optim", group_optim},
      {"reduce", group_reduce}, {"amp", group_amp},      {"codec", group_codec}, {"pool", group_pool},
      {"lrn", group_lrn},       {"concat", group_concat}};
  bool known = o.group == "all";
  std::string names;
  for (const auto& g : groups) known = known || g.first == o.group, names += g.first + ", ";
  if (!known) {
    std::fprintf(stderr, "cuda_ops_check: unknown group '%s' (%sall)\n", o.group.c_str(), names.c_str());
    return 2;
  }
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    std::printf("cuda_ops_check: no CUDA device (%s)\n",
                status != cudaSuccess ? cudaGetErrorString(status) : "cudaGetDeviceCount: 0 devices");
    return 77;
  }
  auto backend = make_cuda_backend(0, o.backend);
  auto& be = dynamic_cast<CudaBackend&>(*backend);
  std::printf("cuda_ops_check on %s; tf32 %s, deterministic algorithms %s%s; %d host threads for references\n",
              be.name().c_str(), o.backend.allow_tf32 ? "allowed" : "off", o.backend.deterministic ? "only" : "any",
              o.small ? "; small shapes" : "", omp_get_max_threads());
  for (const auto& g : groups) {
    if (o.group != "all" && o.group != g.first) continue;
    std::printf("== %s\n", g.first.c_str());
    g.second(be, o);
  }
  std::printf("cuda_ops_check: %s (%d failed)\n", g_failures ? "FAIL" : "PASS", g_failures);
  return g_failures ? 1 : 0;
}

}  // namespace
}  // namespace tg::ops_check

int main(int argc, char** argv) {
  try {
    return tg::ops_check::run(argc, argv);
  } catch (const std::exception& e) {
    std::printf("cuda_ops_check: FAIL: %s\n", e.what());
    return 1;
  }
}

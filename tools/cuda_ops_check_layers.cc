// cuda_ops_check's groups of the lighter layers, at the shapes the five networks train with: pool (max and average,
// TF SAME/VALID padding, forward and backward), lrn (AlexNet's, forward and backward) and concat (Inception's
// channel concatenation and its adjoint split). Each output is checked in full against the double references of
// tests/common/reference_ops.cc (pool, LRN) or exactly (concat and split move values), relative to the tensor's
// largest |reference|; f16/bf16 lines round the inputs to the dtype first and allow the output's rounding.
// Outputs are poisoned (NaN) first; every line also says whether two runs gave the same bits, and the GB/s moved.
#include <functional>
#include <memory>

#include "common/reference_ops.h"
#include "tools/cuda_ops_check.h"

namespace tg::ops_check {
namespace {

// One rounding of an f16/bf16 output, relative to the tensor's largest |value|; f32 as the BN checks.
double out_tol(DType t, double f32_tol) { return t == DType::kF32 ? f32_tol : t == DType::kF16 ? 2e-3 : 1.6e-2; }

std::string gbs(double bytes, double ms) { return fmt::format("  {:.0f} GB/s", bytes / ms * 1e-6); }

// One report line: `out` poisoned, `run` twice (the same bits?), timed, its first result checked in full against
// want(); bytes: what one run moves.
void check_output(CudaBackend& be, const std::string& op, const std::string& shape, const Tensor& out,
                  const std::function<void()>& run, const std::function<ref::Vec()>& want, double tol,
                  const std::string& algo, double bytes) {
  guarded(op, shape, [&] {
    poison_any(be, out);
    run();
    auto first = download_as(be, out);
    run();
    const bool det = same_bits(first, download_as(be, out));
    const double ms = time_ms(be, run);
    report(op, shape, check_full(first, want(), tol), ms, algo, det, true, gbs(bytes, ms));
  });
}

// ---- pooling
// ----------------------------------------------------------------------------------------------------------
struct PoolCase {
  const char* name;
  PoolKind kind;
  int64_t n, h, w, c, k, stride;
  Padding padding;
};

void check_pool(CudaBackend& be, const Options& o, const PoolCase& pc, DType t) {
  const std::string op = std::string("pool ") + pc.name;
  if (skip_dtype(be, t, op)) return;
  const int64_t n = o.small ? 2 : pc.n;
  const PoolDesc d = make_pool_desc(pc.kind, n, pc.h, pc.w, pc.c, pc.k, pc.k, pc.stride, pc.padding);
  const std::string shape = fmt::format("{}x{}x{}x{} {}x{}/{} {}", n, pc.h, pc.w, pc.c, pc.k, pc.k, pc.stride,
                                        pc.padding == Padding::kSame ? "SAME" : "VALID");
  const Shape xs{d.n, d.h, d.w, d.c}, ys{d.n, d.out_h, d.out_w, d.c};
  auto hx = randoms(xs.numel(), 51), hdy = randoms(ys.numel(), 52);
  round_all(t, hx), round_all(t, hdy);
  Dev x(be, xs, t), y(be, ys, t), dy(be, ys, t), dx(be, xs, t);
  upload_as(be, x.t, hx), upload_as(be, dy.t, hdy);
  Buffer ws_buf(be.allocator(), std::max<size_t>(be.pool_workspace_bytes(d), 1));
  const Tensor ws =
      be.pool_workspace_bytes(d) > 0
          ? Tensor(ws_buf.data(), Shape{static_cast<int64_t>(be.pool_workspace_bytes(d))}, DType::kU8, be.device())
          : Tensor();
  const ref::Vec rx = to_double(hx), rdy = to_double(hdy);
  const std::string sfx = suffix(t);
  const double es = static_cast<double>(dtype_size(t));
  check_output(
      be, op + " fwd" + sfx, shape, y.t, [&] { be.pool_forward(d, x.t, y.t, ws); },
      [&] { return ref::pool_forward(d, rx); }, out_tol(t, 1e-6), "tg kernel", (xs.numel() + ys.numel()) * es);
  be.pool_forward(d, x.t, y.t, ws);
  check_output(
      be, op + " bwd" + sfx, shape, dx.t, [&] { be.pool_backward(d, x.t, y.t, dy.t, ws, dx.t); },
      [&] { return ref::pool_backward(d, rx, rdy); }, out_tol(t, 1e-6), "tg kernel (gather)",
      (2 * xs.numel() + ys.numel()) * es);
}

}  // namespace

void group_pool(CudaBackend& be, const Options& o) {
  const PoolCase cases[] = {
      {"alexnet max1", PoolKind::kMax, 128, 55, 55, 96, 3, 2, Padding::kValid},
      {"resnet50 max", PoolKind::kMax, 64, 112, 112, 64, 3, 2, Padding::kSame},
      {"inception avg", PoolKind::kAvg, 32, 35, 35, 192, 3, 1, Padding::kSame},
  };
  for (const PoolCase& pc : cases) check_pool(be, o, pc, DType::kF32);
  for (DType t : {DType::kF16, DType::kBf16}) {
    check_pool(be, o, cases[1], t);
    check_pool(be, o, cases[2], t);
  }
}

namespace {
// ---- LRN
// --------------------------------------------------------------------------------------------------------------
void check_lrn(CudaBackend& be, const Options& o, const char* name, int64_t n, int64_t h, int64_t w, int64_t c,
               DType t) {
  const std::string op = std::string("lrn ") + name;
  if (skip_dtype(be, t, op)) return;
  LrnDesc d;
  d.n = o.small ? 2 : n, d.h = h, d.w = w, d.c = c;
  d.depth_radius = 2, d.bias = 1.f, d.alpha = 2e-5f, d.beta = 0.75f;  // AlexNet's (the reference's)
  const std::string shape = fmt::format("{}x{}x{}x{} r{}", d.n, h, w, c, d.depth_radius);
  const Shape xs{d.n, h, w, c};
  auto hx = randoms(xs.numel(), 61, -20.f, 20.f), hdy = randoms(xs.numel(), 62);  // conv outputs: large values
  round_all(t, hx), round_all(t, hdy);
  Dev x(be, xs, t), y(be, xs, t), dy(be, xs, t), dx(be, xs, t);
  upload_as(be, x.t, hx), upload_as(be, dy.t, hdy);
  const size_t wsb = be.lrn_workspace_bytes(d);
  Buffer ws_buf(be.allocator(), std::max<size_t>(wsb, 1));
  const Tensor ws =
      wsb > 0 ? Tensor(ws_buf.data(), Shape{static_cast<int64_t>(wsb)}, DType::kU8, be.device()) : Tensor();
  const ref::Vec rx = to_double(hx);
  const std::string sfx = suffix(t);
  const double es = static_cast<double>(dtype_size(t));
  check_output(
      be, op + " fwd" + sfx, shape, y.t, [&] { be.lrn_forward(d, x.t, y.t, ws); },
      [&] { return ref::lrn_forward(d, rx); }, out_tol(t, 1e-5), "tg kernel", 2.0 * xs.numel() * es);
  be.lrn_forward(d, x.t, y.t, ws);
  check_output(
      be, op + " bwd" + sfx, shape, dx.t, [&] { be.lrn_backward(d, x.t, dy.t, ws, dx.t); },
      [&] { return ref::lrn_backward(d, rx, to_double(hdy)); }, out_tol(t, 1e-5), "tg kernel", 3.0 * xs.numel() * es);
}

}  // namespace

void group_lrn(CudaBackend& be, const Options& o) {
  check_lrn(be, o, "alexnet lrn1", 128, 55, 55, 96, DType::kF32);
  check_lrn(be, o, "alexnet lrn2", 128, 27, 27, 256, DType::kF32);
  for (DType t : {DType::kF16, DType::kBf16}) check_lrn(be, o, "alexnet lrn2", 128, 27, 27, 256, t);
}

namespace {
// ---- concat and split
// ------------------------------------------------------------------------------------------------- Inception's mixed
// block: four branches concatenated along the channels, and the split of its gradient. Values move unchanged: every
// element must come back with its exact bits.
void check_concat(CudaBackend& be, const Options& o, DType t) {
  const std::string op = "concat inception";
  if (skip_dtype(be, t, op)) return;
  const int64_t n = o.small ? 2 : 32, h = 35, w = 35;
  const std::vector<int64_t> channels = {64, 64, 96, 32};
  int64_t total = 0;
  for (int64_t c : channels) total += c;
  const std::string shape = fmt::format("{}x{}x{}x(64+64+96+32)", n, h, w);
  std::vector<std::unique_ptr<Dev>> parts, dparts;
  std::vector<std::vector<float>> hparts;
  std::vector<Tensor> pt, dpt;
  for (size_t p = 0; p < channels.size(); ++p) {
    hparts.push_back(randoms(n * h * w * channels[p], 71 + p));
    round_all(t, hparts.back());
    parts.push_back(std::make_unique<Dev>(be, Shape{n, h, w, channels[p]}, t));
    dparts.push_back(std::make_unique<Dev>(be, Shape{n, h, w, channels[p]}, t));
    upload_as(be, parts.back()->t, hparts.back());
    pt.push_back(parts.back()->t), dpt.push_back(dparts.back()->t);
  }
  Dev out(be, Shape{n, h, w, total}, t);
  const std::string sfx = suffix(t);
  const double bytes = 2.0 * n * h * w * total * static_cast<double>(dtype_size(t));
  auto exact = [](const std::vector<float>& got, const std::vector<float>& want) {
    Stats st;
    st.checked = static_cast<int64_t>(got.size());
    for (size_t i = 0; i < got.size(); ++i)
      if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) ++st.bad;
    if (st.bad) st.max_rel = 1;
    return st;
  };
  std::vector<float> want(static_cast<size_t>(n * h * w * total));
  for (int64_t px = 0; px < n * h * w; ++px) {
    int64_t at = px * total;
    for (size_t p = 0; p < channels.size(); ++p)
      for (int64_t c = 0; c < channels[p]; ++c) want[at++] = hparts[p][px * channels[p] + c];
  }
  guarded(op + sfx, shape, [&] {
    auto run = [&] { be.concat_channels(pt, out.t); };
    poison_any(be, out.t);
    run();
    auto first = download_as(be, out.t);
    const double ms = time_ms(be, run);
    report(op + sfx, shape, exact(first, want), ms, "tg kernel", true, true, gbs(bytes, ms));
  });
  guarded("split inception" + sfx, shape, [&] {
    upload_as(be, out.t, want);
    auto run = [&] { be.split_channels(out.t, dpt); };
    for (Tensor& d : dpt) poison_any(be, d);
    run();
    Stats st;
    for (size_t p = 0; p < channels.size(); ++p) st.merge(exact(download_as(be, dpt[p]), hparts[p]));
    const double ms = time_ms(be, run);
    report("split inception" + sfx, shape, st, ms, "tg kernel", true, true, gbs(bytes, ms));
  });
}

}  // namespace

void group_concat(CudaBackend& be, const Options& o) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBf16}) check_concat(be, o, t);
}

}  // namespace tg::ops_check

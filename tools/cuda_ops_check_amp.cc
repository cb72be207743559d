// cuda_ops_check --group amp: the mixed-precision ops of the CUDA backend in f16 and bf16 at a ResNet-50
// activation size (batch 256 x 56 x 56 x 64 = 51M elements), each against a host reference computed in f32 (or
// double) from the same dtype-rounded inputs, with the tolerance stated here and on the line:
//   cast f32 -> t and t -> f32, unscale_and_check (t -> f32 times the inverse loss scale, overflow flag),
//   relu forward/backward, add, dropout forward: the host's f32 value rounded once: tolerance 0 (bit-exact);
//   sum, sum_squares (double) of t values: relative 1e-12; max_abs: exact;
//   softmax cross-entropy on t logits (batch 256, 1000 classes): f32 probs and losses against double, 1e-6 of
//     the largest; dlogits in t: the host's f32 value rounded once: exact.
// A device without the dtype prints a SKIP line. Bandwidth figures count the bytes each op must move.
#include <cmath>
#include <string>
#include <vector>

#include "terngrad/core/philox.h"
#include "terngrad/math/activation_math.h"
#include "tools/cuda_ops_check.h"

namespace tg::ops_check {
namespace {

// got (values of dtype t) against want[i] rounded to t: bit-exact (tolerance 0) element by element.
Stats check_rounded(DType t, const std::vector<float>& got, const std::vector<float>& want) {
  Stats st;
  std::vector<int64_t> bad_per(static_cast<size_t>(omp_get_max_threads()), 0);
#pragma omp parallel for
  for (int64_t i = 0; i < static_cast<int64_t>(got.size()); ++i) {
    const float w = round_to(t, want[i]);
    const bool same = got[i] == w || (std::isnan(got[i]) && std::isnan(w));
    if (!same) ++bad_per[omp_get_thread_num()];
  }
  st.checked = static_cast<int64_t>(got.size());
  for (int64_t b : bad_per) st.bad += b;
  if (st.bad) st.max_rel = st.max_abs = 1;  // not a measure of size here: "some element differs"
  return st;
}

std::string gbps(double bytes, double ms) { return fmt::format("  {:.0f} GB/s", bytes / ms * 1e-6); }

void check_dtype(CudaBackend& be, const Options& o, DType t) {
  if (skip_dtype(be, t, "amp")) return;
  const int64_t n = o.small ? 1000003 : int64_t{256} * 56 * 56 * 64;
  const std::string shape = fmt::format("{}", n), sfx = suffix(t);
  const double es = static_cast<double>(dtype_size(t));
  auto hx = randoms(n, 51, -4.f, 4.f), hy = randoms(n, 52);  // f32 sources (cast), then rounded copies
  Dev f32(be, Shape{n}), a(be, Shape{n}, t), b(be, Shape{n}, t), out(be, Shape{n}, t);
  upload(be, f32.t, hx);

  guarded("cast f32 ->" + sfx, shape, [&] {
    poison_any(be, a.t);
    be.cast(a.t, f32.t);
    const auto first = download_as(be, a.t);
    const Stats st = check_rounded(t, first, hx);
    const double ms = time_ms(be, [&] { be.cast(a.t, f32.t); });
    const bool det = same_bits(first, download_as(be, a.t));
    report("cast f32 ->" + sfx, shape, st, ms, "tg kernel", det, true, "  tol 0" + gbps(n * (4 + es), ms));
  });
  round_all(t, hx), round_all(t, hy);  // from here on the host holds what the device holds
  upload_as(be, a.t, hx), upload_as(be, b.t, hy);
  guarded("cast" + sfx + " -> f32", shape, [&] {
    poison(be, f32.t);
    be.cast(f32.t, a.t);
    const auto first = download(be, f32.t);
    const Stats st = check_rounded(DType::kF32, first, hx);
    const double ms = time_ms(be, [&] { be.cast(f32.t, a.t); });
    const bool det = same_bits(first, download(be, f32.t));
    report("cast" + sfx + " -> f32", shape, st, ms, "tg kernel", det, true, "  tol 0" + gbps(n * (4 + es), ms));
  });
  guarded("unscale_and_check" + sfx, shape, [&] {
    Dev found(be, Shape{1}, DType::kI32);
    be.zero(found.t);
    const float scale = 1.f / 32768.f;
    be.unscale_and_check(a.t, scale, f32.t, found.t);
    std::vector<float> want(hx.size());
#pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) want[i] = hx[i] * scale;
    const auto first = download(be, f32.t);
    Stats st = check_rounded(DType::kF32, first, want);
    int32_t flag = -1;
    be.copy(Tensor(&flag, Shape{1}, DType::kI32, Device::cpu()), found.t);
    std::string extra;
    if (flag != 0) ++st.bad, extra += "  finite input flagged";
    be.unscale_and_check(a.t, 3e38f, f32.t, found.t);  // |x| up to 4 times 3e38: Inf
    be.copy(Tensor(&flag, Shape{1}, DType::kI32, Device::cpu()), found.t);
    if (flag != 1) ++st.bad, extra += "  overflow not flagged";
    const double ms = time_ms(be, [&] { be.unscale_and_check(a.t, scale, f32.t, found.t); });
    const bool det = same_bits(first, download(be, f32.t));  // the timed runs used the same scale
    report("unscale_and_check" + sfx, shape, st, ms, "tg kernel", det, true,
           "  tol 0" + gbps(n * (4 + es), ms) + extra);
  });
  // f32 host results of the element-wise ops, rounded to t by check_rounded.
  std::vector<float> want(hx.size());
  auto elementwise = [&](const std::string& op, double bytes_per, const std::function<void()>& run,
                         const std::function<float(int64_t)>& ref) {
    guarded(op + sfx, shape, [&] {
      poison_any(be, out.t);
      run();
      auto first = download_as(be, out.t);
      run();
      const bool det = same_bits(first, download_as(be, out.t));
#pragma omp parallel for
      for (int64_t i = 0; i < n; ++i) want[i] = ref(i);
      const Stats st = check_rounded(t, first, want);
      const double ms = time_ms(be, run);
      report(op + sfx, shape, st, ms, "tg kernel (linear_kernel)", det, true, "  tol 0" + gbps(n * es * bytes_per, ms));
    });
  };
  elementwise(
      "relu fwd", 2, [&] { be.relu_forward(a.t, out.t); }, [&](int64_t i) { return relu_one(hx[i]); });
  elementwise(
      "relu bwd", 3, [&] { be.relu_backward(a.t, b.t, out.t); },
      [&](int64_t i) { return relu_grad_one(hx[i], hy[i]); });
  elementwise(
      "add", 3, [&] { be.add(a.t, b.t, out.t); }, [&](int64_t i) { return hx[i] + hy[i]; });
  Dev mask(be, Shape{n}, DType::kU8);
  const PhiloxKey key = philox_key(7, 3);
  const float keep = 0.9f, inv = 1.f / keep;
  elementwise(
      "dropout fwd", 2 + 1 / es, [&] { be.dropout_forward(a.t, out.t, mask.t, keep, key, 11, 2); },
      [&](int64_t i) { return philox_uniform(key, static_cast<uint64_t>(i), 11, 2, 0) < keep ? hx[i] * inv : 0.f; });

  guarded("sum / max_abs" + sfx, shape, [&] {
    double sum = 0, abs = 0, sq = 0;
    float mx = 0;
#pragma omp parallel for reduction(+ : sum, abs, sq) reduction(max : mx)
    for (int64_t i = 0; i < n; ++i) {
      sum += hx[i], abs += std::fabs(hx[i]), sq += static_cast<double>(hx[i]) * hx[i];
      mx = std::max(mx, std::fabs(hx[i]));
    }
    const double gs = be.sum(a.t), gq = be.sum_squares(a.t);
    const float gm = be.max_abs(a.t);
    Stats st;  // sum against sum |x|, sum_squares against itself: relative 1e-12; max_abs exact
    st.checked = 3;
    st.max_abs = std::max(std::fabs(gs - sum), std::fabs(gq - sq));
    st.max_rel = std::max(std::fabs(gs - sum) / abs, std::fabs(gq - sq) / sq);
    st.bad = (st.max_rel > 1e-12) + (gm != mx);
    const double ms = time_ms(be, [&] { be.sum(a.t); });
    report("sum / max_abs" + sfx, shape, st, ms, "tg two-pass", gs == be.sum(a.t), true,
           "  tol 1e-12" + gbps(n * es, ms));
  });

  guarded("softmax_xent" + sfx, "256 x 1000", [&] {
    const int64_t rows = 256, k = 1000;
    auto hl = randoms(rows * k, 53, -8.f, 8.f);
    round_all(t, hl);
    std::vector<int32_t> lab(rows);
    for (int64_t r = 0; r < rows; ++r) lab[r] = static_cast<int32_t>((r * 7919) % k);
    Dev logits(be, Shape{rows, k}, t), labels(be, Shape{rows}, DType::kI32), probs(be, Shape{rows, k}),
        losses(be, Shape{rows}), dlogits(be, Shape{rows, k}, t);
    upload_as(be, logits.t, hl);
    be.copy(labels.t, Tensor(lab.data(), Shape{rows}, DType::kI32, Device::cpu()));
    const float ls = 0.1f, off = ls / k, on = 1.f - ls + off;
    be.softmax_xent_forward(logits.t, labels.t, ls, probs.t, losses.t);
    auto gp = download(be, probs.t), gl = download(be, losses.t);
    Stats st;
    for (int64_t r = 0; r < rows; ++r) {  // double reference from the rounded logits
      double mx = hl[r * k];
      for (int64_t j = 0; j < k; ++j) mx = std::max(mx, static_cast<double>(hl[r * k + j]));
      double z = 0;
      for (int64_t j = 0; j < k; ++j) z += std::exp(hl[r * k + j] - mx);
      double loss = 0;
      for (int64_t j = 0; j < k; ++j) {
        const double lp = hl[r * k + j] - mx - std::log(z);
        st.add(gp[r * k + j], std::exp(lp), 1.0, 1e-6);
        loss -= (j == lab[r] ? on : off) * lp;
      }
      st.add(gl[r], loss, std::max(1.0, std::fabs(loss)), 1e-6);
    }
    be.softmax_xent_backward(probs.t, labels.t, ls, 1.f / rows, dlogits.t);
    std::vector<float> wd(static_cast<size_t>(rows * k));
    for (int64_t i = 0; i < rows * k; ++i) wd[i] = (1.f / rows) * (gp[i] - (i % k == lab[i / k] ? on : off));
    st.merge(check_rounded(t, download_as(be, dlogits.t), wd));
    const double ms = time_ms(be, [&] { be.softmax_xent_forward(logits.t, labels.t, ls, probs.t, losses.t); });
    const bool det = same_bits(gp, download(be, probs.t)) && same_bits(gl, download(be, losses.t));
    report("softmax_xent" + sfx, "256 x 1000", st, ms, "tg kernels", det, true,
           "  tol 1e-6 (probs, losses), 0 (dlogits)");
  });
}

}  // namespace

void group_amp(CudaBackend& be, const Options& o) {
  for (DType t : {DType::kF16, DType::kBf16}) check_dtype(be, o, t);
}

}  // namespace tg::ops_check

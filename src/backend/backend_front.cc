// The Backend's public operations: each checks its arguments once (every defined tensor on this backend's
// device; dtypes and element counts of the element-wise, reduction and optimizer operations; the compute-dtype
// rules of backend.h: activations, conv/inner-product weights and their gradients share one compute dtype per
// call, batch norm's per-channel tensors and softmax_xent's probs/losses are f32; pooling's, LRN's and batch norm's
// descriptors and shapes here, the convolution's and inner product's in the implementations; the codec and
// linear-algebra ops are checked whole here, with codec_checks.h) and calls the backend's *_impl, so both backends
// share one contract (the pattern of Layer and Communicator).
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "src/backend/codec_checks.h"
#include "terngrad/backend/backend.h"
#include "terngrad/core/error.h"

namespace tg {

namespace {
void on_device(const Backend& be, const Tensor& t, const char* op, const char* what) {
  if (!t.defined()) return;
  TG_CHECK(t.device() == be.device(), "{} on {}: {} {} is on another device", op, be.device().str(), what, t.str());
}

void on_device(const Backend& be, const Tensor* xs, int count, const char* op, const char* what) {
  TG_CHECK(xs != nullptr || count <= 0, "{} on {}: no {} tensors", op, be.device().str(), what);
  for (int i = 0; i < count; ++i) on_device(be, xs[i], op, what);
}

// t (when defined) is f32 with ref's element count.
void f32_like(const Tensor& ref, const Tensor& t, const char* op, const char* what) {
  if (!t.defined()) return;
  TG_CHECK(t.dtype() == DType::kF32 && t.numel() == ref.numel(), "{}: {} {} must be f32 with {} elements", op, what,
           t.str(), ref.numel());
}

// t (when defined) is f32 (a batch-norm statistic, a loss output); shapes are checked by the implementation.
void f32_only(const Tensor& t, const char* op, const char* what) {
  if (!t.defined()) return;
  TG_CHECK(t.dtype() == DType::kF32, "{}: {} {} must be f32", op, what, t.str());
}

// ref has a compute dtype (f32, f16, bf16) and t (when defined) has the same one: the activations, weights and
// gradients of one call share it.
void same_compute(const Tensor& ref, const Tensor& t, const char* op, const char* what) {
  TG_CHECK(is_compute_dtype(ref.dtype()), "{}: dtype {} of {} is not a compute dtype (f32, f16, bf16)", op,
           dtype_name(ref.dtype()), ref.str());
  if (!t.defined()) return;
  TG_CHECK(t.dtype() == ref.dtype(), "{}: {} {} must have the activations' dtype {}", op, what, t.str(),
           dtype_name(ref.dtype()));
}

using Named = std::initializer_list<std::pair<const Tensor*, const char*>>;
void all_same_compute(const Tensor& ref, Named ts, const char* op) {
  for (auto [t, what] : ts) same_compute(ref, *t, op, what);
}
void all_f32(Named ts, const char* op) {
  for (auto [t, what] : ts) f32_only(*t, op, what);
}

// Pooling's and LRN's descriptors and shapes, for every backend (the implementations only compute): a descriptor
// with an output, kernels and strides of at least 1 and padding smaller than the kernel (a window with no image
// cell); each of `named` defined with its element count.
void pool_desc(const PoolDesc& d, const char* op) {
  TG_CHECK(
      d.n >= 0 && d.c > 0 && d.out_h > 0 && d.out_w > 0 && d.kh >= 1 && d.kw >= 1 && d.stride_h >= 1 && d.stride_w >= 1,
      "{}: empty output {}x{} or a kernel or stride below 1 in {}", op, d.out_h, d.out_w, d.key());
  TG_CHECK(d.pad_top < d.kh && d.pad_bottom < d.kh && d.pad_left < d.kw && d.pad_right < d.kw,
           "{}: padding as large as the kernel in {}", op, d.key());
}
void lrn_desc(const LrnDesc& d, const char* op) {
  TG_CHECK(d.n >= 0 && d.h >= 0 && d.w >= 0 && d.c > 0 && d.depth_radius >= 0,
           "{}: {} needs channels and a depth_radius >= 0", op, d.key());
}
// (The descriptor's key is formatted only when a check fails: a step calls these without allocating.)
using Sized = std::initializer_list<std::tuple<const Tensor*, const char*, int64_t>>;
template <typename Desc>
void sizes(Sized named, const char* op, const Desc& d) {
  for (auto [t, what, numel] : named)
    TG_CHECK(t->raw() != nullptr && t->numel() == numel, "{} {}: {} {} must have {} elements", op, d.key(), what,
             t->raw() ? t->str() : std::string("undefined"), numel);
}

// Batch norm's shapes, for every backend: a non-empty descriptor; x of rows x c elements; gamma of c exactly when
// the descriptor has one (undefined otherwise); each of `channels` (beta, the statistics, their gradients) of c
// elements and each of `like_x` (y, dy, dx) of x's, when defined; every tensor of `required` defined.
void batch_norm_shapes(const BatchNormDesc& d, const char* op, const Tensor& x, const Tensor& gamma, Named channels,
                       Named like_x, Named required) {
  TG_CHECK(d.rows > 0 && d.c > 0, "{}: empty batch norm {}", op, d.key());
  for (auto [t, what] : required) TG_CHECK(t->defined(), "{} {}: tensor `{}` is undefined", op, d.key(), what);
  TG_CHECK(x.defined() && x.numel() == d.rows * d.c, "{} {}: x {} must have {} x {} elements", op, d.key(),
           x.defined() ? x.str() : std::string("undefined"), d.rows, d.c);
  if (d.has_gamma)
    TG_CHECK(gamma.defined() && gamma.numel() == d.c, "{} {}: gamma {} must have {} elements", op, d.key(),
             gamma.defined() ? gamma.str() : std::string("undefined"), d.c);
  else
    TG_CHECK(gamma.raw() == nullptr, "{}: gamma given to a batch norm without gamma ({})", op, d.key());
  for (auto [t, what] : channels)
    TG_CHECK(!t->defined() || t->numel() == d.c, "{} {}: {} {} must have {} elements", op, d.key(), what, t->str(),
             d.c);
  for (auto [t, what] : like_x)
    TG_CHECK(!t->defined() || t->numel() == x.numel(), "{} {}: {} {} must have x's {} elements", op, d.key(), what,
             t->str(), x.numel());
}

// As same_compute, and t has ref's element count.
void compute_like(const Tensor& ref, const Tensor& t, const char* op, const char* what) {
  same_compute(ref, t, op, what);
  if (!t.defined()) return;
  TG_CHECK(t.numel() == ref.numel(), "{}: {} {} must have {} elements", op, what, t.str(), ref.numel());
}
}  // namespace

void Backend::synchronize() {
  synchronize_impl();
  synced_all();
}

void Backend::copy(const Tensor& dst, const Tensor& src) {
  copy_impl(dst, src);
  if (dst.bytes() > 0 && dst.raw() != src.raw() && is_host_memory(dst) != is_host_memory(src)) synced_all();
}

// ---- transfers -------------------------------------------------------------------------------------------------
uint64_t Backend::record_fence() {
  const uint64_t ticket = ++last_ticket_;
  record_fence_impl(ticket);
  return ticket;
}

uint64_t Backend::upload_async(const Tensor& dst, const Tensor& src, uint64_t after) {
  TG_CHECK(dst.bytes() == src.bytes(), "upload_async: sizes differ: {} vs {}", dst.str(), src.str());
  TG_CHECK(!is_host_memory(dst) && is_host_memory(src),
           "upload_async on {}: {} must be this backend's memory and {} host (staging) memory", device().str(),
           dst.str(), src.str());
  TG_CHECK(after <= last_ticket_, "upload_async: fence {} was never recorded (last ticket {})", after, last_ticket_);
  const uint64_t ticket = ++last_ticket_;
  upload_async_impl(dst, src, after, ticket);
  return ticket;
}

uint64_t Backend::download_async(const Tensor& dst, const Tensor& src) {
  TG_CHECK(dst.bytes() == src.bytes(), "download_async: sizes differ: {} vs {}", dst.str(), src.str());
  TG_CHECK(is_host_memory(dst) && !is_host_memory(src),
           "download_async on {}: {} must be host (staging) memory and {} this backend's memory", device().str(),
           dst.str(), src.str());
  const uint64_t ticket = ++last_ticket_;
  download_async_impl(dst, src, ticket);
  return ticket;
}

void Backend::wait_transfer(uint64_t ticket) {
  TG_CHECK(ticket <= last_ticket_, "wait_transfer: ticket {} was never issued (last ticket {})", ticket, last_ticket_);
  if (ticket <= done_) return;  // an earlier synchronisation covered it
  wait_transfer_impl(ticket);
  host_syncs_.fetch_add(1, std::memory_order_relaxed);
  done_ = ticket;
}

namespace {
void cast_args(Backend& be, const Tensor& dst, const Tensor& src, const char* op) {
  on_device(be, dst, op, "dst");
  on_device(be, src, op, "src");
  same_compute(src, src, op, "src");
  same_compute(dst, dst, op, "dst");
  TG_CHECK(dst.numel() == src.numel(), "{}: dst {} and src {} differ in element count", op, dst.str(), src.str());
}
}  // namespace

void Backend::cast(const Tensor& dst, const Tensor& src) {
  cast_args(*this, dst, src, "cast");
  cast_impl(dst, src);
}

void Backend::cast_many(const Tensor* dst, const Tensor* src, int count, const int64_t* transpose_rows) {
  TG_CHECK(count >= 0 && (count == 0 || (dst != nullptr && src != nullptr)), "cast_many: {} pairs", count);
  for (int k = 0; k < count; ++k) {
    cast_args(*this, dst[k], src[k], "cast_many");
    const int64_t rows = transpose_rows ? transpose_rows[k] : 0;
    TG_CHECK(rows >= 0 && (rows == 0 || src[k].numel() % rows == 0),
             "cast_many: pair {} transposes {} rows, which do not divide its {} elements", k, rows, src[k].numel());
  }
  cast_many_impl(dst, src, count, transpose_rows);
}

namespace {
// One unscale's tensors: src (a compute dtype), dst (f32 like src), found (i32 (1)), a finite scale.
void unscale_args(const Backend& be, const Tensor& src, float scale, const Tensor& dst, const Tensor& found,
                  const char* op) {
  on_device(be, src, op, "src");
  on_device(be, dst, op, "dst");
  on_device(be, found, op, "found");
  same_compute(src, src, op, "src");
  TG_CHECK(dst.defined(), "{}: dst is undefined", op);
  f32_like(src, dst, op, "dst");
  TG_CHECK(found.defined() && found.dtype() == DType::kI32 && found.numel() == 1,
           "{}: found {} must be i32 with 1 element", op, found.str());
  TG_CHECK(std::isfinite(scale), "{}: scale {} is not finite", op, scale);
}
}  // namespace

void Backend::unscale_and_check(const Tensor& src, float scale, const Tensor& dst, const Tensor& found) {
  unscale_args(*this, src, scale, dst, found, "unscale_and_check");
  unscale_and_check_impl(src, scale, dst, found);
}

void Backend::unscale_and_check_many(const UnscaleItem* items, int count, float scale, const Tensor& found) {
  const char* op = "unscale_and_check_many";
  TG_CHECK(count >= 0 && (count == 0 || items != nullptr), "{}: {} tensors", op, count);
  for (int k = 0; k < count; ++k) {
    const UnscaleItem& it = items[k];
    unscale_args(*this, it.src, scale, it.dst, found, op);
    const int64_t rows = it.transpose_rows;
    TG_CHECK(rows >= 0 && (rows == 0 || it.src.numel() % rows == 0),
             "{}: tensor {} transposes {} rows, which do not divide its {} elements", op, k, rows, it.src.numel());
    const char *sb = static_cast<const char*>(it.src.raw()), *db = static_cast<const char*>(it.dst.raw());
    TG_CHECK(rows == 0 || it.src.numel() == 0 || sb + it.src.bytes() <= db || db + it.dst.bytes() <= sb,
             "{}: tensor {} is transposed in place ({} and {} overlap)", op, k, it.src.str(), it.dst.str());
    if (!it.decayed) continue;
    on_device(*this, it.decayed, op, "decayed parameter");
    f32_like(it.dst, it.decayed, op, "decayed parameter");
    TG_CHECK(std::isfinite(it.decay), "{}: the weight decay {} of tensor {} is not finite", op, it.decay, k);
    const char *d = static_cast<const char*>(it.dst.raw()), *w = static_cast<const char*>(it.decayed.raw());
    const size_t bytes = 4 * static_cast<size_t>(it.dst.numel());
    TG_CHECK(it.dst.numel() == 0 || w + bytes <= d || d + bytes <= w, "{}: the decayed parameter {} overlaps dst {}",
             op, it.decayed.str(), it.dst.str());
  }
  unscale_and_check_many_impl(items, count, scale, found);
}

void Backend::zero(const Tensor& dst) {
  on_device(*this, dst, "zero", "dst");
  zero_impl(dst);
}

void Backend::fill(const Tensor& dst, float value) {
  on_device(*this, dst, "fill", "dst");
  f32_like(dst, dst, "fill", "dst");
  fill_impl(dst, value);
}

void Backend::add(const Tensor& a, const Tensor& b, const Tensor& out) {
  on_device(*this, a, "add", "a");
  on_device(*this, b, "add", "b");
  on_device(*this, out, "add", "out");
  compute_like(out, a, "add", "a");
  compute_like(out, b, "add", "b");
  add_impl(a, b, out);
}

void Backend::axpy(float alpha, const Tensor& x, const Tensor& y) {
  on_device(*this, x, "axpy", "x");
  on_device(*this, y, "axpy", "y");
  f32_like(y, x, "axpy", "x");
  f32_like(y, y, "axpy", "y");
  axpy_impl(alpha, x, y);
}

void Backend::scale(float alpha, const Tensor& x) {
  on_device(*this, x, "scale", "x");
  f32_like(x, x, "scale", "x");
  scale_impl(alpha, x);
}

void Backend::relu_forward(const Tensor& x, const Tensor& y) {
  on_device(*this, x, "relu_forward", "x");
  on_device(*this, y, "relu_forward", "y");
  compute_like(x, y, "relu_forward", "y");
  relu_forward_impl(x, y);
}

void Backend::relu_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) {
  on_device(*this, y, "relu_backward", "y");
  on_device(*this, dy, "relu_backward", "dy");
  on_device(*this, dx, "relu_backward", "dx");
  compute_like(y, dy, "relu_backward", "dy");
  compute_like(y, dx, "relu_backward", "dx");
  relu_backward_impl(y, dy, dx);
}

void Backend::dropout_forward(const Tensor& x, const Tensor& y, const Tensor& mask, float keep_prob, PhiloxKey key,
                              uint32_t step, uint32_t salt) {
  on_device(*this, x, "dropout_forward", "x");
  on_device(*this, y, "dropout_forward", "y");
  on_device(*this, mask, "dropout_forward", "mask");
  compute_like(x, y, "dropout_forward", "y");
  TG_CHECK(mask.dtype() == DType::kU8 && mask.numel() == x.numel(),
           "dropout_forward: mask {} must be u8 with {} elements", mask.str(), x.numel());
  TG_CHECK(keep_prob > 0.f && keep_prob <= 1.f, "dropout_forward: keep_prob {} is not in (0, 1]", keep_prob);
  dropout_forward_impl(x, y, mask, keep_prob, key, step, salt);
}

void Backend::dropout_backward(const Tensor& dy, const Tensor& mask, float keep_prob, const Tensor& dx) {
  on_device(*this, dy, "dropout_backward", "dy");
  on_device(*this, mask, "dropout_backward", "mask");
  on_device(*this, dx, "dropout_backward", "dx");
  compute_like(dy, dx, "dropout_backward", "dx");
  TG_CHECK(mask.dtype() == DType::kU8 && mask.numel() == dy.numel(),
           "dropout_backward: mask {} must be u8 with {} elements", mask.str(), dy.numel());
  dropout_backward_impl(dy, mask, keep_prob, dx);
}

void Backend::concat_channels(const std::vector<Tensor>& parts, const Tensor& out) {
  on_device(*this, out, "concat_channels", "out");
  for (const Tensor& t : parts) {
    on_device(*this, t, "concat_channels", "parts");
    same_compute(out, t, "concat_channels", "part");
  }
  concat_channels_impl(parts, out);
}

void Backend::split_channels(const Tensor& dout, const std::vector<Tensor>& dparts) {
  on_device(*this, dout, "split_channels", "dout");
  for (const Tensor& t : dparts) {
    on_device(*this, t, "split_channels", "dparts");
    same_compute(dout, t, "split_channels", "dpart");
  }
  split_channels_impl(dout, dparts);
}

double Backend::sum(const Tensor& x) {
  on_device(*this, x, "sum", "x");
  same_compute(x, x, "sum", "x");
  const double v = sum_impl(x);
  synced_all();
  return v;
}

double Backend::sum_squares(const Tensor& x) {
  on_device(*this, x, "sum_squares", "x");
  same_compute(x, x, "sum_squares", "x");
  const double v = sum_squares_impl(x);
  synced_all();
  return v;
}

float Backend::max_abs(const Tensor& x) {
  on_device(*this, x, "max_abs", "x");
  same_compute(x, x, "max_abs", "x");
  const float v = max_abs_impl(x);
  synced_all();
  return v;
}

void Backend::reduce_into(Reduction r, const Tensor* xs, const float* weights, int count, const Tensor& out) {
  TG_CHECK(count >= 0 && (count == 0 || (xs != nullptr && weights != nullptr)), "reduce_into: {} tensors", count);
  on_device(*this, xs, count, "reduce_into", "input");
  for (int k = 0; k < count; ++k)
    TG_CHECK(xs[k].dtype() == DType::kF32, "reduce_into: input {} is {}, not f32", k, xs[k].str());
  on_device(*this, out, "reduce_into", "out");
  TG_CHECK(out.defined() && out.dtype() == DType::kF32 && out.numel() == 1, "reduce_into: out {} must be f32 (1)",
           out.str());
  reduce_into_impl(r, xs, weights, count, out);
}

void Backend::softmax_xent_forward(const Tensor& logits, const Tensor& labels, float label_smoothing,
                                   const Tensor& probs, const Tensor& losses) {
  on_device(*this, logits, "softmax_xent_forward", "logits");
  on_device(*this, labels, "softmax_xent_forward", "labels");
  on_device(*this, probs, "softmax_xent_forward", "probs");
  on_device(*this, losses, "softmax_xent_forward", "losses");
  same_compute(logits, logits, "softmax_xent_forward", "logits");
  TG_CHECK(probs.defined(), "softmax_xent_forward: probs is undefined");
  f32_like(logits, probs, "softmax_xent_forward", "probs");
  f32_only(losses, "softmax_xent_forward", "losses");
  softmax_xent_forward_impl(logits, labels, label_smoothing, probs, losses);
}

void Backend::softmax_xent_backward(const Tensor& probs, const Tensor& labels, float label_smoothing, float scale,
                                    const Tensor& dlogits) {
  on_device(*this, probs, "softmax_xent_backward", "probs");
  on_device(*this, labels, "softmax_xent_backward", "labels");
  on_device(*this, dlogits, "softmax_xent_backward", "dlogits");
  f32_only(probs, "softmax_xent_backward", "probs");
  TG_CHECK(dlogits.defined(), "softmax_xent_backward: dlogits is undefined");
  compute_like(dlogits, dlogits, "softmax_xent_backward", "dlogits");
  TG_CHECK(dlogits.numel() == probs.numel(), "softmax_xent_backward: dlogits {} must have {} elements", dlogits.str(),
           probs.numel());
  softmax_xent_backward_impl(probs, labels, label_smoothing, scale, dlogits);
}

void Backend::conv2d_forward(const ConvDesc& d, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) {
  on_device(*this, x, "conv2d_forward", "x");
  on_device(*this, w, "conv2d_forward", "w");
  on_device(*this, b, "conv2d_forward", "b");
  on_device(*this, y, "conv2d_forward", "y");
  all_same_compute(x, {{&w, "w"}, {&b, "b"}, {&y, "y"}}, "conv2d_forward");
  conv2d_forward_impl(d, x, w, b, y);
}

void Backend::conv2d_backward(const ConvDesc& d, const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dx,
                              const Tensor& dw, const Tensor& db) {
  on_device(*this, x, "conv2d_backward", "x");
  on_device(*this, w, "conv2d_backward", "w");
  on_device(*this, dy, "conv2d_backward", "dy");
  on_device(*this, dx, "conv2d_backward", "dx");
  on_device(*this, dw, "conv2d_backward", "dw");
  on_device(*this, db, "conv2d_backward", "db");
  all_same_compute(x, {{&w, "w"}, {&dy, "dy"}, {&dx, "dx"}, {&dw, "dw"}, {&db, "db"}}, "conv2d_backward");
  conv2d_backward_impl(d, x, w, dy, dx, dw, db);
}

size_t Backend::pool_workspace_bytes(const PoolDesc& d) {
  pool_desc(d, "pool_workspace_bytes");
  return pool_workspace_bytes_impl(d);
}

void Backend::pool_forward(const PoolDesc& d, const Tensor& x, const Tensor& y, const Tensor& workspace) {
  on_device(*this, x, "pool_forward", "x");
  on_device(*this, y, "pool_forward", "y");
  on_device(*this, workspace, "pool_forward", "workspace");
  same_compute(x, y, "pool_forward", "y");
  pool_desc(d, "pool_forward");
  sizes({{&x, "x", d.n * d.h * d.w * d.c}, {&y, "y", d.n * d.out_h * d.out_w * d.c}}, "pool_forward", d);
  pool_forward_impl(d, x, y, workspace);
}

void Backend::pool_backward(const PoolDesc& d, const Tensor& x, const Tensor& y, const Tensor& dy,
                            const Tensor& workspace, const Tensor& dx) {
  on_device(*this, x, "pool_backward", "x");
  on_device(*this, y, "pool_backward", "y");
  on_device(*this, dy, "pool_backward", "dy");
  on_device(*this, workspace, "pool_backward", "workspace");
  on_device(*this, dx, "pool_backward", "dx");
  all_same_compute(x, {{&y, "y"}, {&dy, "dy"}, {&dx, "dx"}}, "pool_backward");
  pool_desc(d, "pool_backward");
  const int64_t in = d.n * d.h * d.w * d.c, out = d.n * d.out_h * d.out_w * d.c;
  sizes({{&x, "x", in}, {&dy, "dy", out}, {&dx, "dx", in}}, "pool_backward", d);
  if (y.defined()) sizes({{&y, "y", out}}, "pool_backward", d);  // no backend reads it
  pool_backward_impl(d, x, y, dy, workspace, dx);
}

size_t Backend::lrn_workspace_bytes(const LrnDesc& d) {
  lrn_desc(d, "lrn_workspace_bytes");
  return lrn_workspace_bytes_impl(d);
}

void Backend::lrn_forward(const LrnDesc& d, const Tensor& x, const Tensor& y, const Tensor& workspace) {
  on_device(*this, x, "lrn_forward", "x");
  on_device(*this, y, "lrn_forward", "y");
  on_device(*this, workspace, "lrn_forward", "workspace");
  same_compute(x, y, "lrn_forward", "y");
  lrn_desc(d, "lrn_forward");
  const int64_t numel = d.n * d.h * d.w * d.c;
  sizes({{&x, "x", numel}, {&y, "y", numel}}, "lrn_forward", d);
  lrn_forward_impl(d, x, y, workspace);
}

void Backend::lrn_backward(const LrnDesc& d, const Tensor& x, const Tensor& dy, const Tensor& workspace,
                           const Tensor& dx) {
  on_device(*this, x, "lrn_backward", "x");
  on_device(*this, dy, "lrn_backward", "dy");
  on_device(*this, workspace, "lrn_backward", "workspace");
  on_device(*this, dx, "lrn_backward", "dx");
  same_compute(x, dy, "lrn_backward", "dy");
  same_compute(x, dx, "lrn_backward", "dx");
  lrn_desc(d, "lrn_backward");
  const int64_t numel = d.n * d.h * d.w * d.c;
  sizes({{&x, "x", numel}, {&dy, "dy", numel}, {&dx, "dx", numel}}, "lrn_backward", d);
  lrn_backward_impl(d, x, dy, workspace, dx);
}

void Backend::batch_norm_forward_training(const BatchNormDesc& d, const Tensor& x, const Tensor& gamma,
                                          const Tensor& beta, const Tensor& y, const Tensor& mean, const Tensor& var,
                                          const BatchNormMoving& moving) {
  on_device(*this, x, "batch_norm_forward_training", "x");
  on_device(*this, gamma, "batch_norm_forward_training", "gamma");
  on_device(*this, beta, "batch_norm_forward_training", "beta");
  on_device(*this, y, "batch_norm_forward_training", "y");
  on_device(*this, mean, "batch_norm_forward_training", "mean");
  on_device(*this, var, "batch_norm_forward_training", "var");
  same_compute(x, y, "batch_norm_forward_training", "y");
  all_f32({{&gamma, "gamma"}, {&beta, "beta"}, {&mean, "mean"}, {&var, "var"}}, "batch_norm_forward_training");
  batch_norm_shapes(d, "batch_norm_forward_training", x, gamma, {{&beta, "beta"}, {&mean, "mean"}, {&var, "var"}},
                    {{&y, "y"}}, {{&beta, "beta"}, {&y, "y"}, {&mean, "mean"}, {&var, "var"}});
  if (moving.mean || moving.var) {
    on_device(*this, moving.mean, "batch_norm_forward_training", "moving mean");
    on_device(*this, moving.var, "batch_norm_forward_training", "moving var");
    all_f32({{&moving.mean, "moving mean"}, {&moving.var, "moving var"}}, "batch_norm_forward_training");
    batch_norm_shapes(d, "batch_norm_forward_training", x, gamma,
                      {{&moving.mean, "moving mean"}, {&moving.var, "moving var"}}, {}, {});
    TG_CHECK(moving.decay >= 0.f && moving.decay <= 1.f,
             "batch_norm_forward_training {}: the moving statistics' decay {} is not in [0, 1]", d.key(), moving.decay);
  }
  batch_norm_forward_training_impl(d, x, gamma, beta, y, mean, var, moving);
}

void Backend::batch_norm_forward_inference(const BatchNormDesc& d, const Tensor& x, const Tensor& gamma,
                                           const Tensor& beta, const Tensor& mean, const Tensor& var, const Tensor& y) {
  on_device(*this, x, "batch_norm_forward_inference", "x");
  on_device(*this, gamma, "batch_norm_forward_inference", "gamma");
  on_device(*this, beta, "batch_norm_forward_inference", "beta");
  on_device(*this, mean, "batch_norm_forward_inference", "mean");
  on_device(*this, var, "batch_norm_forward_inference", "var");
  on_device(*this, y, "batch_norm_forward_inference", "y");
  same_compute(x, y, "batch_norm_forward_inference", "y");
  all_f32({{&gamma, "gamma"}, {&beta, "beta"}, {&mean, "mean"}, {&var, "var"}}, "batch_norm_forward_inference");
  batch_norm_shapes(d, "batch_norm_forward_inference", x, gamma, {{&beta, "beta"}, {&mean, "mean"}, {&var, "var"}},
                    {{&y, "y"}}, {{&beta, "beta"}, {&y, "y"}, {&mean, "mean"}, {&var, "var"}});
  batch_norm_forward_inference_impl(d, x, gamma, beta, mean, var, y);
}

void Backend::batch_norm_backward(const BatchNormDesc& d, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                  const Tensor& var, const Tensor& dy, const Tensor& dx, const Tensor& dgamma,
                                  const Tensor& dbeta, const Tensor& beta) {
  on_device(*this, x, "batch_norm_backward", "x");
  on_device(*this, gamma, "batch_norm_backward", "gamma");
  on_device(*this, mean, "batch_norm_backward", "mean");
  on_device(*this, var, "batch_norm_backward", "var");
  on_device(*this, dy, "batch_norm_backward", "dy");
  on_device(*this, dx, "batch_norm_backward", "dx");
  on_device(*this, dgamma, "batch_norm_backward", "dgamma");
  on_device(*this, dbeta, "batch_norm_backward", "dbeta");
  same_compute(x, dy, "batch_norm_backward", "dy");
  same_compute(x, dx, "batch_norm_backward", "dx");
  all_f32({{&gamma, "gamma"}, {&mean, "mean"}, {&var, "var"}, {&dgamma, "dgamma"}, {&dbeta, "dbeta"}},
          "batch_norm_backward");
  TG_CHECK(d.has_gamma || !dgamma, "batch_norm_backward: dgamma requested from a batch norm without gamma ({})",
           d.key());
  on_device(*this, beta, "batch_norm_backward", "beta");
  all_f32({{&beta, "beta"}}, "batch_norm_backward");
  TG_CHECK(d.relu || !beta, "batch_norm_backward: beta given to {} (only a fused ReLU's mask reads it)", d.key());
  batch_norm_shapes(d, "batch_norm_backward", x, gamma,
                    {{&mean, "mean"}, {&var, "var"}, {&dgamma, "dgamma"}, {&dbeta, "dbeta"}, {&beta, "beta"}},
                    {{&dy, "dy"}, {&dx, "dx"}}, {{&mean, "mean"}, {&var, "var"}, {&dy, "dy"}});
  TG_CHECK(!d.relu || beta, "batch_norm_backward {}: a fused ReLU's mask needs beta (undefined)", d.key());
  batch_norm_backward_impl(d, x, gamma, mean, var, dy, dx, dgamma, dbeta, beta);
}

void Backend::inner_product_forward(const InnerProductDesc& d, const Tensor& x, const Tensor& w, const Tensor& b,
                                    const Tensor& y) {
  on_device(*this, x, "inner_product_forward", "x");
  on_device(*this, w, "inner_product_forward", "w");
  on_device(*this, b, "inner_product_forward", "b");
  on_device(*this, y, "inner_product_forward", "y");
  all_same_compute(x, {{&w, "w"}, {&b, "b"}, {&y, "y"}}, "inner_product_forward");
  inner_product_forward_impl(d, x, w, b, y);
}

void Backend::inner_product_backward(const InnerProductDesc& d, const Tensor& x, const Tensor& w, const Tensor& dy,
                                     const Tensor& dx, const Tensor& dw, const Tensor& db) {
  on_device(*this, x, "inner_product_backward", "x");
  on_device(*this, w, "inner_product_backward", "w");
  on_device(*this, dy, "inner_product_backward", "dy");
  on_device(*this, dx, "inner_product_backward", "dx");
  on_device(*this, dw, "inner_product_backward", "dw");
  on_device(*this, db, "inner_product_backward", "db");
  all_same_compute(x, {{&w, "w"}, {&dy, "dy"}, {&dx, "dx"}, {&dw, "dw"}, {&db, "db"}}, "inner_product_backward");
  inner_product_backward_impl(d, x, w, dy, dx, dw, db);
}

void Backend::optimizer_update(const OptimizerStep& step, const Tensor& w, const Tensor& g, const Tensor& s1,
                               const Tensor& s2, const Tensor& ema) {
  on_device(*this, w, "optimizer_update", "w");
  on_device(*this, g, "optimizer_update", "g");
  on_device(*this, s1, "optimizer_update", "s1");
  on_device(*this, s2, "optimizer_update", "s2");
  on_device(*this, ema, "optimizer_update", "ema");
  f32_like(w, w, "optimizer_update", "w");
  f32_like(w, g, "optimizer_update", "g");
  f32_like(w, s1, "optimizer_update", "s1");
  f32_like(w, s2, "optimizer_update", "s2");
  f32_like(w, ema, "optimizer_update", "ema");
  optimizer_update_impl(step, w, g, s1, s2, ema);
}

namespace {
// One coded update's checks; its parts (each a whole coded tensor: part = 0) appended to `parts`. Every part's
// codes are checked to lie inside the average's view before any is appended.
void coded_update_parts(const Backend& be, const CodedUpdateItem& it, const char* op,
                        std::vector<CodedUpdateItem>& parts) {
  const Tensor& w = it.w;
  const CodedAverage& g = it.g;
  TG_CHECK(g.scaler.defined(), "{}: the coded average of {} has no scaler", op, w.str());
  TG_CHECK(g.gathered.defined() != g.code_sums.defined(),
           "{}: the coded average of {} needs exactly one of gathered codes and code sums", op, w.str());
  on_device(be, w, op, "w");
  on_device(be, g.gathered, op, "gathered codes");
  on_device(be, g.code_sums, op, "code sums");
  on_device(be, g.scaler, op, "scaler");
  on_device(be, it.s1, op, "s1");
  on_device(be, it.s2, op, "s2");
  on_device(be, it.ema, op, "ema");
  f32_like(w, w, op, "w");
  f32_like(w, it.s1, op, "s1");
  f32_like(w, it.s2, op, "s2");
  f32_like(w, it.ema, op, "ema");
  TG_CHECK(g.part >= 0 && g.part_stride >= 0, "{}: the coded average of {} has parts of {} elements {} bytes apart", op,
           w.str(), g.part, g.part_stride);
  if (g.part == 0) {
    codec_checks::scalers(g.scaler, w.numel(), g.bucket, op);
    parts.push_back(it);
    return;
  }
  auto part = [](const Tensor& t, int64_t b, int64_t n) {
    return t ? t.reshaped(Shape{t.numel()}).slice0(b, b + n) : Tensor();
  };
  for_each_coded_part(g, w.numel(), [&](const CodedAverage& c, int64_t b, int64_t n) {
    parts.push_back({part(w, b, n), c, part(it.s1, b, n), part(it.s2, b, n), part(it.ema, b, n)});
  });
}
}  // namespace

void Backend::optimizer_update_coded(const OptimizerStep& step, const Tensor& w, const CodedAverage& g,
                                     const Tensor& s1, const Tensor& s2, const Tensor& ema) {
  const CodedUpdateItem item{w, g, s1, s2, ema};
  optimizer_update_coded_many(step, &item, 1);
}

void Backend::optimizer_update_coded_many(const OptimizerStep& step, const CodedUpdateItem* items, int count) {
  const char* op = "optimizer_update_coded";
  TG_CHECK(count >= 0 && (count == 0 || items != nullptr), "{}: {} tensors", op, count);
  // Every item's parts, each a whole coded tensor, all checked before the first is written (this thread's list:
  // no allocation once it has grown).
  thread_local std::vector<CodedUpdateItem> parts;
  parts.clear();
  for (int k = 0; k < count; ++k) coded_update_parts(*this, items[k], op, parts);
  optimizer_update_coded_many_impl(step, parts.data(), static_cast<int>(parts.size()));
  parts.clear();
}

void Backend::ema_update(float decay, const Tensor& w, const Tensor& ema) {
  on_device(*this, w, "ema_update", "w");
  on_device(*this, ema, "ema_update", "ema");
  f32_like(w, w, "ema_update", "w");
  f32_like(w, ema, "ema_update", "ema");
  ema_update_impl(decay, w, ema);
}

namespace {
// An error-feedback residual or a decayed parameter (when defined): f32 with g's element count, on the device, not
// overlapping g.
void residual_like(const Backend& be, const Tensor& g, const Tensor& r, const char* op) {
  if (!r.defined()) return;
  on_device(be, r, op, "residual");
  f32_like(g, r, op, "residual");
  const char* gb = static_cast<const char*>(g.raw());
  const char* rb = static_cast<const char*>(r.raw());
  const size_t bytes = 4 * static_cast<size_t>(g.numel());
  TG_CHECK(g.numel() == 0 || rb + bytes <= gb || gb + bytes <= rb, "{}: the residual {} overlaps g {}", op, r.str(),
           g.str());
}
}  // namespace

// The codec ops' checks, all here (codec_checks.h holds the shared pieces): the backends' *_impl only read
// the pointers.
namespace {
namespace cc = codec_checks;

// A tensor the op needs: defined (or empty) and on the backend's device.
void required(const Backend& be, const Tensor& t, const char* op, const char* what) {
  TG_CHECK(t.raw() != nullptr || (t.defined() && t.numel() == 0), "{}: {} is undefined", op, what);
  on_device(be, t, op, what);
}

// The workers' inputs (1..kMaxCodecInputs f32 tensors of out's element count, on the device) and out.
void codec_inputs(const Backend& be, const Tensor* xs, int count, const Tensor& out, DType out_dtype, const char* op) {
  required(be, out, op, "out");
  cc::dtype(out, out_dtype, op, "out");
  cc::inputs(xs, count, out.numel(), op);
  for (int w = 0; w < count; ++w) required(be, xs[w], op, "input");
}

// One encode's tensors: g (f32), its scalers, the packed codes (u8, ceil(n/4)), the zero count (i32 (1), or
// undefined) and the residual (f32 like g in other memory, or undefined).
void encode_args(const Backend& be, const Tensor& g, const Tensor& scaler, const Tensor& packed,
                 const Tensor& zero_count, const Tensor& residual, int64_t bucket, const char* op) {
  required(be, g, op, "g"), required(be, scaler, op, "scaler"), required(be, packed, op, "packed codes");
  const int64_t n = g.numel();
  cc::dtype(g, DType::kF32, op, "g"), cc::dtype(packed, DType::kU8, op, "packed codes");
  cc::scalers(scaler, n, bucket, op);
  cc::numel(packed, ternary_packed_bytes(n), op, "packed codes");
  if (zero_count) {
    on_device(be, zero_count, op, "zero count");
    cc::dtype(zero_count, DType::kI32, op, "zero count"), cc::numel(zero_count, 1, op, "zero count");
    TG_CHECK(n <= INT32_MAX, "{}: {} elements overflow an i32 zero count", op, n);
  }
  residual_like(be, g, residual, op);
}

void decoded_like(const Backend& be, const Tensor& g, const Tensor& sum, DType sum_dtype, const char* op,
                  const char* what) {
  required(be, g, op, "g"), required(be, sum, op, what);
  cc::dtype(g, DType::kF32, op, "g"), cc::dtype(sum, sum_dtype, op, what), cc::numel(sum, g.numel(), op, what);
}
}  // namespace

namespace {
// One scaler's tensors: g (f32), its scalers, the residual and the weight-decayed parameter (f32 like g in other
// memory, or undefined) with a finite coefficient.
void scaler_args(const Backend& be, const Tensor& g, const Tensor& scaler, const Tensor& residual,
                 const Tensor& decayed, float decay, int64_t bucket, const char* op, const char* decay_op) {
  required(be, g, op, "g"), required(be, scaler, op, "scaler");
  cc::dtype(g, DType::kF32, op, "g");
  cc::scalers(scaler, g.numel(), bucket, op);
  residual_like(be, g, residual, op);
  residual_like(be, g, decayed, decay_op);
  TG_CHECK(std::isfinite(decay), "{}: the weight decay {} is not finite", op, decay);
}
}  // namespace

void Backend::ternary_scaler(const Tensor& g, float clip_factor, const Tensor& scaler, const Tensor& residual,
                             const Tensor& decayed, float decay, int64_t bucket) {
  scaler_args(*this, g, scaler, residual, decayed, decay, bucket, "ternary_scaler", "ternary_scaler (weight decay)");
  ternary_scaler_impl(g, clip_factor, scaler, residual, decayed, decay, bucket);
}

void Backend::ternary_scaler_many(const TernaryScalerItem* items, int count, float clip_factor) {
  TG_CHECK(count >= 0 && (count == 0 || items != nullptr), "ternary_scaler_many: {} tensors", count);
  for (int k = 0; k < count; ++k) {
    const TernaryScalerItem& it = items[k];
    scaler_args(*this, it.g, it.scaler, it.residual, it.decayed, it.decay, it.bucket, "ternary_scaler_many",
                "ternary_scaler_many (weight decay)");
  }
  ternary_scaler_many_impl(items, count, clip_factor);
}

void Backend::ternary_encode(const Tensor& g, const Tensor& scaler, PhiloxKey key, uint32_t step, uint32_t tensor,
                             const Tensor& packed, const Tensor& zero_count, int64_t bucket) {
  encode_args(*this, g, scaler, packed, zero_count, Tensor(), bucket, "ternary_encode");
  ternary_encode_impl(g, scaler, key, step, tensor, packed, zero_count, bucket);
}

void Backend::ternary_encode_many(const TernaryEncodeItem* items, int count, PhiloxKey key, uint32_t step) {
  TG_CHECK(count >= 0 && (count == 0 || items != nullptr), "ternary_encode_many: {} tensors", count);
  for (int k = 0; k < count; ++k) {
    const TernaryEncodeItem& it = items[k];
    encode_args(*this, it.g, it.scaler, it.packed, it.zero_count, it.residual, it.bucket, "ternary_encode_many");
  }
  ternary_encode_many_impl(items, count, key, step);
}

void Backend::ternary_sum_codes(const Tensor& packed, int64_t stride, int num_workers, const Tensor& code_sums) {
  const char* op = "ternary_sum_codes";
  required(*this, packed, op, "packed codes"), required(*this, code_sums, op, "code sums");
  cc::dtype(code_sums, DType::kI8, op, "code sums");
  cc::workers_packed(packed, stride, num_workers, code_sums.numel(), op);
  ternary_sum_codes_impl(packed, stride, num_workers, code_sums);
}

void Backend::max_scalers(const Tensor* xs, int count, const Tensor& out) {
  codec_inputs(*this, xs, count, out, DType::kF32, "max_scalers");
  max_scalers_impl(xs, count, out);
}

void Backend::ternary_decode_sums(const Tensor& code_sums, const Tensor& scaler, int num_workers, const Tensor& g,
                                  int64_t bucket) {
  const char* op = "ternary_decode_sums";
  decoded_like(*this, g, code_sums, DType::kI8, op, "code sums");
  required(*this, scaler, op, "scaler");
  cc::scalers(scaler, g.numel(), bucket, op);
  TG_CHECK(num_workers >= 1, "{}: {} workers", op, num_workers);
  ternary_decode_sums_impl(code_sums, scaler, num_workers, g, bucket);
}

void Backend::ternary_decode_gathered(const Tensor& gathered, int64_t stride, int num_workers, const Tensor& scaler,
                                      const Tensor& g, int64_t bucket) {
  const char* op = "ternary_decode_gathered";
  required(*this, g, op, "g"), required(*this, gathered, op, "packed codes"), required(*this, scaler, op, "scaler");
  cc::dtype(g, DType::kF32, op, "g");
  cc::scalers(scaler, g.numel(), bucket, op);
  cc::workers_packed(gathered, stride, num_workers, g.numel(), op);
  ternary_decode_gathered_impl(gathered, stride, num_workers, scaler, g, bucket);
}

void Backend::encode_f16_sum(const Tensor* xs, int count, const Tensor& out) {
  codec_inputs(*this, xs, count, out, DType::kF16, "encode_f16_sum");
  encode_f16_sum_impl(xs, count, out);
}

void Backend::encode_f32_sum(const Tensor* xs, int count, const Tensor& out) {
  codec_inputs(*this, xs, count, out, DType::kF32, "encode_f32_sum");
  cc::not_a_later_input(xs, count, out, "encode_f32_sum");
  encode_f32_sum_impl(xs, count, out);
}

void Backend::average_f16(const Tensor* xs, int count, const Tensor& out) {
  codec_inputs(*this, xs, count, out, DType::kF32, "average_f16");
  average_f16_impl(xs, count, out);
}

void Backend::average_f32(const Tensor* xs, int count, const Tensor& out) {
  codec_inputs(*this, xs, count, out, DType::kF32, "average_f32");
  average_f32_impl(xs, count, out);
}

void Backend::decode_f16_sum(const Tensor& sum, int num_workers, const Tensor& g) {
  decoded_like(*this, g, sum, DType::kF16, "decode_f16_sum", "sum");
  decode_f16_sum_impl(sum, num_workers, g);
}

void Backend::decode_f32_sum(const Tensor& sum, int num_workers, const Tensor& g) {
  decoded_like(*this, g, sum, DType::kF32, "decode_f32_sum", "sum");
  decode_f32_sum_impl(sum, num_workers, g);
}

namespace {
// t is an f32 matrix (rank 2) with at least one element.
void f32_matrix(const Tensor& t, const char* op, const char* what) {
  TG_CHECK(t.defined() && t.dtype() == DType::kF32 && t.shape().rank() == 2 && t.numel() > 0,
           "{}: {} {} must be a non-empty f32 matrix (rank 2)", op, what, t.str());
}
bool overlap(const Tensor& x, const Tensor& y) {
  const char* xb = static_cast<const char*>(x.raw());
  const char* yb = static_cast<const char*>(y.raw());
  return xb < yb + y.bytes() && yb < xb + x.bytes();
}
}  // namespace

void Backend::matmul(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, float beta,
                     const Tensor& c) {
  const char* op = "matmul";
  f32_matrix(a, op, "a"), f32_matrix(b, op, "b"), f32_matrix(c, op, "c");
  on_device(*this, a, op, "a"), on_device(*this, b, op, "b"), on_device(*this, c, op, "c");
  const int64_t m = transpose_a ? a.shape()[1] : a.shape()[0], k = transpose_a ? a.shape()[0] : a.shape()[1];
  const int64_t kb = transpose_b ? b.shape()[1] : b.shape()[0], n = transpose_b ? b.shape()[0] : b.shape()[1];
  TG_CHECK(k == kb && c.shape()[0] == m && c.shape()[1] == n,
           "{}: op(a) {} is {}x{}, op(b) {} is {}x{}: c {} must be {}x{} and the inner sizes agree", op, a.str(), m, k,
           b.str(), kb, n, c.str(), m, n);
  TG_CHECK(!overlap(c, a) && !overlap(c, b), "{}: c {} shares memory with a or b", op, c.str());
  matmul_impl(a, transpose_a, b, transpose_b, beta, c);
}

void Backend::orthogonalize_columns(const Tensor& m, float epsilon) {
  const char* op = "orthogonalize_columns";
  f32_matrix(m, op, "m");
  on_device(*this, m, op, "m");
  TG_CHECK(m.shape()[1] <= m.shape()[0], "{}: m {} has more columns than rows: they cannot be orthonormal", op,
           m.str());
  TG_CHECK(std::isfinite(epsilon) && epsilon >= 0, "{}: epsilon {} must be finite and >= 0", op, epsilon);
  orthogonalize_columns_impl(m, epsilon);
}

}  // namespace tg

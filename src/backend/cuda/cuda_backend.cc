// CudaBackend's ops that are not layers: memory, element-wise, dropout, channel concat/split, reductions, softmax
// cross-entropy and the optimizer updates. Activations of any compute dtype (F32, F16, BF16) are handed to the
// kernels as raw pointers with their dtype. The runtime (streams, lanes, transfers, allocators, the factory):
// cuda_runtime.cc; the layer ops: cuda_conv.cc, cuda_pool.cc, cuda_lrn.cc, cuda_batch_norm.cc,
// cuda_inner_product.cc; kernels in kernels/*.cu.
#include "src/backend/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <cstring>
#include <vector>

#include "src/backend/codec_checks.h"
#include "src/backend/cuda/cuda_kernels.h"
#include "terngrad/backend/cuda_check.h"
#include "terngrad/backend/ternary_cuda.h"

namespace tg {

namespace {
void check_same_numel(const Tensor& a, const Tensor& b, const char* op) {
  TG_CHECK(a.numel() == b.numel(), "{}: element counts differ: {} vs {}", op, a.str(), b.str());
}
}  // namespace

// ---- memory ------------------------------------------------------------------------------------------------
void CudaBackend::copy_impl(const Tensor& dst, const Tensor& src) {
  TG_CHECK(dst.bytes() == src.bytes(), "copy: sizes differ: {} vs {}", dst.str(), src.str());
  for (const Tensor* t : {&dst, &src})
    TG_CHECK(t->device().is_cpu() || t->device() == device(), "copy on {}: {} is on another device", device().str(),
             t->str());
  if (dst.bytes() == 0 || dst.raw() == src.raw()) return;
  CudaDeviceGuard guard(index_);
  cudaMemcpyKind kind = dst.device().is_cpu()
                            ? (src.device().is_cpu() ? cudaMemcpyHostToHost : cudaMemcpyDeviceToHost)
                            : (src.device().is_cpu() ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToDevice);
  TG_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), dst.bytes(), kind, stream()));
  // A host destination is read by the caller right after, and a host source may be reused at once: wait for the
  // copy (the front counts it as the host synchronisation it is; a step uses upload_async / download_async).
  if (dst.device().is_cpu() || src.device().is_cpu()) sync_and_check();
}

void CudaBackend::zero_impl(const Tensor& dst) {
  if (dst.bytes() == 0) return;
  check_on_device(dst, "zero", "dst");
  CudaDeviceGuard guard(index_);
  TG_CUDA_CHECK(cudaMemsetAsync(dst.raw(), 0, dst.bytes(), stream()));
}

void CudaBackend::fill_impl(const Tensor& dst, float value) {
  check_on_device(dst, "fill", "dst");
  CudaDeviceGuard guard(index_);
  cuda_kernels::fill_f32(dst.data<float>(), dst.numel(), value, stream());
}

// ---- element-wise --------------------------------------------------------------------------------------------
void CudaBackend::add_impl(const Tensor& a, const Tensor& b, const Tensor& out) {
  check_same_numel(a, b, "add");
  check_same_numel(a, out, "add");
  check_on_device(a, "add", "a"), check_on_device(b, "add", "b"), check_on_device(out, "add", "out");
  CudaDeviceGuard guard(index_);
  const DType t = compute_dtype("add", a, {&b, &out});
  cuda_kernels::add(t, a.raw(), b.raw(), out.raw(), a.numel(), stream());
}

void CudaBackend::axpy_impl(float alpha, const Tensor& x, const Tensor& y) {
  check_same_numel(x, y, "axpy");
  check_on_device(x, "axpy", "x"), check_on_device(y, "axpy", "y");
  CudaDeviceGuard guard(index_);
  cuda_kernels::axpy_f32(alpha, x.data<float>(), y.data<float>(), x.numel(), stream());
}

void CudaBackend::scale_impl(float alpha, const Tensor& x) {
  check_on_device(x, "scale", "x");
  CudaDeviceGuard guard(index_);
  cuda_kernels::scale_f32(alpha, x.data<float>(), x.numel(), stream());
}

void CudaBackend::relu_forward_impl(const Tensor& x, const Tensor& y) {
  check_same_numel(x, y, "relu");
  check_on_device(x, "relu", "x"), check_on_device(y, "relu", "y");
  CudaDeviceGuard guard(index_);
  cuda_kernels::relu_forward(compute_dtype("relu", x, {&y}), x.raw(), y.raw(), x.numel(), stream());
}

void CudaBackend::relu_backward_impl(const Tensor& y, const Tensor& dy, const Tensor& dx) {
  check_same_numel(y, dy, "relu_backward");
  check_same_numel(y, dx, "relu_backward");
  check_on_device(y, "relu_backward", "y"), check_on_device(dy, "relu_backward", "dy");
  check_on_device(dx, "relu_backward", "dx");
  CudaDeviceGuard guard(index_);
  const DType t = compute_dtype("relu_backward", y, {&dy, &dx});
  cuda_kernels::relu_backward(t, y.raw(), dy.raw(), dx.raw(), y.numel(), stream());
}

void CudaBackend::dropout_forward_impl(const Tensor& x, const Tensor& y, const Tensor& mask, float keep_prob,
                                       PhiloxKey key, uint32_t step, uint32_t salt) {
  check_same_numel(x, y, "dropout");
  check_same_numel(x, mask, "dropout");
  TG_CHECK(keep_prob > 0.f && keep_prob <= 1.f, "dropout keep_prob {} is not in (0, 1]", keep_prob);
  check_on_device(x, "dropout", "x"), check_on_device(y, "dropout", "y"), check_on_device(mask, "dropout", "mask");
  CudaDeviceGuard guard(index_);
  const DType t = compute_dtype("dropout", x, {&y});
  cuda_kernels::dropout_forward(t, x.raw(), y.raw(), mask.data<uint8_t>(), x.numel(), keep_prob, key, step, salt,
                                stream());
}

void CudaBackend::dropout_backward_impl(const Tensor& dy, const Tensor& mask, float keep_prob, const Tensor& dx) {
  check_same_numel(dy, dx, "dropout_backward");
  check_same_numel(dy, mask, "dropout_backward");
  check_on_device(dy, "dropout_backward", "dy"), check_on_device(mask, "dropout_backward", "mask");
  check_on_device(dx, "dropout_backward", "dx");
  CudaDeviceGuard guard(index_);
  const DType t = compute_dtype("dropout_backward", dy, {&dx});
  cuda_kernels::dropout_backward(t, dy.raw(), mask.data<uint8_t>(), keep_prob, dx.raw(), dy.numel(), stream());
}

// Channel concat/split are strided 2-D copies: rows = N*H*W, a part's row is c elements (of the compute dtype,
// es bytes each) at offset `offset`.
void CudaBackend::concat_channels_impl(const std::vector<Tensor>& parts, const Tensor& out) {
  check_on_device(out, "concat", "out");
  const int64_t c_out = out.shape().dim(-1);
  const int64_t rows = c_out ? out.numel() / c_out : 0;
  const size_t es = dtype_size(compute_dtype("concat", out, {}));
  char* po = static_cast<char*>(out.raw());
  CudaDeviceGuard guard(index_);
  int64_t offset = 0;
  for (const Tensor& p : parts) {
    const int64_t c = p.shape().dim(-1);
    TG_CHECK(p.numel() == rows * c, "concat: part {} does not match output {}", p.str(), out.str());
    TG_CHECK(offset + c <= c_out, "concat: parts have more channels than the output {}", out.str());
    check_on_device(p, "concat", "part");
    compute_dtype("concat", out, {&p});
    if (rows * c > 0)
      TG_CUDA_CHECK(cudaMemcpy2DAsync(po + offset * es, c_out * es, p.raw(), c * es, c * es, rows,
                                      cudaMemcpyDeviceToDevice, stream()));
    offset += c;
  }
  TG_CHECK(offset == c_out, "concat: parts have {} channels, output {}", offset, c_out);
}

void CudaBackend::split_channels_impl(const Tensor& dout, const std::vector<Tensor>& dparts) {
  check_on_device(dout, "split", "dout");
  const int64_t c_out = dout.shape().dim(-1);
  const int64_t rows = c_out ? dout.numel() / c_out : 0;
  const size_t es = dtype_size(compute_dtype("split", dout, {}));
  const char* po = static_cast<const char*>(dout.raw());
  CudaDeviceGuard guard(index_);
  int64_t offset = 0;
  for (const Tensor& p : dparts) {
    const int64_t c = p.shape().dim(-1);
    TG_CHECK(offset + c <= c_out, "split: parts have more channels than {}", dout.str());
    if (p) {
      TG_CHECK(p.numel() == rows * c, "split: part {} does not match {}", p.str(), dout.str());
      check_on_device(p, "split", "part");
      compute_dtype("split", dout, {&p});
      if (rows * c > 0)
        TG_CUDA_CHECK(cudaMemcpy2DAsync(p.raw(), c * es, po + offset * es, c_out * es, c * es, rows,
                                        cudaMemcpyDeviceToDevice, stream()));
    }
    offset += c;
  }
  TG_CHECK(offset == c_out, "split: parts have {} channels, dout {}", offset, c_out);
}

// ---- reductions -----------------------------------------------------------------------------------------------
double CudaBackend::reduce_to_host(const Tensor& x, bool squares, const char* op) {
  check_on_device(x, op, "x");
  if (x.numel() == 0) return 0.0;
  CudaDeviceGuard guard(index_);
  auto* partials = static_cast<double*>(lane_->reduce_partials.data());
  auto* result = static_cast<double*>(lane_->reduce_result.data());
  cuda_kernels::reduce_sum_f64(x.dtype(), x.raw(), x.numel(), squares, partials, result, stream());
  TG_CUDA_CHECK(cudaMemcpyAsync(host_pinned_, result, sizeof(double), cudaMemcpyDeviceToHost, stream()));
  sync_and_check();
  double v;
  std::memcpy(&v, host_pinned_, sizeof(double));
  return v;
}

double CudaBackend::sum_impl(const Tensor& x) { return reduce_to_host(x, false, "sum"); }
double CudaBackend::sum_squares_impl(const Tensor& x) { return reduce_to_host(x, true, "sum_squares"); }

// Tables of up to kReduceTable tensors; the running double between tables lives in the lane's reduce_result. Empty
// tensors add 0 and are left out (a null pointer would be read by nobody, but the table stays dense).
void CudaBackend::reduce_into_impl(Reduction r, const Tensor* xs, const float* weights, int count, const Tensor& out) {
  check_on_device(out, "reduce_into", "out");
  for (int k = 0; k < count; ++k)
    if (xs[k].numel() > 0) check_on_device(xs[k], "reduce_into", "input");
  CudaDeviceGuard guard(index_);
  void* scratch = workspace(cuda_kernels::reduce_table_scratch_bytes());
  auto* running = static_cast<double*>(lane_->reduce_result.data());
  cuda_kernels::ReduceTable t;
  bool first = true;
  int k = 0;
  do {
    t.count = 0;
    for (; k < count && t.count < cuda_kernels::kReduceTable; ++k) {
      if (xs[k].numel() == 0) continue;
      t.x[t.count] = xs[k].data<float>(), t.n[t.count] = xs[k].numel(), t.w[t.count] = weights[k];
      ++t.count;
    }
    const bool last = k >= count;
    cuda_kernels::reduce_table(t, r == Reduction::kSumSquares, first, last, running, out.data<float>(), scratch,
                               stream());
    first = false;
  } while (k < count);
}

float CudaBackend::max_abs_impl(const Tensor& x) {
  check_on_device(x, "max_abs", "x");
  if (x.numel() == 0) return 0.f;
  CudaDeviceGuard guard(index_);
  auto* partials = static_cast<double*>(lane_->reduce_partials.data());
  auto* result = static_cast<double*>(lane_->reduce_result.data());
  cuda_kernels::reduce_max_abs(x.dtype(), x.raw(), x.numel(), partials, result, stream());
  TG_CUDA_CHECK(cudaMemcpyAsync(host_pinned_, result, sizeof(double), cudaMemcpyDeviceToHost, stream()));
  sync_and_check();
  double v;
  std::memcpy(&v, host_pinned_, sizeof(double));
  return static_cast<float>(v);  // exact: v holds a float
}

// ---- softmax cross-entropy --------------------------------------------------------------------------------------
void CudaBackend::softmax_xent_forward_impl(const Tensor& logits, const Tensor& labels, float label_smoothing,
                                            const Tensor& probs, const Tensor& losses) {
  TG_CHECK(logits.shape().rank() == 2, "softmax_xent: logits {} must be (N, K)", logits.str());
  const int64_t n = logits.shape()[0], k = logits.shape()[1];
  TG_CHECK(labels.numel() == n && probs.numel() == n * k && losses.numel() == n,
           "softmax_xent: logits {}, labels {}, probs {}, losses {} do not match", logits.str(), labels.str(),
           probs.str(), losses.str());
  TG_CHECK(n < (int64_t{1} << 31), "softmax_xent: {} examples exceed the label check's int range", n);
  check_on_device(logits, "softmax_xent", "logits"), check_on_device(labels, "softmax_xent", "labels");
  check_on_device(probs, "softmax_xent", "probs"), check_on_device(losses, "softmax_xent", "losses");
  if (n == 0) return;
  CudaDeviceGuard guard(index_);
  cuda_kernels::softmax_xent_forward(logits.dtype(), logits.raw(), labels.data<int32_t>(), n, k, label_smoothing,
                                     probs.data<float>(), losses.data<float>(),
                                     static_cast<unsigned long long*>(label_flag_.data()), stream());
  label_check_pending_ = true, label_k_ = k;  // read at the next host sync (no wait here)
}

void CudaBackend::softmax_xent_backward_impl(const Tensor& probs, const Tensor& labels, float label_smoothing,
                                             float scale, const Tensor& dlogits) {
  TG_CHECK(probs.shape().rank() == 2, "softmax_xent_backward: probs {} must be (N, K)", probs.str());
  const int64_t n = probs.shape()[0], k = probs.shape()[1];
  TG_CHECK(labels.numel() == n && dlogits.numel() == n * k,
           "softmax_xent_backward: probs {}, labels {}, dlogits {} do not match", probs.str(), labels.str(),
           dlogits.str());
  check_on_device(probs, "softmax_xent_backward", "probs"), check_on_device(labels, "softmax_xent_backward", "labels");
  check_on_device(dlogits, "softmax_xent_backward", "dlogits");
  if (n == 0) return;
  CudaDeviceGuard guard(index_);
  cuda_kernels::softmax_xent_backward(dlogits.dtype(), probs.data<float>(), labels.data<int32_t>(), n, k,
                                      label_smoothing, scale, dlogits.raw(),
                                      static_cast<unsigned long long*>(label_flag_.data()), stream());
  label_check_pending_ = true, label_k_ = k;
}

// ---- optimizer ------------------------------------------------------------------------------------------------------
void CudaBackend::optimizer_update_impl(const OptimizerStep& step, const Tensor& w, const Tensor& g, const Tensor& s1,
                                        const Tensor& s2, const Tensor& ema) {
  check_same_numel(w, g, "optimizer_update");
  check_on_device(w, "optimizer_update", "w"), check_on_device(g, "optimizer_update", "g");
  const bool needs1 = step.kind != OptimizerKind::kGd;
  const bool needs2 = step.kind == OptimizerKind::kAdam || step.kind == OptimizerKind::kRmsprop;
  TG_CHECK(!needs1 || (s1 && s1.numel() == w.numel()), "optimizer_update: first slot missing for {}", w.str());
  TG_CHECK(!needs2 || (s2 && s2.numel() == w.numel()), "optimizer_update: second slot missing for {}", w.str());
  if (needs1) check_on_device(s1, "optimizer_update", "slot 1");
  if (needs2) check_on_device(s2, "optimizer_update", "slot 2");
  const bool with_ema = step.ema_decay >= 0.f;
  TG_CHECK(!with_ema || (ema && ema.numel() == w.numel()), "optimizer_update: moving average missing for {}", w.str());
  if (with_ema) check_on_device(ema, "optimizer_update", "ema");
  CudaDeviceGuard guard(index_);
  cuda_kernels::optimizer_update_f32(step, w.data<float>(), g.data<float>(), needs1 ? s1.data<float>() : nullptr,
                                     needs2 ? s2.data<float>() : nullptr, with_ema ? ema.data<float>() : nullptr,
                                     w.numel(), stream());
}

// One coded update's checks on this device; the kernels' form of it.
CodedUpdateCuda CudaBackend::coded_update_args(const OptimizerStep& step, const Tensor& w, const CodedAverage& g,
                                               const Tensor& s1, const Tensor& s2, const Tensor& ema) const {
  namespace cc = codec_checks;
  const char* op = "optimizer_update_coded";
  check_on_device(w, op, "w");
  const bool needs1 = step.kind != OptimizerKind::kGd;
  const bool needs2 = step.kind == OptimizerKind::kAdam || step.kind == OptimizerKind::kRmsprop;
  TG_CHECK(!needs1 || (s1 && s1.numel() == w.numel()), "{}: first slot missing for {}", op, w.str());
  TG_CHECK(!needs2 || (s2 && s2.numel() == w.numel()), "{}: second slot missing for {}", op, w.str());
  if (needs1) check_on_device(s1, op, "slot 1");
  if (needs2) check_on_device(s2, op, "slot 2");
  const bool with_ema = step.ema_decay >= 0.f;
  TG_CHECK(!with_ema || (ema && ema.numel() == w.numel()), "{}: moving average missing for {}", op, w.str());
  if (with_ema) check_on_device(ema, op, "ema");
  TG_CHECK(g.num_workers >= 1, "{}: {} workers", op, g.num_workers);
  cc::scalers(g.scaler, w.numel(), g.bucket, op);
  check_on_device(g.scaler, op, "scaler");
  if (g.gathered) {
    cc::workers_packed(g.gathered, g.stride, g.num_workers, w.numel(), op);
    check_on_device(g.gathered, op, "packed codes");
  } else {
    cc::dtype(g.code_sums, DType::kI8, op, "code sums");
    cc::numel(g.code_sums, w.numel(), op, "code sums");
    check_on_device(g.code_sums, op, "code sums");
  }
  return {w.data<float>(),
          g.gathered ? g.gathered.data<uint8_t>() : nullptr,
          g.stride,
          g.code_sums ? g.code_sums.data<int8_t>() : nullptr,
          g.num_workers,
          g.scaler.data<float>(),
          g.bucket,
          needs1 ? s1.data<float>() : nullptr,
          needs2 ? s2.data<float>() : nullptr,
          with_ema ? ema.data<float>() : nullptr,
          w.numel()};
}

void CudaBackend::optimizer_update_coded_impl(const OptimizerStep& step, const Tensor& w, const CodedAverage& g,
                                              const Tensor& s1, const Tensor& s2, const Tensor& ema) {
  const CodedUpdateCuda item = coded_update_args(step, w, g, s1, s2, ema);
  CudaDeviceGuard guard(index_);
  optimizer_update_coded_table_cuda(step, &item, 1, stream());
}

// Tables of up to kCodedUpdateTableCuda tensors (or parts), one launch each; every item checked first.
void CudaBackend::optimizer_update_coded_many_impl(const OptimizerStep& step, const CodedUpdateItem* items, int count) {
  static_assert(Backend::kCodedUpdateTable <= kCodedUpdateTableCuda, "a table holds Backend::kCodedUpdateTable");
  thread_local std::vector<CodedUpdateCuda> all;  // this thread's list: no allocation once it has grown
  all.clear();
  for (int k = 0; k < count; ++k) {
    const CodedUpdateItem& it = items[k];
    all.push_back(coded_update_args(step, it.w, it.g, it.s1, it.s2, it.ema));
  }
  CudaDeviceGuard guard(index_);
  for (int first = 0; first < count; first += kCodedUpdateTableCuda) {
    const int m = count - first < kCodedUpdateTableCuda ? count - first : kCodedUpdateTableCuda;
    optimizer_update_coded_table_cuda(step, all.data() + first, m, stream());
  }
}

void CudaBackend::ema_update_impl(float decay, const Tensor& w, const Tensor& ema) {
  check_same_numel(w, ema, "ema_update");
  check_on_device(w, "ema_update", "w"), check_on_device(ema, "ema_update", "ema");
  CudaDeviceGuard guard(index_);
  cuda_kernels::ema_update_f32(decay, w.data<float>(), ema.data<float>(), w.numel(), stream());
}

}  // namespace tg

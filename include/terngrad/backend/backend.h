// Backend: one object per device ("cpu" or "cuda:<k>") that owns everything device-specific: the stream or
// thread pool, library handles (oneDNN engine/stream, cuDNN, cuBLAS), a workspace arena and a cache of
// primitives/algorithms keyed by op descriptor. Layers, optimizers and codecs call ops on the backend they
// are handed; nothing is global. The CPU backend is complete and is the oracle for the CUDA one.
//
// Conventions: every op writes (never accumulates into) its outputs unless its name says otherwise; all
// tensors live on this backend's device (copy excepted). The public operations are non-virtual: they check
// their arguments once (src/backend/backend_front.cc: devices, dtypes and element counts) and call the
// backend's *_impl, so the CPU and CUDA backends share one contract; layers check the shapes they know.
//
// Compute dtypes (mixed precision, --precision fp32|fp16|bf16). A net computes in one dtype C (F32, F16 or
// BF16; is_compute_dtype). Activation tensors (x, y, dx, dy of relu, dropout, concat_channels/split_channels,
// add, pool, lrn, conv2d, inner_product, batch norm; softmax_xent's logits and dlogits) may be any C; within
// one call all of them share one dtype (the first activation's). conv2d/inner_product weights w and bias b
// have the activations' dtype (the per-step half copy of the fp32 master weights), and so do their
// gradients dw, db. Batch norm's gamma, beta, mean, var, dgamma, dbeta stay F32; softmax_xent's probs and
// losses stay F32 (computed in f32 from C logits) and its dlogits are written in C. Dropout masks are u8.
// Every op accumulates in f32 (or in double where it already did). sum/sum_squares/max_abs accept any C.
// The optimizer, the EMA, the gradient codec and axpy/scale/fill stay F32 only (master weights and fp32
// gradients). Ops dispatch on the tensors' dtypes (the op descriptors carry none); primitive and algorithm
// caches include the dtype in their key. A compute dtype an op or a backend does not run throws one line
// naming the op and the dtype, never a silent wrong result; supports_compute/why_not say it up front.
//
// Host synchronisations (host_syncs()): the points where the host waits for the device, counted the same way by
// every backend (the CPU backend counts where a GPU would wait), so a test on the CPU bounds what a step costs a
// GPU. Counted: synchronize(); the host-result reductions (sum, sum_squares, max_abs); a copy() between host
// memory and this backend's memory, either way (a device-to-host copy waits for it; a host-to-device copy from
// pageable memory waits for the stream); wait_transfer() of a transfer that no earlier synchronisation covered.
// Everything else is enqueued: ops, record_fence(), upload_async(), download_async().
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "terngrad/backend/backend_config.h"
#include "terngrad/backend/backend_impls.h"
#include "terngrad/backend/op_desc.h"
#include "terngrad/core/buffer.h"
#include "terngrad/core/error.h"
#include "terngrad/core/philox.h"
#include "terngrad/core/tensor.h"
#include "terngrad/math/ternary_math.h"

namespace tg {

// The moving statistics a batch norm's training forward updates (Backend::batch_norm_forward_training): mean and
// var (f32 (C)) each become decay * moving + (1 - decay) * the batch's, rounded as scale() then axpy() round them
// (the product with decay, the product with 1 - decay, their sum). Undefined tensors: no update.
struct BatchNormMoving {
  Tensor mean, var;
  float decay = 0.f;
};

// One tensor of Backend::ternary_encode_many: its gradient, scalers (f32 (ternary_num_scalers(n, bucket)) on the
// device), Philox tensor counter, packed codes and (optional) zero count, as ternary_encode takes them; an optional
// residual (f32 like g, error feedback) receives ternary_residual_value(g[i], s, code i) in the same pass.
struct TernaryEncodeItem {
  Tensor g, scaler;
  uint32_t tensor = 0;
  Tensor packed, zero_count;
  Tensor residual;
  int64_t bucket = 0;  // elements per scaler (ternary_math.h); 0: one scaler for the tensor
};

// One tensor of Backend::unscale_and_check_many: the scaled gradient, its f32 destination, the optional
// weight-decayed parameter (f32 like dst, other memory) with its coefficient, and transpose_rows > 0 when src is
// read as a (rows x n/rows) matrix and written transposed (a filter-layout gradient back to ours; src and dst then
// other memory).
struct UnscaleItem {
  Tensor src, dst;
  Tensor decayed;
  float decay = 0.f;
  int64_t transpose_rows = 0;
};

// One tensor of Backend::ternary_scaler_many: ternary_scaler's arguments (the gradient, its scalers, an optional
// residual and weight-decayed parameter with its coefficient, the elements per scaler).
struct TernaryScalerItem {
  Tensor g, scaler;
  Tensor residual, decayed;
  float decay = 0.f;
  int64_t bucket = 0;  // elements per scaler (ternary_math.h); 0: one scaler for the tensor
};

// A tensor's TernGrad average still in its coded form, as the exchange received it: element i is
// ternary_decode_value(scaler[ternary_scaler_of(i, bucket)], the sum of the workers' codes of element i,
// num_workers), the codes either
// `gathered` (allgather2: num_workers packed blocks of ceil(n/4) bytes, worker w's at byte w * stride) or their
// int8 `code_sums` (allreduce8: one per element). Backend::optimizer_update_coded decodes it inside the update.
// The codes may come in parts (the hierarchical scheme: one per local rank's shard of the tensor): with part > 0,
// elements [p * part, min(n, (p + 1) * part)) are coded as a tensor of their own whose codes (or sums) start at
// byte p * part_stride of the view; part = 0: one part, the whole tensor. With per-bucket scalers a part is a whole
// number of buckets (its scalers follow the previous part's).
struct CodedAverage {
  Tensor gathered;  // u8, or undefined when code_sums is given
  int64_t stride = 0;
  Tensor code_sums;  // i8 (n), or undefined when gathered is given
  Tensor scaler;     // f32 (ternary_num_scalers(n, bucket)) on the device: the shared scalers
  int num_workers = 1;
  int64_t part = 0, part_stride = 0;
  int64_t bucket = 0;  // elements per scaler; 0: one scaler
  bool defined() const { return scaler.defined(); }
};

// One tensor of Backend::optimizer_update_coded_many: optimizer_update_coded's arguments.
struct CodedUpdateItem {
  Tensor w;
  CodedAverage g;
  Tensor s1, s2, ema;
};

// Calls fn(c, begin, count) for each part of the coded average g of an n-element tensor: c codes elements
// [begin, begin + count) as a whole tensor (one part). Every part's codes are checked to lie inside g's view
// before fn is first called (so a refused average writes nothing).
template <class Fn>
void for_each_coded_part(const CodedAverage& g, int64_t n, Fn&& fn) {
  TG_CHECK(g.part >= 0 && g.part_stride >= 0, "coded average: parts of {} elements {} bytes apart", g.part,
           g.part_stride);
  if (g.part == 0) return fn(g, int64_t{0}, n);
  const Tensor& codes = g.gathered ? g.gathered : g.code_sums;
  auto part = [&](int64_t p, int64_t count) {
    const int64_t at = p * g.part_stride;
    const int64_t end = g.gathered ? at + (g.num_workers - 1) * g.stride + ternary_packed_bytes(count) : at + count;
    TG_CHECK(codes && end <= codes.numel(), "coded average: part {} ({} elements) needs bytes [{}, {}) of {}", p, count,
             at, end, codes.str());
    CodedAverage c = g;
    c.part = c.part_stride = 0;
    if (g.gathered)
      c.gathered = g.gathered.slice0(at, codes.numel());
    else
      c.code_sums = g.code_sums.slice0(at, at + count);
    if (g.bucket > 0 && n > g.bucket) {  // the part's own buckets
      TG_CHECK(g.part % g.bucket == 0, "coded average: parts of {} elements are not whole buckets of {}", g.part,
               g.bucket);
      const int64_t first = p * g.part / g.bucket, k = ternary_num_scalers(count, g.bucket);
      TG_CHECK(first + k <= g.scaler.numel(), "coded average: part {} needs scalers [{}, {}) of {}", p, first,
               first + k, g.scaler.str());
      c.scaler = g.scaler.slice0(first, first + k);
    }
    return c;
  };
  for (int64_t begin = 0, p = 0; begin < n; begin += g.part, ++p) part(p, std::min(g.part, n - begin));
  for (int64_t begin = 0, p = 0; begin < n; begin += g.part, ++p) {
    const int64_t count = std::min(g.part, n - begin);
    fn(part(p, count), begin, count);
  }
}

// The dtypes a net can compute in (activations, layer weights' half copies): F32, F16, BF16.
constexpr bool is_compute_dtype(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBf16; }

// What a backend has cost the host so far (Backend::counters): host synchronisations and device launches.
struct DeviceCounters {
  int64_t host_syncs = 0;
  int64_t launches = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Device device() const = 0;
  virtual std::string name() const = 0;  // "cpu (oneDNN 2.6, 2 threads)", "cuda:0 (NVIDIA H200)"
  virtual Allocator& allocator() = 0;
  // Waits until every op enqueued so far has run (a host synchronisation).
  void synchronize();
  // Makes the calling thread this backend's (its CUDA device current; its CPU thread count for the thread's
  // compute team): a replica thread calls it once before using the backend (train/replica_threads.h).
  virtual void bind_thread() {}
  // The CUDA stream (a cudaStream_t) ops are enqueued on now (the side stream between enter_side_stream() and
  // leave_side_stream(), else the main stream), for a device communicator that must order its collectives with
  // the ops (NCCL); nullptr on the CPU.
  virtual void* native_stream() { return nullptr; }

  // ---- the side stream (a GPU's second stream: the gradient exchange beside backward) -------------------------
  // Ops called between enter_side_stream() and leave_side_stream() are enqueued on the side stream, after
  // everything enqueued on the main stream before enter (the side stream waits for an event); they may then run
  // while later main-stream ops (the rest of backward) run. join_side_stream() makes the main stream wait for
  // everything enqueued on the side stream so far (ops enqueued on the main stream after it see its results).
  // The side stream has its own workspace and library handles. Not nested; called from the backend's thread.
  // Without a second stream (the CPU: every op has run when its call returns) the three do nothing.
  virtual bool has_side_stream() const { return false; }
  virtual void enter_side_stream() {}
  virtual void leave_side_stream() {}
  // The same from a failing path (a destructor while an error propagates): never throws, does nothing when not on
  // the side stream.
  virtual void leave_side_stream_after_error() noexcept {}
  virtual void join_side_stream() {}

  // ---- device time marks (the timeline's spans of a GPU's streams) ----------------------------------------------
  // A mark after the ops enqueued so far on the current stream: on a GPU a timing event recorded there (a ring of
  // the last marks), on the CPU the host's time now (its ops have run when their calls return). mark_time(m): when
  // the device passed the mark, on the host's steady clock; nullopt while it has not (it never waits) or once the
  // ring has reused it.
  using MarkClock = std::chrono::steady_clock;
  virtual uint64_t record_mark() { return static_cast<uint64_t>(MarkClock::now().time_since_epoch().count()); }
  virtual std::optional<MarkClock::time_point> mark_time(uint64_t mark) {
    return MarkClock::time_point(MarkClock::duration(static_cast<MarkClock::rep>(mark)));
  }

  // Whether this backend runs compute dtype t (F32 always); why_not(t) is one line naming what is missing
  // ("bf16 needs AVX512_BF16 or AMX; this CPU has avx2", "fp16 compute needs a GPU (--device cuda)"), empty
  // when t is supported.
  // The device memory still free (CUDA: cudaMemGetInfo); nothing for the CPU, whose memory is the host's.
  virtual std::optional<size_t> free_memory() { return std::nullopt; }
  virtual bool supports_compute(DType t) const = 0;
  virtual std::string why_not(DType t) const = 0;

  // ---- memory -------------------------------------------------------------------------------------
  // Byte copy between any two tensors of equal byte size (host<->device allowed, explicit only here). A copy
  // between host memory and this backend's memory waits (a host synchronisation): a step uses the transfers
  // below instead.
  void copy(const Tensor& dst, const Tensor& src);
  // Whether t lies in host memory rather than in this backend's own memory (on the CPU: not allocated by
  // allocator()).
  virtual bool is_host_memory(const Tensor& t) const { return t.device().is_cpu(); }

  // ---- transfers without waiting: the step's input in, the step's values out -----------------------------------
  // Every call below returns a ticket (increasing). A ticket is done when everything enqueued before it has run.
  // Host memory that the device reads and writes directly (page-locked on CUDA, plain host memory on the CPU);
  // its buffers are host tensors (Device::cpu()).
  virtual Allocator& staging_allocator() = 0;
  // A fence: the ops enqueued so far.
  uint64_t record_fence();
  // dst (this backend's memory) = src (staging memory), copied once the fence `after` is done (0: at once; so
  // dst is not overwritten while ops enqueued before `after` still read it), on a copy engine beside the ops
  // (CUDA: a copy stream); ops enqueued after this call see dst written. src must stay unchanged until the
  // returned ticket is done (wait_transfer).
  uint64_t upload_async(const Tensor& dst, const Tensor& src, uint64_t after = 0);
  // dst (staging memory) = src (this backend's memory) once the ops enqueued so far have run; dst holds the
  // values when wait_transfer(ticket) returns.
  uint64_t download_async(const Tensor& dst, const Tensor& src);
  // Waits until `ticket` (and hence every earlier ticket) is done: a host synchronisation, unless an earlier one
  // already covered it (then it returns at once and counts nothing).
  void wait_transfer(uint64_t ticket);
  // Host synchronisations made so far (see the top of this file); any thread may read it.
  int64_t host_syncs() const { return host_syncs_.load(std::memory_order_relaxed); }
  // Device launches so far (CUDA: every kernel of ours and cuDNN/cuBLAS compute call of this process, every GPU;
  // cuda_check.h); 0 on the CPU. With host_syncs, what a step costs the host in launches and waits.
  virtual int64_t device_launches() const { return 0; }
  DeviceCounters counters() const { return {host_syncs(), device_launches()}; }
  void zero(const Tensor& dst);               // any dtype
  void fill(const Tensor& dst, float value);  // f32

  // ---- precision ------------------------------------------------------------------------------------
  // dst = src converted, any of F32/F16/BF16 to any, same element count: round to nearest even; f16
  // overflow gives +-Inf; NaN stays NaN. Same dtype: a copy.
  void cast(const Tensor& dst, const Tensor& src);
  // cast() for `count` pairs (dst[k] = src[k] converted, the same bits as one cast() each), in as few launches as
  // the backend can: the per-step half copy of a net's weights (CUDA: one launch per kCastTable pairs of one dtype
  // pair instead of one per tensor). count 0 does nothing. transpose_rows (or null: none): where
  // transpose_rows[k] > 0, src[k] is read as a (rows x n/rows) matrix and written transposed, (n/rows x rows), in
  // the same pass (a convolution's (KH*KW*C/g) x out_c weights into the (out_c, KH, KW, C/g) filter layout; the
  // same dtype too); rows must divide the element count.
  static constexpr int kCastTable = 64;
  void cast_many(const Tensor* dst, const Tensor* src, int count, const int64_t* transpose_rows = nullptr);
  // Whether this backend's convolutions read (out_c, KH, KW, C/groups) weights without a transpose
  // (ConvDesc::filter_ohwi; CUDA: cuDNN's NHWC filter layout). Every backend accepts both layouts.
  virtual bool conv2d_filter_ohwi() const { return false; }
  // dst (F32, src's element count) = float(src) * scale, src F32/F16/BF16 (a gradient computed on a scaled
  // loss, unscaled to fp32). found (I32 (1)) is set to 1 when any product is not finite; never cleared here
  // (the caller zeroes it once per step, so one flag covers all the step's tensors). Nothing synchronizes.
  // dst may be src when src is F32.
  void unscale_and_check(const Tensor& src, float scale, const Tensor& dst, const Tensor& found);
  // unscale_and_check of `count` tensors (items: an array the caller owns) with one scale and flag, each followed by
  // its weight decay where `decayed` is given (dst += decay * decayed: axpy's bits; the check is on the unscaled
  // gradient alone; an item with transpose_rows writes src transposed): a layer's parameter gradients at once
  // (CUDA: one launch per run of items with one src dtype, up to kUnscaleTable of them, instead of one per tensor
  // and one per decay).
  static constexpr int kUnscaleTable = 16;
  void unscale_and_check_many(const UnscaleItem* items, int count, float scale, const Tensor& found);

  // ---- element-wise -----------------------------------------------------------------------------------
  // add, relu and dropout take any compute dtype (one per call); axpy and scale are f32.
  void add(const Tensor& a, const Tensor& b, const Tensor& out);            // out = a + b; out may be a or b
  void axpy(float alpha, const Tensor& x, const Tensor& y);                 // y += alpha * x
  void scale(float alpha, const Tensor& x);                                 // x *= alpha
  void relu_forward(const Tensor& x, const Tensor& y);                      // y = max(x, 0)
  void relu_backward(const Tensor& y, const Tensor& dy, const Tensor& dx);  // dx = dy * (y > 0)
  // Inverted dropout: mask (u8, same numel) = u < keep_prob with u from Philox(key; element, step, salt);
  // y = x * mask / keep_prob.
  void dropout_forward(const Tensor& x, const Tensor& y, const Tensor& mask, float keep_prob, PhiloxKey key,
                       uint32_t step, uint32_t salt);
  void dropout_backward(const Tensor& dy, const Tensor& mask, float keep_prob, const Tensor& dx);
  // Channel concat of NHWC tensors (same N, H, W) into out, and its adjoint (split dout into the parts).
  void concat_channels(const std::vector<Tensor>& parts, const Tensor& out);
  void split_channels(const Tensor& dout, const std::vector<Tensor>& dparts);

  // ---- reductions (synchronous; the result is on the host) -------------------------------------------
  // x of any compute dtype, accumulated in double. max_abs: NaN anywhere gives NaN.
  double sum(const Tensor& x);
  double sum_squares(const Tensor& x);
  float max_abs(const Tensor& x);
  // The same sums left on the device (nothing synchronizes): out (f32 (1)) = the sum over k < count of
  // weights[k] * (sum of xs[k] (kSum) or of its squares (kSumSquares)); each tensor's sum in double, in one fixed
  // order per backend (the same bits on every run), the weighted terms added in double in k order, rounded to
  // f32 once. xs: f32 tensors (any shapes; an array the caller owns); count 0 writes 0. The loss's mean and the
  // weight decay term of a step (Net) come from here.
  void reduce_into(Reduction r, const Tensor* xs, const float* weights, int count, const Tensor& out);

  // ---- loss -----------------------------------------------------------------------------------------
  // logits (N, K) of any compute dtype, labels (N) i32 in [0, K); probs and losses f32 (computed in f32 or
  // double from the logits); dlogits in the logits' dtype. target = (1-ls)*onehot + ls/K. probs (N, K) = softmax,
  // losses (N) = -sum target*log softmax. A label outside [0, K) is an error naming the example: thrown by this
  // call on the CPU; on CUDA (which does not wait for the kernel) by the next call that synchronizes (a
  // reduction, a copy to or from the host, synchronize()).
  void softmax_xent_forward(const Tensor& logits, const Tensor& labels, float label_smoothing, const Tensor& probs,
                            const Tensor& losses);
  // dlogits = scale * (probs - target)
  void softmax_xent_backward(const Tensor& probs, const Tensor& labels, float label_smoothing, float scale,
                             const Tensor& dlogits);

  // ---- layers ---------------------------------------------------------------------------------------
  // Activations, conv/inner-product weights and biases and their gradients share one compute dtype per call;
  // batch norm's per-channel tensors are f32 (see the top of this file).
  // x (N,H,W,C), w (KH,KW,C/g,O), b (O) or undefined, y (N,OH,OW,O)
  void conv2d_forward(const ConvDesc& d, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y);
  // Any of dx, dw, db may be undefined (not needed).
  void conv2d_backward(const ConvDesc& d, const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dx,
                       const Tensor& dw, const Tensor& db);

  // Bytes of per-call state a pooling forward keeps for its backward (e.g. max indices); 0 if none.
  size_t pool_workspace_bytes(const PoolDesc& d);
  void pool_forward(const PoolDesc& d, const Tensor& x, const Tensor& y, const Tensor& workspace);
  void pool_backward(const PoolDesc& d, const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& workspace,
                     const Tensor& dx);

  size_t lrn_workspace_bytes(const LrnDesc& d);
  void lrn_forward(const LrnDesc& d, const Tensor& x, const Tensor& y, const Tensor& workspace);
  void lrn_backward(const LrnDesc& d, const Tensor& x, const Tensor& dy, const Tensor& workspace, const Tensor& dx);

  // Batch norm over x (rows = N*H*W, C), per channel. gamma (C) is defined iff d.has_gamma (else 1 is used and
  // dgamma must be undefined); beta (C) is required by both forwards. Training: the batch mean and the
  // population variance (C) are computed and written to mean/var. Backward is the gradient of the training
  // forward, computed from the given mean/var (the forward's); dx, dgamma and dbeta may each be undefined.
  // Statistics are accumulated in double over fixed row chunks: the same bits on any thread count. With d.relu
  // both forwards write max(y, 0), bit for bit the batch norm followed by relu_forward, and the backward takes dy of
  // that output: the bits of relu_backward then the batch norm's backward, the ReLU's mask (y > 0) recomputed from
  // x, the statistics, gamma and `beta` (required then), so y is not read.
  // The training forward also updates `moving` when given (one pass over C, no launch of its own on a GPU).
  void batch_norm_forward_training(const BatchNormDesc& d, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                   const Tensor& y, const Tensor& mean, const Tensor& var,
                                   const BatchNormMoving& moving = {});
  void batch_norm_forward_inference(const BatchNormDesc& d, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                    const Tensor& mean, const Tensor& var, const Tensor& y);
  void batch_norm_backward(const BatchNormDesc& d, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                           const Tensor& var, const Tensor& dy, const Tensor& dx, const Tensor& dgamma,
                           const Tensor& dbeta, const Tensor& beta = Tensor());

  // x (N,in), w (in,out), b (out) or undefined, y (N,out)
  void inner_product_forward(const InnerProductDesc& d, const Tensor& x, const Tensor& w, const Tensor& b,
                             const Tensor& y);
  void inner_product_backward(const InnerProductDesc& d, const Tensor& x, const Tensor& w, const Tensor& dy,
                              const Tensor& dx, const Tensor& dw, const Tensor& db);

  // ---- optimizer --------------------------------------------------------------------------------------
  // One update of w with gradient g; s1/s2 are the optimizer's slots (momentum accumulator; adam m, v;
  // rmsprop ms, mom), undefined when the optimizer has fewer. With step.ema_decay >= 0 the same pass also
  // updates ema (w's moving average) from the new w: one pass over the parameters instead of two.
  void optimizer_update(const OptimizerStep& step, const Tensor& w, const Tensor& g, const Tensor& s1, const Tensor& s2,
                        const Tensor& ema);
  // optimizer_update with a gradient that is a coded average (CodedAverage, w's element count), decoded element
  // by element inside the update's pass: the same bits as ternary_decode_gathered / ternary_decode_sums into a
  // tensor and then optimizer_update, without writing or reading the decoded gradient (2 x 4n bytes of memory
  // traffic fewer, the update reads n/4 bytes per worker of codes or n of sums instead of 4n of gradient).
  void optimizer_update_coded(const OptimizerStep& step, const Tensor& w, const CodedAverage& g, const Tensor& s1,
                              const Tensor& s2, const Tensor& ema);
  // optimizer_update_coded of `count` tensors (items: an array the caller owns; their w and slots must not overlap)
  // with one step: the same bits as count calls (CUDA: one launch per kCodedUpdateTable parts instead of one per
  // tensor and part). Every item (and part) is checked before anything is written.
  static constexpr int kCodedUpdateTable = 32;
  void optimizer_update_coded_many(const OptimizerStep& step, const CodedUpdateItem* items, int count);
  // ema = decay * ema + (1 - decay) * w
  void ema_update(float decay, const Tensor& w, const Tensor& ema);

  // ---- gradient codec ----------------------------------------------------------------------------------
  // The per-tensor operations of the gradient codings; the schemes' range codings (TernaryCoding in
  // src/exchange/schemes/terngrad/, DenseCoding in src/exchange/) string them over a policy's tensors and fused
  // buffers. terngrad/math/ternary_math.h defines the scaler
  // (including the order of its double sums), the codes, the packed format and the decode; every backend
  // gives the same bits (the CPU's loops are the reference; tests/codec_ops_test.cc compares the CUDA kernels
  // with them on a machine with a GPU).
  // Gradients are f32 of any shape (n = numel); packed codes are u8 (ceil(n/4) bytes); a tensor's scalers are an
  // f32 (ternary_num_scalers(n, bucket)) tensor on the device (a view of a scaler vector) that the ops read there:
  // nothing goes to the host, nothing synchronizes, nothing allocates. `bucket` (ternary_math.h): elements per
  // scaler, element i using scaler i / bucket; 0 (the default) is one scaler for the tensor, f32 (1); else a
  // multiple of kScalerBucketAlign. A piece of a fused buffer is a view (Tensor::slice0 of the rank-1 buffer).
  // Shapes and dtypes are checked.

  // scaler = ternary_scaler_from_stats(sigma, max|g|, clip_factor) of g from one pass (sum and sum of
  // squares in double in ternary_math.h's fixed order, max|g|): NaN when g holds a NaN or an Inf, 0 for n = 0;
  // with buckets each bucket's ternary_bucket_scaler (a second pass for the buckets' max|g|).
  // With a residual (f32 like g, other memory; error feedback): g += residual first, in the same pass (the same
  // bits as axpy(1, residual, g) and then the scaler). With `decayed` (f32 like g, other memory: the parameter;
  // weight decay): g += decay * decayed before that, in the same pass (the same bits as axpy(decay, decayed, g)).
  void ternary_scaler(const Tensor& g, float clip_factor, const Tensor& scaler, const Tensor& residual = Tensor(),
                      const Tensor& decayed = Tensor(), float decay = 0.f, int64_t bucket = 0);
  // ternary_scaler of `count` tensors (items: an array the caller owns; their g must not overlap) with one
  // clip factor: the same bits as count calls (CUDA: 2 or 3 launches over a table of up to kScalerTable of them).
  static constexpr int kScalerTable = 64;
  void ternary_scaler_many(const TernaryScalerItem* items, int count, float clip_factor);
  // packed (u8 (ceil(n/4))) = the codes of g drawn with the scalers from `key` at counter (step, tensor)
  // (ternarize_one; all zero where a scaler is <= 0 or NaN). zero_count: i32 (1) that receives the number of zero
  // codes (then n < 2^31), or undefined.
  void ternary_encode(const Tensor& g, const Tensor& scaler, PhiloxKey key, uint32_t step, uint32_t tensor,
                      const Tensor& packed, const Tensor& zero_count, int64_t bucket = 0);
  // ternary_encode of `count` tensors (items: an array the caller owns), all drawn from `key` at `step`: the same
  // bits as count calls of ternary_encode, in one pass (CUDA: one launch over a table of the tensors for up to
  // kEncodeTable of them).
  static constexpr int kEncodeTable = 64;
  void ternary_encode_many(const TernaryEncodeItem* items, int count, PhiloxKey key, uint32_t step);
  // code_sums (i8 (n)) = the sum over num_workers (1..127) workers of their codes; worker w's packed codes
  // (ceil(n/4) bytes) start at byte w * stride of `packed` (u8 of at least (num_workers-1)*stride + ceil(n/4)).
  void ternary_sum_codes(const Tensor& packed, int64_t stride, int num_workers, const Tensor& code_sums);
  // out (f32 (n)) = max over the `count` (1..kMaxCodecInputs) workers' scaler vectors xs[w] (f32 (n)), a
  // non-finite scaler counting as +Inf, starting from 0: the local share before the all-reduce MAX, which then
  // carries a bad scaler to every worker (each stops with the same error, none waits in a collective). out
  // may be one of xs.
  void max_scalers(const Tensor* xs, int count, const Tensor& out);
  // g (f32 (n)) = ternary_decode_value(scaler of element i, code_sums[i], num_workers); code_sums i8 (n).
  void ternary_decode_sums(const Tensor& code_sums, const Tensor& scaler, int num_workers, const Tensor& g,
                           int64_t bucket = 0);
  // g (f32 (n)) = ternary_decode_value(scaler of element i, sum over workers of their codes, num_workers), the
  // workers' packed codes laid out in `gathered` as in ternary_sum_codes (any num_workers >= 1).
  void ternary_decode_gathered(const Tensor& gathered, int64_t stride, int num_workers, const Tensor& scaler,
                               const Tensor& g, int64_t bucket = 0);

  // fp16/fp32 codings. xs: `count` (1..kMaxCodecInputs) f32 tensors of n elements, the workers' gradients in
  // worker order (an array the caller owns, so no call allocates).
  static constexpr int kMaxCodecInputs = 128;
  // out (f16 (n)) = float_to_half(sum over w of half_to_float(float_to_half(xs[w]))), added in f32 in worker
  // order: each worker's fp16 payload, summed and rounded once.
  void encode_f16_sum(const Tensor* xs, int count, const Tensor& out);
  // out (f32 (n)) = sum over w of xs[w], in worker order. out may be xs[0], not another of xs.
  void encode_f32_sum(const Tensor* xs, int count, const Tensor& out);
  // out (f32 (n)) = decode_f16_sum of encode_f16_sum(xs) over `count` workers, without the fp16 buffer. out
  // may be any of xs.
  void average_f16(const Tensor* xs, int count, const Tensor& out);
  // out (f32 (n)) = encode_f32_sum(xs) / count; count 1: a copy (none when out is xs[0]). out may be any of xs.
  void average_f32(const Tensor* xs, int count, const Tensor& out);
  // g (f32 (n)) = half_to_float(sum (f16 (n))) / num_workers.
  void decode_f16_sum(const Tensor& sum, int num_workers, const Tensor& g);
  // g (f32 (n)) = sum (f32 (n)) / num_workers; g may be sum.
  void decode_f32_sum(const Tensor& sum, int num_workers, const Tensor& g);

  // ---- linear algebra (the low-rank gradient schemes: PowerSGD) ----------------------------------------------
  // c (M, N) = op(a) (M, K) * op(b) (K, N) + beta * c, f32 row-major matrices (rank-2 tensors: a gradient
  // reshaped, a piece of a fused buffer reshaped), op(x) = x or its transpose. c shares no memory with a or b;
  // beta 0: c is only written (what it held, NaN included, does not matter). Products accumulate in f32 (CPU:
  // oneDNN's sgemm; CUDA: cuBLAS, plain fp32 unless BackendOptions::allow_tf32): the same bits run to run on one
  // backend and thread count, not across backends.
  void matmul(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, float beta, const Tensor& c);
  // The columns of m (rows, cols; f32, 1 <= cols <= rows) made orthonormal in place by Gram-Schmidt in column
  // order, as PyTorch's PowerSGD hook does it: column i is divided by (its norm + epsilon), then its projection is
  // removed from every later column. Norms and dot products in double, in one fixed order per backend. A column
  // whose norm is 0 stays 0 (PyTorch's hook gives NaN there with epsilon 0).
  void orthogonalize_columns(const Tensor& m, float epsilon);

  // ---- implementations: what each backend provides; the public operations above check the arguments once
  // (devices, dtypes, element counts; backend_front.cc) and call these.
 protected:
  // The transfers' hooks get the ticket the front assigned; the front counts the host synchronisations.
  virtual void synchronize_impl() = 0;
  virtual void record_fence_impl(uint64_t ticket) = 0;
  virtual void upload_async_impl(const Tensor& dst, const Tensor& src, uint64_t after, uint64_t ticket) = 0;
  virtual void download_async_impl(const Tensor& dst, const Tensor& src, uint64_t ticket) = 0;
  virtual void wait_transfer_impl(uint64_t ticket) = 0;
  // cast_many's pairs, each checked by the front: one cast_impl each unless a backend batches them; a backend
  // that transposes (CPU, CUDA) overrides it.
  virtual void cast_many_impl(const Tensor* dst, const Tensor* src, int count, const int64_t* transpose_rows) {
    for (int k = 0; k < count; ++k) {
      TG_CHECK(!transpose_rows || transpose_rows[k] == 0, "cast_many: the {} backend does not transpose", name());
      cast_impl(dst[k], src[k]);
    }
  }
  // unscale_and_check_many's items, each checked by the front: unscale_and_check_impl and axpy_impl each unless a
  // backend batches them (or transposes: CPU, CUDA).
  virtual void unscale_and_check_many_impl(const UnscaleItem* items, int count, float scale, const Tensor& found) {
    for (int k = 0; k < count; ++k) {
      TG_CHECK(items[k].transpose_rows == 0, "unscale_and_check_many: the {} backend does not transpose", name());
      unscale_and_check_impl(items[k].src, scale, items[k].dst, found);
      if (items[k].decayed) axpy_impl(items[k].decay, items[k].decayed, items[k].dst);
    }
  }
  // optimizer_update_coded_many's items, each one part (part = 0) checked by the front: one
  // optimizer_update_coded_impl each unless a backend batches them.
  virtual void optimizer_update_coded_many_impl(const OptimizerStep& step, const CodedUpdateItem* items, int count) {
    for (int k = 0; k < count; ++k) {
      const CodedUpdateItem& it = items[k];
      optimizer_update_coded_impl(step, it.w, it.g, it.s1, it.s2, it.ema);
    }
  }
  // ternary_scaler_many's items, each checked by the front: one ternary_scaler_impl each unless a backend batches
  // them.
  virtual void ternary_scaler_many_impl(const TernaryScalerItem* items, int count, float clip_factor) {
    for (int k = 0; k < count; ++k) {
      const TernaryScalerItem& it = items[k];
      ternary_scaler_impl(it.g, clip_factor, it.scaler, it.residual, it.decayed, it.decay, it.bucket);
    }
  }
  // A host synchronisation that waited for every op enqueued so far: counted, and every ticket is done.
  void synced_all() {
    host_syncs_.fetch_add(1, std::memory_order_relaxed);
    done_ = last_ticket_;
  }
  uint64_t last_ticket() const { return last_ticket_; }
  // Tickets up to this one are known to be done (a host synchronisation saw them).
  uint64_t done_ticket() const { return done_; }
  // For a backend that had to wait for `ticket` on its own (a full ring of events): counted, and tickets up to
  // it are done.
  void synced_up_to(uint64_t ticket) {
    host_syncs_.fetch_add(1, std::memory_order_relaxed);
    if (ticket > done_) done_ = ticket;
  }

 private:
  std::atomic<int64_t> host_syncs_{0};
  uint64_t last_ticket_ = 0, done_ = 0;

 protected:
  // One list of the hooks (backend_impls.h) declares them here and in every backend.
#define TG_DECLARE_IMPL(ret, name, params) virtual ret name params = 0;
  TG_BACKEND_IMPLS(TG_DECLARE_IMPL)
#undef TG_DECLARE_IMPL
};

// "cpu" or "cuda" / "cuda:<k>". Unknown names and unavailable devices are errors naming the choices.
std::unique_ptr<Backend> make_backend(const std::string& device, const BackendOptions& options = {});
bool cuda_backend_compiled();

}  // namespace tg

// CudaBackend 2-D convolution on cuDNN (legacy convolution API: cudnnConvolutionForward/BackwardData/
// BackwardFilter with candidates from the *_v7 heuristics, per ConvDesc, cached with the descriptors). NHWC
// activations of the compute dtype (F32, F16 or BF16: CUDNN_DATA_FLOAT / HALF / BFLOAT16 tensors and filters,
// always with CUDNN_DATA_FLOAT compute, i.e. f32 accumulation); the weights have the activations' dtype.
//
// Layouts: our weights are TensorFlow's (KH, KW, Cin/g, Cout); cuDNN's NHWC filter is (Cout, KH, KW, Cin/g)
// ("KRSC"). Both are a 2-D transpose of each other ((KH*KW*Cin/g) x Cout). With ConvDesc::filter_ohwi the caller
// hands w over and takes dW as KRSC (a net's per-step half copy, transposed by cast_many once a step; its gradient
// transposed back by the unscale); else w is transposed per call into the workspace arena and dW computed there
// and transposed back to ours.
// Padding: cuDNN pads symmetrically; unequal pads (TF's SAME) run as an output shift or on an input copy, whichever
// moves fewer elements (src/backend/conv_padding.h).
// Algorithms: per direction, the heuristics' list is filtered once (scratch within kMaxAlgoWorkspace; with
// BackendOptions::deterministic only CUDNN_DETERMINISTIC ones, which excludes the atomics-based backward
// algorithms; for f32 data without allow_tf32 no tensor-op candidates) and kept in the heuristics' order. For
// f32 data without allow_tf32 every candidate runs with the descriptor on CUDNN_FMA_MATH (plain fp32,
// comparable with the CPU backend; CUDNN_DEFAULT_MATH would let sm_80+ round operands to TF32); with allow_tf32
// the query runs on CUDNN_DEFAULT_MATH (so TF32 algorithms are offered) and each candidate keeps the math type
// the heuristics gave it. F16/BF16 data
// run each candidate with the math type the heuristics gave it (tensor-op math: the point of half types). The first
// call of a direction tries the candidates in order until one executes, and that one is kept (conv_algorithms() reports
// it). With BackendOptions::conv_search the first call instead times every candidate (one untimed call, then
// kSearchRuns calls between two CUDA events on the stream; the calls overwrite their output, beta = 0) and keeps the
// fastest: an algorithm search by measurement over the same filtered list, once per descriptor and direction.
//
// Workspace arena layout per call: [w KRSC][dw KRSC][padded x / dx, or y' / dy'][cuDNN scratch] (elements of the
// dtype).
// The cache key holds the descriptor's numbers and the dtype.
#include <algorithm>
#include <climits>
#include <string>
#include <vector>

#include "src/backend/conv_padding.h"
#include "src/backend/cuda/cuda_backend.h"
#include "src/backend/cuda/cuda_kernels.h"
#include "terngrad/backend/cuda_check.h"

namespace tg {
namespace {

constexpr size_t kMaxAlgoWorkspace = size_t{1} << 30;  // skip algorithms wanting more scratch than this
constexpr int kSearchRuns = 2;                         // timed calls per candidate in the search

size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

int as_int(int64_t v, const ConvDesc& d) {
  TG_CHECK(v >= 0 && v <= INT_MAX, "conv {}: size {} does not fit cuDNN's int", d.key(), v);
  return static_cast<int>(v);
}

const char* algo_name(cudnnConvolutionFwdAlgo_t a) {
  static const char* const names[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
                                      "WINOGRAD",      "WINOGRAD_NONFUSED"};
  return a >= 0 && a < 8 ? names[a] : "?";
}
const char* algo_name(cudnnConvolutionBwdDataAlgo_t a) {
  static const char* const names[] = {"ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
  return a >= 0 && a < 6 ? names[a] : "?";
}
const char* algo_name(cudnnConvolutionBwdFilterAlgo_t a) {
  static const char* const names[] = {"ALGO_0",    "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED",
                                      "FFT_TILING"};
  return a >= 0 && a < 7 ? names[a] : "?";
}
bool is_tensor_op(cudnnMathType_t m) { return m == CUDNN_TENSOR_OP_MATH || m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION; }

cudnnDataType_t cudnn_type(DType t) {
  switch (t) {
    case DType::kF32:
      return CUDNN_DATA_FLOAT;
    case DType::kF16:
      return CUDNN_DATA_HALF;
    case DType::kBf16:
      return CUDNN_DATA_BFLOAT16;
    default:
      TG_THROW("conv: dtype {} is not a compute dtype (f32, f16, bf16)", dtype_name(t));
  }
}

// One direction's acceptable algorithms, in the heuristics' order, and the one that executed first.
template <typename Algo>
struct AlgoChoice {
  struct Candidate {
    Algo algo;
    cudnnMathType_t math;  // what the descriptor is set to when this candidate runs
    bool deterministic;
    size_t workspace;
  };
  std::vector<Candidate> candidates;
  int chosen = -1;
  float chosen_ms = -1.f;  // the search's time of the chosen one
  int timed = 0;           // candidates the search timed
  std::string rejected;    // why the heuristics' other results were left out (for the error message)

  // Filters a *_v7 result list; ws_size(algo, &bytes) asks cuDNN for an algorithm's scratch under the
  // candidate's math type (set on `conv` first).
  // half: F16/BF16 data (tensor-op math allowed and kept as the heuristics chose it).
  template <typename Perf, typename WsSize>
  void fill(const std::vector<Perf>& perfs, int returned, const BackendOptions& o, bool half,
            cudnnConvolutionDescriptor_t conv, WsSize ws_size) {
    for (int i = 0; i < returned; ++i) {
      const Perf& p = perfs[i];
      const bool det = p.determinism == CUDNN_DETERMINISTIC;
      std::string why;
      if (p.status != CUDNN_STATUS_SUCCESS)
        why = cudnnGetErrorString(p.status);
      else if (o.deterministic && !det)
        why = "nondeterministic";
      else if (!half && !o.allow_tf32 && is_tensor_op(p.mathType))
        why = "tensor-op math";
      Candidate c{p.algo, (half || o.allow_tf32) ? p.mathType : CUDNN_FMA_MATH, det, 0};
      if (why.empty()) {
        TG_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, c.math));
        const cudnnStatus_t st = ws_size(p.algo, &c.workspace);
        if (st != CUDNN_STATUS_SUCCESS)
          why = cudnnGetErrorString(st);
        else if (c.workspace > kMaxAlgoWorkspace)
          why = fmt::format("{} bytes of scratch", c.workspace);
      }
      if (why.empty())
        candidates.push_back(c);
      else
        rejected += fmt::format("{}{}: {}", rejected.empty() ? "" : "; ", algo_name(p.algo), why);
    }
    if (!candidates.empty()) TG_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, candidates[0].math));
  }
  size_t max_workspace() const {
    size_t m = 0;
    for (const Candidate& c : candidates) m = std::max(m, c.workspace);
    return m;
  }
  // Runs the kept algorithm, or on first use the candidates in order until one executes (search: every candidate,
  // timed on `stream`, the fastest kept).
  template <typename Run>
  void run(cudnnConvolutionDescriptor_t conv, const char* what, const ConvDesc& d, bool search, cudaStream_t stream,
           Run r) {
    if (chosen >= 0) return run_kept(what, d, r);
    TG_CHECK(!candidates.empty(), "conv {}: cuDNN offers no usable {} algorithm ({})", d.key(), what, rejected);
    if (search) {
      const int best = fastest(conv, what, d, stream, r);
      // The last call left the output of the last candidate that ran: run the chosen one so the output is its own.
      TG_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, candidates[best].math));
      chosen = best;  // only now: a search that threw is redone by the next call
      return run_kept(what, d, r);
    }
    std::string failed;
    for (size_t i = 0; i < candidates.size(); ++i) {
      TG_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, candidates[i].math));
      const cudnnStatus_t st = r(candidates[i]);
      if (st == CUDNN_STATUS_SUCCESS) {
        chosen = static_cast<int>(i);
        debug_sync_after(what);
        return;
      }
      cudaGetLastError();  // a launch error of the failed try must not be reported by the next call
      failed +=
          fmt::format("{}{}: {}", failed.empty() ? "" : "; ", algo_name(candidates[i].algo), cudnnGetErrorString(st));
    }
    TG_THROW("conv {}: no {} algorithm executed ({})", d.key(), what, failed);
  }
  // The kept algorithm (the descriptor's math type is already its own).
  template <typename Run>
  void run_kept(const char* what, const ConvDesc& d, Run r) {
    const cudnnStatus_t st = r(candidates[chosen]);
    TG_CHECK(st == CUDNN_STATUS_SUCCESS, "conv {}: cuDNN {} {} failed: {} on {}", d.key(), what,
             algo_name(candidates[chosen].algo), cudnnGetErrorString(st), detail::cuda_current_device_text());
    debug_sync_after(what);
  }
  // The search: every candidate once untimed, then kSearchRuns calls between two events; the fastest's index (its
  // time in chosen_ms, the number timed in timed).
  template <typename Run>
  int fastest(cudnnConvolutionDescriptor_t conv, const char* what, const ConvDesc& d, cudaStream_t stream, Run r) {
    struct Events {  // freed on every path
      cudaEvent_t start = nullptr, stop = nullptr;
      ~Events() {
        if (start) cudaEventDestroy(start);
        if (stop) cudaEventDestroy(stop);
      }
    } ev;
    TG_CUDA_CHECK(cudaEventCreate(&ev.start));
    TG_CUDA_CHECK(cudaEventCreate(&ev.stop));
    // Alone on the device: the side stream's exchange kernels (a backward search runs during backward) or a copy
    // would slow whichever candidate they overlap.
    TG_CUDA_CHECK(cudaDeviceSynchronize());
    std::string failed;
    int best = -1;
    float best_ms = 0.f;
    for (size_t i = 0; i < candidates.size(); ++i) {
      TG_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, candidates[i].math));
      cudnnStatus_t st = r(candidates[i]);  // untimed: first-call setup
      for (int k = 0; k < kSearchRuns && st == CUDNN_STATUS_SUCCESS; ++k) {
        if (k == 0) TG_CUDA_CHECK(cudaEventRecord(ev.start, stream));
        st = r(candidates[i]);
      }
      if (st != CUDNN_STATUS_SUCCESS) {
        cudaGetLastError();
        failed +=
            fmt::format("{}{}: {}", failed.empty() ? "" : "; ", algo_name(candidates[i].algo), cudnnGetErrorString(st));
        continue;
      }
      TG_CUDA_CHECK(cudaEventRecord(ev.stop, stream));
      TG_CUDA_CHECK(cudaEventSynchronize(ev.stop));
      float ms = 0.f;
      TG_CUDA_CHECK(cudaEventElapsedTime(&ms, ev.start, ev.stop));
      ms /= kSearchRuns;
      ++timed;
      if (best < 0 || ms < best_ms) best = static_cast<int>(i), best_ms = ms;
    }
    TG_CHECK(best >= 0, "conv {}: no {} algorithm executed ({})", d.key(), what, failed);
    chosen_ms = best_ms;
    return best;
  }
  ConvAlgorithm report() const {
    if (chosen < 0) return {};
    const Candidate& c = candidates[chosen];
    return {algo_name(c.algo), c.deterministic, c.math != CUDNN_FMA_MATH, true, chosen_ms, timed};
  }
};

struct ConvEntry : CudaBackend::CachedOp {
  // x: the input cuDNN sees (the padded copy for kInputCopy); y: the output it writes (y' for kOutputShift)
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t fwd_conv = nullptr, data_conv = nullptr, filter_conv = nullptr;
  AlgoChoice<cudnnConvolutionFwdAlgo_t> fwd_algo;
  AlgoChoice<cudnnConvolutionBwdDataAlgo_t> data_algo;
  AlgoChoice<cudnnConvolutionBwdFilterAlgo_t> filter_algo;
  ConvPadPlan pad;  // how the padding reaches cuDNN (conv_padding.h)
  bool copies_input() const { return pad.mode == ConvPadMode::kInputCopy; }
  bool shifts_output() const { return pad.mode == ConvPadMode::kOutputShift; }
  size_t filter_bytes = 0, padded_bytes = 0;
  size_t off_dw = 0, off_xp = 0, off_scratch = 0, total = 0;

  ~ConvEntry() override {
    if (x) cudnnDestroyTensorDescriptor(x);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (w) cudnnDestroyFilterDescriptor(w);
    for (auto c : {fwd_conv, data_conv, filter_conv})
      if (c) cudnnDestroyConvolutionDescriptor(c);
  }
};

// Compute type CUDNN_DATA_FLOAT for every data type (f32 accumulation; PSEUDO_HALF / PSEUDO_BFLOAT16 configs).
// Math for the heuristics' query: tensor-op for f16/bf16; for f32 data CUDNN_DEFAULT_MATH when TF32 is allowed
// (on sm_80+ it permits TF32 tensor cores, so the query can offer those algorithms), else FMA (plain fp32). Each
// candidate's own math type is set on the descriptor after the query (AlgoChoice::fill, run).
cudnnConvolutionDescriptor_t make_conv(const ConvDesc& d, int64_t pad_h, int64_t pad_w, bool half, bool allow_tf32) {
  cudnnConvolutionDescriptor_t conv;
  TG_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
  const int ph = as_int(pad_h, d), pw = as_int(pad_w, d);
  TG_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv, ph, pw, as_int(d.stride_h, d), as_int(d.stride_w, d), 1, 1,
                                                 CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  TG_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv, as_int(d.groups, d)));
  TG_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, half         ? CUDNN_TENSOR_OP_MATH
                                                   : allow_tf32 ? CUDNN_DEFAULT_MATH
                                                                : CUDNN_FMA_MATH));
  return conv;
}

ConvEntry* make_entry(CudaBackend& be, const ConvDesc& d, DType t) {
  TG_CHECK(d.groups >= 1 && d.c % d.groups == 0 && d.out_c % d.groups == 0 && d.out_h > 0 && d.out_w > 0,
           "conv {}: inconsistent descriptor", d.key());
  auto e = std::make_unique<ConvEntry>();
  e->pad = plan_conv_padding(d);
  const bool copy_in = e->copies_input();
  const int64_t hx = copy_in ? d.h + d.pad_top + d.pad_bottom : d.h;
  const int64_t wx = copy_in ? d.w + d.pad_left + d.pad_right : d.w;
  const int64_t hy = e->pad.out_h(), wy = e->pad.out_w();
  TG_CUDNN_CHECK(cudnnCreateTensorDescriptor(&e->x));
  const cudnnDataType_t ct = cudnn_type(t);
  TG_CUDNN_CHECK(cudnnSetTensor4dDescriptor(e->x, CUDNN_TENSOR_NHWC, ct, as_int(d.n, d), as_int(d.c, d), as_int(hx, d),
                                            as_int(wx, d)));
  TG_CUDNN_CHECK(cudnnCreateTensorDescriptor(&e->y));
  TG_CUDNN_CHECK(cudnnSetTensor4dDescriptor(e->y, CUDNN_TENSOR_NHWC, ct, as_int(d.n, d), as_int(d.out_c, d),
                                            as_int(hy, d), as_int(wy, d)));
  TG_CUDNN_CHECK(cudnnCreateFilterDescriptor(&e->w));
  TG_CUDNN_CHECK(cudnnSetFilter4dDescriptor(e->w, ct, CUDNN_TENSOR_NHWC, as_int(d.out_c, d), as_int(d.c / d.groups, d),
                                            as_int(d.kh, d), as_int(d.kw, d)));
  const bool half = t != DType::kF32;
  e->fwd_conv = make_conv(d, e->pad.h.pad, e->pad.w.pad, half, be.options().allow_tf32);
  e->data_conv = make_conv(d, e->pad.h.pad, e->pad.w.pad, half, be.options().allow_tf32);
  e->filter_conv = make_conv(d, e->pad.h.pad, e->pad.w.pad, half, be.options().allow_tf32);

  int on = 0, oc = 0, oh = 0, ow = 0;
  TG_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(e->fwd_conv, e->x, e->w, &on, &oc, &oh, &ow));
  TG_CHECK(on == d.n && oc == d.out_c && oh == hy && ow == wy,
           "conv {}: cuDNN computes output {}x{}x{}x{}, expected {}x{}x{}x{}", d.key(), on, oh, ow, oc, d.n, hy, wy,
           d.out_c);

  cudnnHandle_t h = be.cudnn();
  const BackendOptions& o = be.options();
  {
    std::vector<cudnnConvolutionFwdAlgoPerf_t> perfs(CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
    int returned = 0;
    TG_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, e->x, e->w, e->fwd_conv, e->y,
                                                          static_cast<int>(perfs.size()), &returned, perfs.data()));
    e->fwd_algo.fill(perfs, returned, o, half, e->fwd_conv, [&](cudnnConvolutionFwdAlgo_t a, size_t* bytes) {
      return cudnnGetConvolutionForwardWorkspaceSize(h, e->x, e->w, e->fwd_conv, e->y, a, bytes);
    });
  }
  {
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perfs(CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
    int returned = 0;
    TG_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
        h, e->w, e->y, e->data_conv, e->x, static_cast<int>(perfs.size()), &returned, perfs.data()));
    e->data_algo.fill(perfs, returned, o, half, e->data_conv, [&](cudnnConvolutionBwdDataAlgo_t a, size_t* bytes) {
      return cudnnGetConvolutionBackwardDataWorkspaceSize(h, e->w, e->y, e->data_conv, e->x, a, bytes);
    });
  }
  {
    std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perfs(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
    int returned = 0;
    TG_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
        h, e->x, e->y, e->filter_conv, e->w, static_cast<int>(perfs.size()), &returned, perfs.data()));
    e->filter_algo.fill(
        perfs, returned, o, half, e->filter_conv, [&](cudnnConvolutionBwdFilterAlgo_t a, size_t* bytes) {
          return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, e->x, e->y, e->filter_conv, e->w, a, bytes);
        });
  }

  const size_t es = dtype_size(t);
  e->filter_bytes = static_cast<size_t>(d.kh * d.kw * (d.c / d.groups) * d.out_c) * es;
  e->padded_bytes = copy_in              ? static_cast<size_t>(d.n * hx * wx * d.c) * es
                    : e->shifts_output() ? static_cast<size_t>(d.n * hy * wy * d.out_c) * es
                                         : 0;
  e->off_dw = align256(e->filter_bytes);
  e->off_xp = e->off_dw + align256(e->filter_bytes);
  e->off_scratch = e->off_xp + align256(e->padded_bytes);
  // Room for every candidate's scratch: the tries on first use must not grow the arena (it holds w KRSC).
  e->total = e->off_scratch + std::max({e->fwd_algo.max_workspace(), e->data_algo.max_workspace(),
                                        e->filter_algo.max_workspace(), size_t{256}});
  be.workspace(e->total);  // grow now, while the descriptor is new
  return e.release();
}

CudaOpKey conv_key(const ConvDesc& d, DType t) {
  return CudaOpKey(CudaOp::CONV, {d.n, d.h, d.w, d.c, d.kh, d.kw, d.out_c, d.groups, d.stride_h, d.stride_w, d.pad_top,
                                  d.pad_bottom, d.pad_left, d.pad_right, d.has_bias, static_cast<int64_t>(t)});
}

ConvEntry& conv_entry(CudaBackend& be, const ConvDesc& d, DType t) {
  return be.cached<ConvEntry>(conv_key(d, t), [&] { return make_entry(be, d, t); });
}

char* at(void* base, size_t offset) { return static_cast<char*>(base) + offset; }

}  // namespace

void CudaBackend::conv2d_forward_impl(const ConvDesc& d, const Tensor& x, const Tensor& w, const Tensor& b,
                                      const Tensor& y) {
  TG_CHECK(x.numel() == d.n * d.h * d.w * d.c && w.numel() == d.kh * d.kw * (d.c / d.groups) * d.out_c &&
               y.numel() == d.n * d.out_h * d.out_w * d.out_c,
           "conv2d_forward {}: x {}, w {}, y {} do not match", d.key(), x.str(), w.str(), y.str());
  check_on_device(x, "conv2d_forward", "x"), check_on_device(w, "conv2d_forward", "w");
  check_on_device(y, "conv2d_forward", "y");
  if (d.has_bias) {
    TG_CHECK(b.numel() == d.out_c, "conv2d_forward {}: bias {} must have {} elements", d.key(), b.str(), d.out_c);
    check_on_device(b, "conv2d_forward", "b");
  }
  const DType t = compute_dtype("conv2d_forward", x, {&w, &b, &y});
  if (d.n == 0) return;
  CudaDeviceGuard guard(index());
  ConvEntry& e = conv_entry(*this, d, t);
  void* ws = workspace(e.total);
  const int64_t rows_w = d.kh * d.kw * (d.c / d.groups);
  const void* wk = w.raw();  // filter_ohwi: already cuDNN's layout
  if (!d.filter_ohwi) {
    cuda_kernels::transpose(t, w.raw(), at(ws, 0), rows_w, d.out_c, stream());
    wk = at(ws, 0);
  }
  const void* xin = x.raw();
  if (e.copies_input()) {
    void* xp = at(ws, e.off_xp);
    cuda_kernels::pad_nhwc(t, xin, xp, d.n, d.h, d.w, d.c, d.pad_top, d.pad_bottom, d.pad_left, d.pad_right, stream());
    xin = xp;
  }
  const bool shift = e.shifts_output();
  void* yout = shift ? at(ws, e.off_xp) : y.raw();  // y' first, ours cropped from it
  const float one = 1.f, beta0 = 0.f;
  e.fwd_algo.run(e.fwd_conv, "forward", d, options().conv_search, stream(), [&](const auto& c) {
    detail::count_library_launch();
    return cudnnConvolutionForward(cudnn(), &one, e.x, xin, e.w, wk, e.fwd_conv, c.algo, at(ws, e.off_scratch),
                                   c.workspace, &beta0, e.y, yout);
  });
  if (shift)
    cuda_kernels::crop_nhwc(t, yout, y.raw(), d.n, d.out_h, d.out_w, d.out_c, e.pad.h.before, e.pad.h.after,
                            e.pad.w.before, e.pad.w.after, stream());
  if (d.has_bias) cuda_kernels::add_bias_rows(t, y.raw(), b.raw(), d.n * d.out_h * d.out_w, d.out_c, stream());
}

void CudaBackend::conv2d_backward_impl(const ConvDesc& d, const Tensor& x, const Tensor& w, const Tensor& dy,
                                       const Tensor& dx, const Tensor& dw, const Tensor& db) {
  TG_CHECK(dy.numel() == d.n * d.out_h * d.out_w * d.out_c, "conv2d_backward {}: dy {} does not match", d.key(),
           dy.str());
  check_on_device(dy, "conv2d_backward", "dy");
  const DType t = compute_dtype("conv2d_backward", dy, {&x, &w, &dx, &dw, &db});
  const int64_t rows_w = d.kh * d.kw * (d.c / d.groups);
  CudaDeviceGuard guard(index());
  if (db) {
    TG_CHECK(d.has_bias && db.numel() == d.out_c, "conv2d_backward {}: db {} given for {} outputs", d.key(), db.str(),
             d.out_c);
    check_on_device(db, "conv2d_backward", "db");
    const int64_t rows = d.n * d.out_h * d.out_w;  // db: scratch from the arena, before the conv uses it
    cuda_kernels::column_sum(t, dy.raw(), rows, d.out_c, db.raw(),
                             workspace(cuda_kernels::column_sum_scratch_bytes(rows, d.out_c)), stream());
  }
  if (!dx && !dw) return;
  if (d.n == 0) {
    if (dw) zero(dw);
    return;
  }
  ConvEntry& e = conv_entry(*this, d, t);
  void* ws = workspace(e.total);
  const float one = 1.f, beta0 = 0.f;
  void* xp = at(ws, e.off_xp);
  const void* dyin = dy.raw();
  if (e.shifts_output()) {  // dy' (zeros where y' has outputs we drop), for both calls
    cuda_kernels::pad_nhwc(t, dy.raw(), xp, d.n, d.out_h, d.out_w, d.out_c, e.pad.h.before, e.pad.h.after,
                           e.pad.w.before, e.pad.w.after, stream());
    dyin = xp;
  }
  if (dw) {  // first: it reads the padded x that dx's computation then overwrites
    TG_CHECK(dw.numel() == rows_w * d.out_c && x.numel() == d.n * d.h * d.w * d.c,
             "conv2d_backward {}: dw {} or x {} does not match", d.key(), dw.str(), x.str());
    check_on_device(dw, "conv2d_backward", "dw"), check_on_device(x, "conv2d_backward", "x");
    const void* xin = x.raw();
    if (e.copies_input()) {
      cuda_kernels::pad_nhwc(t, xin, xp, d.n, d.h, d.w, d.c, d.pad_top, d.pad_bottom, d.pad_left, d.pad_right,
                             stream());
      xin = xp;
    }
    void* dwk = d.filter_ohwi ? dw.raw() : at(ws, e.off_dw);  // filter_ohwi: dw in cuDNN's layout as it comes
    e.filter_algo.run(e.filter_conv, "backward-filter", d, options().conv_search, stream(), [&](const auto& c) {
      detail::count_library_launch();
      return cudnnConvolutionBackwardFilter(cudnn(), &one, e.x, xin, e.y, dyin, e.filter_conv, c.algo,
                                            at(ws, e.off_scratch), c.workspace, &beta0, e.w, dwk);
    });
    if (!d.filter_ohwi) cuda_kernels::transpose(t, dwk, dw.raw(), d.out_c, rows_w, stream());
  }
  if (dx) {
    TG_CHECK(dx.numel() == d.n * d.h * d.w * d.c && w.numel() == rows_w * d.out_c,
             "conv2d_backward {}: dx {} or w {} does not match", d.key(), dx.str(), w.str());
    check_on_device(dx, "conv2d_backward", "dx"), check_on_device(w, "conv2d_backward", "w");
    const void* wk = w.raw();  // filter_ohwi: already cuDNN's layout
    if (!d.filter_ohwi) {
      cuda_kernels::transpose(t, w.raw(), at(ws, 0), rows_w, d.out_c, stream());
      wk = at(ws, 0);
    }
    void* dxin = e.copies_input() ? xp : dx.raw();
    e.data_algo.run(e.data_conv, "backward-data", d, options().conv_search, stream(), [&](const auto& c) {
      detail::count_library_launch();
      return cudnnConvolutionBackwardData(cudnn(), &one, e.w, wk, e.y, dyin, e.data_conv, c.algo, at(ws, e.off_scratch),
                                          c.workspace, &beta0, e.x, dxin);
    });
    if (e.copies_input())
      cuda_kernels::crop_nhwc(t, xp, dx.raw(), d.n, d.h, d.w, d.c, d.pad_top, d.pad_bottom, d.pad_left, d.pad_right,
                              stream());
  }
}

std::array<ConvAlgorithm, 3> CudaBackend::conv_algorithms(const ConvDesc& d, DType t) const {
  const auto* e = static_cast<const ConvEntry*>(find_cached(conv_key(d, t)));
  if (!e) return {};
  return {e->fwd_algo.report(), e->data_algo.report(), e->filter_algo.report()};
}

}  // namespace tg

// CudaBackend 2-D convolution on cuDNN (legacy convolution API: cudnnConvolutionForward/BackwardData/
// BackwardFilter with algorithms from the *_v7 heuristics, chosen once per ConvDesc and cached with the
// descriptors). NHWC activations.
//
// Layouts: our weights are TensorFlow's (KH, KW, Cin/g, Cout); cuDNN's NHWC filter is (Cout, KH, KW, Cin/g)
// ("KRSC"). Both are a 2-D transpose of each other ((KH*KW*Cin/g) x Cout), done per call into the
// workspace arena (w -> KRSC before use, dW KRSC -> ours after).
// Padding: cuDNN pads symmetrically. TF's SAME puts the odd pixel after (pad_bottom = pad_top + 1), so a
// desc with unequal pads runs on an explicitly zero-padded copy of x (VALID for cuDNN); its dx is computed
// on the padded grid and cropped. Symmetric pads go to cuDNN directly.
// Math: each direction's algorithm is taken with FMA math when the heuristics offer one (no TF32
// rounding: results stay comparable with the CPU backend), else with what they return first.
//
// Workspace arena layout per call: [w KRSC][dw KRSC][padded x / dx][cuDNN scratch].
#include <algorithm>
#include <climits>
#include <vector>

#include "src/backend/cuda/cuda_backend.h"
#include "src/backend/cuda/cuda_kernels.h"
#include "terngrad/backend/cuda_check.h"

namespace tg {
namespace {

constexpr size_t kMaxAlgoWorkspace = size_t{1} << 30;  // skip algorithms wanting more scratch than this

size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

int as_int(int64_t v, const ConvDesc& d) {
  TG_CHECK(v >= 0 && v <= INT_MAX, "conv {}: size {} does not fit cuDNN's int", d.key(), v);
  return static_cast<int>(v);
}

// The preferred result of a *_v7 heuristic query: FMA math first, then any other, within the scratch cap.
template <typename Perf> const Perf& pick_algo(const std::vector<Perf>& perfs, int returned, const char* what,
                                                const ConvDesc& d) {
  const Perf* any = nullptr;
  for (int i = 0; i < returned; ++i) {
    const Perf& p = perfs[i];
    if (p.status != CUDNN_STATUS_SUCCESS || p.memory > kMaxAlgoWorkspace) continue;
    if (p.mathType == CUDNN_FMA_MATH || p.mathType == CUDNN_DEFAULT_MATH) return p;
    if (!any) any = &p;
  }
  TG_CHECK(any != nullptr, "conv {}: cuDNN offers no {} algorithm", d.key(), what);
  return *any;
}

struct ConvEntry : CudaBackend::CachedOp {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;  // x: the (possibly padded) input cuDNN sees
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t fwd_conv = nullptr, data_conv = nullptr, filter_conv = nullptr;
  cudnnConvolutionFwdAlgo_t fwd_algo{};
  cudnnConvolutionBwdDataAlgo_t data_algo{};
  cudnnConvolutionBwdFilterAlgo_t filter_algo{};
  size_t fwd_ws = 0, data_ws = 0, filter_ws = 0;
  bool explicit_pad = false;
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

cudnnConvolutionDescriptor_t make_conv(const ConvDesc& d, bool explicit_pad) {
  cudnnConvolutionDescriptor_t conv;
  TG_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
  const int ph = explicit_pad ? 0 : as_int(d.pad_top, d), pw = explicit_pad ? 0 : as_int(d.pad_left, d);
  TG_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv, ph, pw, as_int(d.stride_h, d), as_int(d.stride_w, d), 1, 1,
                                                 CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  TG_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv, as_int(d.groups, d)));
  TG_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, CUDNN_FMA_MATH));
  return conv;
}

ConvEntry* make_entry(CudaBackend& be, const ConvDesc& d) {
  TG_CHECK(d.groups >= 1 && d.c % d.groups == 0 && d.out_c % d.groups == 0 && d.out_h > 0 && d.out_w > 0,
           "conv {}: inconsistent descriptor", d.key());
  auto e = std::make_unique<ConvEntry>();
  e->explicit_pad = d.pad_top != d.pad_bottom || d.pad_left != d.pad_right;
  const int64_t hx = e->explicit_pad ? d.h + d.pad_top + d.pad_bottom : d.h;
  const int64_t wx = e->explicit_pad ? d.w + d.pad_left + d.pad_right : d.w;
  TG_CUDNN_CHECK(cudnnCreateTensorDescriptor(&e->x));
  TG_CUDNN_CHECK(cudnnSetTensor4dDescriptor(e->x, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, as_int(d.n, d),
                                            as_int(d.c, d), as_int(hx, d), as_int(wx, d)));
  TG_CUDNN_CHECK(cudnnCreateTensorDescriptor(&e->y));
  TG_CUDNN_CHECK(cudnnSetTensor4dDescriptor(e->y, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, as_int(d.n, d),
                                            as_int(d.out_c, d), as_int(d.out_h, d), as_int(d.out_w, d)));
  TG_CUDNN_CHECK(cudnnCreateFilterDescriptor(&e->w));
  TG_CUDNN_CHECK(cudnnSetFilter4dDescriptor(e->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC, as_int(d.out_c, d),
                                            as_int(d.c / d.groups, d), as_int(d.kh, d), as_int(d.kw, d)));
  e->fwd_conv = make_conv(d, e->explicit_pad);
  e->data_conv = make_conv(d, e->explicit_pad);
  e->filter_conv = make_conv(d, e->explicit_pad);

  int on = 0, oc = 0, oh = 0, ow = 0;
  TG_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(e->fwd_conv, e->x, e->w, &on, &oc, &oh, &ow));
  TG_CHECK(on == d.n && oc == d.out_c && oh == d.out_h && ow == d.out_w,
           "conv {}: cuDNN computes output {}x{}x{}x{}, the descriptor says {}x{}x{}x{}", d.key(), on, oh, ow, oc,
           d.n, d.out_h, d.out_w, d.out_c);

  cudnnHandle_t h = be.cudnn();
  {
    std::vector<cudnnConvolutionFwdAlgoPerf_t> perfs(CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
    int returned = 0;
    TG_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, e->x, e->w, e->fwd_conv, e->y,
                                                          static_cast<int>(perfs.size()), &returned, perfs.data()));
    const auto& p = pick_algo(perfs, returned, "forward", d);
    e->fwd_algo = p.algo;
    TG_CUDNN_CHECK(cudnnSetConvolutionMathType(e->fwd_conv, p.mathType));
    TG_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(h, e->x, e->w, e->fwd_conv, e->y, e->fwd_algo,
                                                           &e->fwd_ws));
  }
  {
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perfs(CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
    int returned = 0;
    TG_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, e->w, e->y, e->data_conv, e->x,
                                                               static_cast<int>(perfs.size()), &returned,
                                                               perfs.data()));
    const auto& p = pick_algo(perfs, returned, "backward-data", d);
    e->data_algo = p.algo;
    TG_CUDNN_CHECK(cudnnSetConvolutionMathType(e->data_conv, p.mathType));
    TG_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(h, e->w, e->y, e->data_conv, e->x, e->data_algo,
                                                                &e->data_ws));
  }
  {
    std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perfs(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
    int returned = 0;
    TG_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, e->x, e->y, e->filter_conv, e->w,
                                                                 static_cast<int>(perfs.size()), &returned,
                                                                 perfs.data()));
    const auto& p = pick_algo(perfs, returned, "backward-filter", d);
    e->filter_algo = p.algo;
    TG_CUDNN_CHECK(cudnnSetConvolutionMathType(e->filter_conv, p.mathType));
    TG_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(h, e->x, e->y, e->filter_conv, e->w,
                                                                  e->filter_algo, &e->filter_ws));
  }

  e->filter_bytes = static_cast<size_t>(d.kh * d.kw * (d.c / d.groups) * d.out_c) * sizeof(float);
  e->padded_bytes = e->explicit_pad ? static_cast<size_t>(d.n * hx * wx * d.c) * sizeof(float) : 0;
  e->off_dw = align256(e->filter_bytes);
  e->off_xp = e->off_dw + align256(e->filter_bytes);
  e->off_scratch = e->off_xp + align256(e->padded_bytes);
  e->total = e->off_scratch + std::max({e->fwd_ws, e->data_ws, e->filter_ws, size_t{256}});
  be.workspace(e->total);  // grow now, while the descriptor is new
  return e.release();
}

ConvEntry& conv_entry(CudaBackend& be, const ConvDesc& d) {
  return be.cached<ConvEntry>("cuda_conv:" + d.key(), [&] { return make_entry(be, d); });
}

char* at(void* base, size_t offset) { return static_cast<char*>(base) + offset; }

}  // namespace

void CudaBackend::conv2d_forward(const ConvDesc& d, const Tensor& x, const Tensor& w, const Tensor& b,
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
  if (d.n == 0) return;
  CudaDeviceGuard guard(index());
  ConvEntry& e = conv_entry(*this, d);
  void* ws = workspace(e.total);
  const int64_t rows_w = d.kh * d.kw * (d.c / d.groups);
  float* wk = reinterpret_cast<float*>(at(ws, 0));
  cuda_kernels::transpose_f32(w.data<float>(), wk, rows_w, d.out_c, stream());
  const float* xin = x.data<float>();
  if (e.explicit_pad) {
    float* xp = reinterpret_cast<float*>(at(ws, e.off_xp));
    cuda_kernels::pad_nhwc_f32(xin, xp, d.n, d.h, d.w, d.c, d.pad_top, d.pad_bottom, d.pad_left, d.pad_right,
                               stream());
    xin = xp;
  }
  const float one = 1.f, beta0 = 0.f;
  TG_CUDNN_CHECK(cudnnConvolutionForward(cudnn(), &one, e.x, xin, e.w, wk, e.fwd_conv, e.fwd_algo,
                                         at(ws, e.off_scratch), e.fwd_ws, &beta0, e.y, y.data<float>()));
  if (d.has_bias)
    cuda_kernels::add_bias_rows_f32(y.data<float>(), b.data<float>(), d.n * d.out_h * d.out_w, d.out_c, stream());
}

void CudaBackend::conv2d_backward(const ConvDesc& d, const Tensor& x, const Tensor& w, const Tensor& dy,
                                  const Tensor& dx, const Tensor& dw, const Tensor& db) {
  TG_CHECK(dy.numel() == d.n * d.out_h * d.out_w * d.out_c, "conv2d_backward {}: dy {} does not match", d.key(),
           dy.str());
  check_on_device(dy, "conv2d_backward", "dy");
  const int64_t rows_w = d.kh * d.kw * (d.c / d.groups);
  CudaDeviceGuard guard(index());
  if (db) {
    TG_CHECK(d.has_bias && db.numel() == d.out_c, "conv2d_backward {}: db {} given for {} outputs", d.key(),
             db.str(), d.out_c);
    check_on_device(db, "conv2d_backward", "db");
    cuda_kernels::column_sum_f32(dy.data<float>(), d.n * d.out_h * d.out_w, d.out_c, db.data<float>(), stream());
  }
  if (!dx && !dw) return;
  if (d.n == 0) {
    if (dw) zero(dw);
    return;
  }
  ConvEntry& e = conv_entry(*this, d);
  void* ws = workspace(e.total);
  const float one = 1.f, beta0 = 0.f;
  float* xp = reinterpret_cast<float*>(at(ws, e.off_xp));
  if (dw) {  // first: it reads the padded x that dx's computation then overwrites
    TG_CHECK(dw.numel() == rows_w * d.out_c && x.numel() == d.n * d.h * d.w * d.c,
             "conv2d_backward {}: dw {} or x {} does not match", d.key(), dw.str(), x.str());
    check_on_device(dw, "conv2d_backward", "dw"), check_on_device(x, "conv2d_backward", "x");
    const float* xin = x.data<float>();
    if (e.explicit_pad) {
      cuda_kernels::pad_nhwc_f32(xin, xp, d.n, d.h, d.w, d.c, d.pad_top, d.pad_bottom, d.pad_left, d.pad_right,
                                 stream());
      xin = xp;
    }
    float* dwk = reinterpret_cast<float*>(at(ws, e.off_dw));
    TG_CUDNN_CHECK(cudnnConvolutionBackwardFilter(cudnn(), &one, e.x, xin, e.y, dy.data<float>(), e.filter_conv,
                                                  e.filter_algo, at(ws, e.off_scratch), e.filter_ws, &beta0, e.w,
                                                  dwk));
    cuda_kernels::transpose_f32(dwk, dw.data<float>(), d.out_c, rows_w, stream());
  }
  if (dx) {
    TG_CHECK(dx.numel() == d.n * d.h * d.w * d.c && w.numel() == rows_w * d.out_c,
             "conv2d_backward {}: dx {} or w {} does not match", d.key(), dx.str(), w.str());
    check_on_device(dx, "conv2d_backward", "dx"), check_on_device(w, "conv2d_backward", "w");
    float* wk = reinterpret_cast<float*>(at(ws, 0));
    cuda_kernels::transpose_f32(w.data<float>(), wk, rows_w, d.out_c, stream());
    float* dxin = e.explicit_pad ? xp : dx.data<float>();
    TG_CUDNN_CHECK(cudnnConvolutionBackwardData(cudnn(), &one, e.w, wk, e.y, dy.data<float>(), e.data_conv,
                                                e.data_algo, at(ws, e.off_scratch), e.data_ws, &beta0, e.x, dxin));
    if (e.explicit_pad)
      cuda_kernels::crop_nhwc_f32(xp, dx.data<float>(), d.n, d.h, d.w, d.c, d.pad_top, d.pad_bottom, d.pad_left,
                                  d.pad_right, stream());
  }
}

}  // namespace tg

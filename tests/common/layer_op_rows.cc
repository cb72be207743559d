// The backend ops table's rows of the layer ops with descriptors (op_case.h): convolution (forward; backward's dx,
// dw, db; the weights in our layout and in the filter layout (ConvDesc::filter_ohwi)), inner product (the same, and a
// bias gradient over 100003 rows, repeatable), max/average pooling (forward, backward; one channel per thread and
// 16-byte channel vectors), LRN (forward, backward; a window wider than cuDNN's) and batch norm (training y, mean,
// variance; backward dx, dgamma, dbeta; inference y; CUDA the CPU's bits), channel concatenation and split, the linear
// algebra at the CUDA backend's former test's shapes (beta 0.5, k 1029), softmax cross-entropy (forward, backward) and
// the optimizers' updates (w and each slot; CUDA the CPU's bits). The shapes and tolerances are those of the CUDA
// backend's former per-op tests; the references are reference_ops.h's double-precision loops. Scratch a row needs
// besides its output (workspaces, the other gradients, the forward's statistics) is allocated on the backend it runs
// on.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/op_case.h"
#include "common/reference_ops.h"
#include "terngrad/backend/op_desc.h"
#include "terngrad/core/buffer.h"
#include "terngrad/math/optim_math.h"

namespace tg::testing {

namespace {

using Vec = ref::Vec;

Vec widen(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }

// A tensor of `shape` (dtype f32, or `bytes` of u8) on `be`, kept alive by `keep`.
struct Scratch {
  Backend& be;
  std::vector<Buffer> keep;
  Tensor f32(const Shape& shape) {
    keep.emplace_back(be.allocator(), static_cast<size_t>(shape.numel()) * sizeof(float) + 1);
    return Tensor(keep.back().data(), shape, DType::kF32, be.device());
  }
  Tensor bytes(size_t n) {
    if (n == 0) return Tensor();
    keep.emplace_back(be.allocator(), n);
    return Tensor(keep.back().data(), Shape{static_cast<int64_t>(n)}, DType::kU8, be.device());
  }
};

// One row per gradient of a backward with three outputs (dx, dw and, with a bias, db): each row computes all of them
// (the others into scratch, as a layer asks for all) and keeps one. run(be, inputs, dx, dw, db); ref(inputs) returns
// the three reference gradients.
template <typename RunBackward, typename ReferenceBackward>
void add_gradient_rows(std::vector<OpCase>& t, const std::string& at, const std::vector<Shape>& inputs,
                       const std::array<Shape, 3>& outs, bool has_bias, RunBackward run, ReferenceBackward ref) {
  const char* names[] = {"_dx", "_dw", "_db"};
  for (int which : {0, 1, 2}) {
    if (which == 2 && !has_bias) continue;
    t.push_back({at + names[which], inputs, outs[static_cast<size_t>(which)], -1,
                 [which, outs, has_bias, run](Backend& be, const std::vector<Tensor>& in, const Tensor& out) {
                   Scratch s{be, {}};
                   const Tensor dx = which == 0 ? out : s.f32(outs[0]), dw = which == 1 ? out : s.f32(outs[1]);
                   const Tensor db = !has_bias ? Tensor() : which == 2 ? out : s.f32(outs[2]);
                   run(be, in, dx, dw, db);
                   be.synchronize();  // the scratch goes at the end of this scope
                 },
                 [which, ref](const Inputs& x) { return ref(x)[static_cast<size_t>(which)]; }, 1e-5});
  }
}

// w (KH, KW, C/g, out_c) in the filter layout (out_c, KH, KW, C/g), moved by cast_many's transposing pair.
Tensor filter_ohwi(Scratch& s, const ConvDesc& d, const Tensor& w) {
  const Tensor out = s.f32(Shape{d.out_c, d.kh, d.kw, d.c / d.groups});
  const int64_t rows = d.kh * d.kw * (d.c / d.groups);
  s.be.cast_many(&out, &w, 1, &rows);
  return out;
}

void add_conv_rows(std::vector<OpCase>& t, const ConvDesc& d);

void add_conv_rows(std::vector<OpCase>& t) {
  for (const ConvDesc& hwio : table_conv_descs())
    for (bool ohwi : {false, true}) {
      ConvDesc d = hwio;
      d.filter_ohwi = ohwi;
      add_conv_rows(t, d);
    }
}

// One descriptor's rows. With filter_ohwi the rows take w in the usual layout (as the reference does), hand the
// backend its transpose and take dw back the same way: the same results from either layout.
void add_conv_rows(std::vector<OpCase>& t, const ConvDesc& d) {
  {
    const Shape xs{d.n, d.h, d.w, d.c}, ws{d.kh, d.kw, d.c / d.groups, d.out_c}, ys{d.n, d.out_h, d.out_w, d.out_c};
    const Shape bs{d.out_c};
    const std::string at = d.key();
    OpCase fwd{at + "_forward",
               d.has_bias ? std::vector<Shape>{xs, ws, bs} : std::vector<Shape>{xs, ws},
               ys,
               -1,
               [d](Backend& be, const std::vector<Tensor>& in, const Tensor& out) {
                 Scratch s{be, {}};
                 be.conv2d_forward(d, in[0], d.filter_ohwi ? filter_ohwi(s, d, in[1]) : in[1],
                                   d.has_bias ? in[2] : Tensor(), out);
                 be.synchronize();  // the scratch goes at the end of this scope
               },
               [d](const Inputs& x) {
                 return ref::conv2d_forward(d, widen(x[0]), widen(x[1]), d.has_bias ? widen(x[2]) : Vec{});
               },
               1e-5};
    t.push_back(fwd);
    // Backward: inputs x, w, dy.
    add_gradient_rows(
        t, at, {xs, ws, ys}, {xs, ws, bs}, d.has_bias,
        [d](Backend& be, const std::vector<Tensor>& in, const Tensor& dx, const Tensor& dw, const Tensor& db) {
          Scratch s{be, {}};
          if (!d.filter_ohwi) return be.conv2d_backward(d, in[0], in[1], in[2], dx, dw, db);
          // dw comes in the filter layout too: moved back to ours for the comparison.
          const Tensor dw_ohwi = s.f32(Shape{d.out_c, d.kh, d.kw, d.c / d.groups});
          be.conv2d_backward(d, in[0], filter_ohwi(s, d, in[1]), in[2], dx, dw_ohwi, db);
          const int64_t rows = d.out_c;
          be.cast_many(&dw, &dw_ohwi, 1, &rows);
          be.synchronize();
        },
        [d](const Inputs& x) {
          std::array<Vec, 3> g;
          ref::conv2d_backward(d, widen(x[0]), widen(x[1]), widen(x[2]), &g[0], &g[1], &g[2]);
          return g;
        });
  }
}

void add_inner_product_rows(std::vector<OpCase>& t) {
  for (bool bias : {true, false}) {
    InnerProductDesc d;
    d.n = 13, d.in = 97, d.out = 29, d.has_bias = bias;
    const Shape xs{d.n, d.in}, ws{d.in, d.out}, ys{d.n, d.out}, bs{d.out};
    const std::string at = d.key();
    t.push_back({at + "_forward", bias ? std::vector<Shape>{xs, ws, bs} : std::vector<Shape>{xs, ws}, ys, -1,
                 [d](Backend& be, const std::vector<Tensor>& in, const Tensor& out) {
                   be.inner_product_forward(d, in[0], in[1], d.has_bias ? in[2] : Tensor(), out);
                 },
                 [d](const Inputs& x) {
                   return ref::inner_product_forward(d, widen(x[0]), widen(x[1]), d.has_bias ? widen(x[2]) : Vec{});
                 },
                 1e-5});
    add_gradient_rows(
        t, at, {xs, ws, ys}, {xs, ws, bs}, bias,
        [d](Backend& be, const std::vector<Tensor>& in, const Tensor& dx, const Tensor& dw, const Tensor& db) {
          be.inner_product_backward(d, in[0], in[1], in[2], dx, dw, db);
        },
        [d](const Inputs& x) {
          std::array<Vec, 3> g;
          ref::inner_product_backward(d, widen(x[0]), widen(x[1]), widen(x[2]), &g[0], &g[1], &g[2]);
          return g;
        });
  }
  // A bias gradient over many rows and few channels (the column sum's 2-D grid), deterministic on CUDA.
  InnerProductDesc d;
  d.n = 100003, d.in = 1, d.out = 64, d.has_bias = true;
  OpCase db{"ip_bias_gradient_100003x64",
            {Shape{d.n, d.in}, Shape{d.in, d.out}, Shape{d.n, d.out}},
            Shape{d.out},
            -1,
            [d](Backend& be, const std::vector<Tensor>& in, const Tensor& out) {
              be.inner_product_backward(d, in[0], in[1], in[2], Tensor(), Tensor(), out);
            },
            [d](const Inputs& x) {
              Vec db;
              ref::inner_product_backward(d, widen(x[0]), widen(x[1]), widen(x[2]), nullptr, nullptr, &db);
              return db;
            },
            1e-5};
  db.repeatable = true;
  t.push_back(db);
}

void add_pool_rows(std::vector<OpCase>& t) {
  struct PoolCase {
    PoolKind kind;
    int64_t h, w, k, stride;
    Padding pad;
  };
  const PoolCase cases[] = {
      {PoolKind::kMax, 9, 9, 3, 2, Padding::kValid},
      {PoolKind::kMax, 10, 11, 3, 2, Padding::kSame},
      {PoolKind::kMax, 8, 8, 2, 2, Padding::kSame},
      {PoolKind::kAvg, 9, 10, 3, 2, Padding::kSame},
      {PoolKind::kAvg, 7, 7, 3, 1, Padding::kSame},
      {PoolKind::kAvg, 8, 8, 2, 2, Padding::kValid},
      {PoolKind::kAvgIncludePad, 7, 7, 3, 1, Padding::kSymmetric},
      {PoolKind::kAvgIncludePad, 8, 8, 3, 2, Padding::kSymmetric},
      {PoolKind::kMax, 8, 8, 3, 2, Padding::kSymmetric},
  };
  // 5 channels: one channel per thread; 16: 16-byte vectors of channels (the CUDA kernels' two paths).
  for (int64_t c : {int64_t{5}, int64_t{16}})
    for (const PoolCase& pc : cases) {
      const PoolDesc d = make_pool_desc(pc.kind, 2, pc.h, pc.w, c, pc.k, pc.k, pc.stride, pc.pad);
      const Shape xs{d.n, d.h, d.w, d.c}, ys{d.n, d.out_h, d.out_w, d.c};
      const char* kind = pc.kind == PoolKind::kMax ? "" : pc.kind == PoolKind::kAvg ? "" : "include_pad_";
      const std::string at = std::string(kind) + d.key();
      t.push_back({at + "_forward",
                   {xs},
                   ys,
                   -1,
                   [d](Backend& be, const std::vector<Tensor>& in, const Tensor& out) {
                     Scratch s{be, {}};
                     be.pool_forward(d, in[0], out, s.bytes(be.pool_workspace_bytes(d)));
                     be.synchronize();
                   },
                   [d](const Inputs& x) { return ref::pool_forward(d, widen(x[0])); },
                   1e-6});
      t.push_back({at + "_backward",
                   {xs, ys},
                   xs,
                   -1,
                   [d, ys](Backend& be, const std::vector<Tensor>& in, const Tensor& out) {
                     Scratch s{be, {}};
                     const Tensor ws = s.bytes(be.pool_workspace_bytes(d)), y = s.f32(ys);
                     be.pool_forward(d, in[0], y, ws);
                     be.pool_backward(d, in[0], y, in[1], ws, out);
                     be.synchronize();
                   },
                   [d](const Inputs& x) { return ref::pool_backward(d, widen(x[0]), widen(x[1])); },
                   1e-6});
    }
}

void add_lrn_rows(std::vector<OpCase>& t) {
  std::vector<LrnDesc> descs;
  for (int64_t radius : {int64_t{2}, int64_t{5}}) {
    LrnDesc d;
    d.n = 2, d.h = 5, d.w = 6, d.c = 16, d.depth_radius = radius, d.bias = 1.f, d.alpha = 0.05f, d.beta = 0.75f;
    descs.push_back(d);
  }
  LrnDesc wide;  // a window wider than cuDNN's LRN takes (depth_radius 7 at most): forward only
  wide.n = 1, wide.h = 2, wide.w = 3, wide.c = 40, wide.depth_radius = 9, wide.alpha = 0.01f;
  descs.push_back(wide);
  for (size_t k = 0; k < descs.size(); ++k) {
    const LrnDesc d = descs[k];
    const Shape s{d.n, d.h, d.w, d.c};
    const std::string at = d.key();
    OpCase fwd{at + "_forward",
               {s},
               s,
               -1,
               [d](Backend& be, const std::vector<Tensor>& in, const Tensor& out) {
                 Scratch sc{be, {}};
                 be.lrn_forward(d, in[0], out, sc.bytes(be.lrn_workspace_bytes(d)));
                 be.synchronize();
               },
               [d](const Inputs& x) { return ref::lrn_forward(d, widen(x[0])); },
               1e-5};
    fwd.ranges = {{-2.f, 2.f}};
    t.push_back(fwd);
    if (k + 1 == descs.size()) continue;
    OpCase bwd{at + "_backward",
               {s, s},
               s,
               -1,
               [d, s](Backend& be, const std::vector<Tensor>& in, const Tensor& out) {
                 Scratch sc{be, {}};
                 const Tensor ws = sc.bytes(be.lrn_workspace_bytes(d)), y = sc.f32(s);
                 be.lrn_forward(d, in[0], y, ws);
                 be.lrn_backward(d, in[0], in[1], ws, out);
                 be.synchronize();
               },
               [d](const Inputs& x) { return ref::lrn_backward(d, widen(x[0]), widen(x[1])); },
               1e-5};
    bwd.ranges = {{-2.f, 2.f}, {-1.f, 1.f}};
    t.push_back(bwd);
  }
}

// Batch norm: the CUDA kernels run the CPU loops' arithmetic in the same order (fixed row chunks, double sums), so
// CUDA must give the CPU's bits; the CPU is held to the double reference within 1e-5.
void add_batch_norm_rows(std::vector<OpCase>& t) {
  struct BnCase {
    int64_t n, hw, c;
    bool has_gamma;
  };
  // one chunk, several chunks with a partial last one and channels past a warp, a single row; 64 channels: the
  // element-wise passes in 16-byte vectors
  for (const BnCase& bc : {BnCase{2, 5, 7, true}, BnCase{2, 5, 7, false}, BnCase{3, 17, 45, true},
                           BnCase{1, 1, 3, true}, BnCase{2, 9, 64, true}}) {
    BatchNormDesc d;
    d.rows = bc.n * bc.hw * bc.hw, d.c = bc.c, d.epsilon = 0.001f, d.has_gamma = bc.has_gamma;
    const Shape xs{bc.n, bc.hw, bc.hw, bc.c}, cs{d.c};
    const std::string at = d.key();
    const std::pair<float, float> x_range{-1.f, 3.f}, gamma_range{0.5f, 1.5f}, any{-1.f, 1.f};
    // Training forward: inputs x, gamma, beta; one row per output (y, mean, population variance).
    for (int which : {0, 1, 2}) {
      const char* names[] = {"_training_y", "_mean", "_variance"};
      OpCase c{at + names[which],
               {xs, cs, cs},
               which == 0 ? xs : cs,
               -1,
               [d, which, xs, cs](Backend& be, const std::vector<Tensor>& in, const Tensor& out) {
                 Scratch s{be, {}};
                 const Tensor y = which == 0 ? out : s.f32(xs), mean = which == 1 ? out : s.f32(cs);
                 const Tensor var = which == 2 ? out : s.f32(cs);
                 be.batch_norm_forward_training(d, in[0], d.has_gamma ? in[1] : Tensor(), in[2], y, mean, var);
                 be.synchronize();
               },
               [d, which](const Inputs& x) {
                 Vec mean, var;
                 Vec y = ref::batch_norm_forward_training(d, widen(x[0]), d.has_gamma ? widen(x[1]) : Vec{},
                                                          widen(x[2]), &mean, &var);
                 return which == 0 ? y : which == 1 ? mean : var;
               },
               1e-5};
      c.ranges = {x_range, gamma_range, any};
      c.cuda_same_bits = true;
      t.push_back(c);
    }
    // The moving statistics the training forward updates (decay 0.9): inputs x, gamma, beta and the moving mean or
    // variance before, updated in place.
    for (int which : {0, 1}) {
      OpCase c{at + (which == 0 ? "_moving_mean" : "_moving_variance"),
               {xs, cs, cs, cs},
               cs,
               3,
               [d, which, xs, cs](Backend& be, const std::vector<Tensor>& in, const Tensor& out) {
                 Scratch s{be, {}};
                 BatchNormMoving moving;
                 (which == 0 ? moving.mean : moving.var) = out;
                 moving.decay = 0.9f;
                 be.batch_norm_forward_training(d, in[0], d.has_gamma ? in[1] : Tensor(), in[2], s.f32(xs), s.f32(cs),
                                                s.f32(cs), moving);
                 be.synchronize();
               },
               [d, which](const Inputs& x) {
                 Vec mean, var;
                 ref::batch_norm_forward_training(d, widen(x[0]), d.has_gamma ? widen(x[1]) : Vec{}, widen(x[2]), &mean,
                                                  &var);
                 const Vec& batch = which == 0 ? mean : var;
                 Vec moving = widen(x[3]);
                 for (size_t j = 0; j < moving.size(); ++j) moving[j] = 0.9 * moving[j] + 0.1 * batch[j];
                 return moving;
               },
               1e-5};
      c.ranges = {x_range, gamma_range, any, {0.5f, 2.f}};
      c.cuda_same_bits = true;
      t.push_back(c);
    }
    // Backward of the training forward: inputs x, gamma, beta, dy (the statistics from the backend's own forward);
    // with a fused ReLU dy is its output's gradient (the reference keeps it where its own y > 0).
    for (const bool relu : {false, true})
      for (int which : {0, 1, 2}) {
        if (which == 1 && !d.has_gamma) continue;
        const char* names[] = {"_dx", "_dgamma", "_dbeta"};
        BatchNormDesc bd = d;
        bd.relu = relu;
        OpCase c{bd.key() + names[which],
                 {xs, cs, cs, xs},
                 which == 0 ? xs : cs,
                 -1,
                 [d, bd, which, xs, cs](Backend& be, const std::vector<Tensor>& in, const Tensor& out) {
                   Scratch s{be, {}};
                   const Tensor gamma = d.has_gamma ? in[1] : Tensor();
                   const Tensor y = s.f32(xs), mean = s.f32(cs), var = s.f32(cs);
                   be.batch_norm_forward_training(bd, in[0], gamma, in[2], y, mean, var);
                   const Tensor dx = which == 0 ? out : s.f32(xs), dbeta = which == 2 ? out : s.f32(cs);
                   const Tensor dgamma = !d.has_gamma ? Tensor() : which == 1 ? out : s.f32(cs);
                   be.batch_norm_backward(bd, in[0], gamma, mean, var, in[3], dx, dgamma, dbeta,
                                          bd.relu ? in[2] : Tensor());
                   be.synchronize();
                 },
                 [d, relu, which](const Inputs& x) {
                   const Vec gamma = d.has_gamma ? widen(x[1]) : Vec{};
                   Vec mean, var, dx, dgamma, dbeta;
                   const Vec y = ref::batch_norm_forward_training(d, widen(x[0]), gamma, widen(x[2]), &mean, &var);
                   Vec dy = widen(x[3]);
                   if (relu)
                     for (size_t e = 0; e < dy.size(); ++e) dy[e] = y[e] > 0 ? dy[e] : 0;
                   ref::batch_norm_backward(d, widen(x[0]), gamma, mean, var, dy, &dx, &dgamma, &dbeta);
                   return which == 0 ? dx : which == 1 ? dgamma : dbeta;
                 },
                 1e-5};
        c.ranges = {x_range, gamma_range, any, any};
        c.cuda_same_bits = true;
        t.push_back(c);
      }
    // Inference with given statistics (not the batch's): inputs x, gamma, beta, moving mean, moving variance.
    OpCase inf{at + "_inference_y",
               {xs, cs, cs, cs, cs},
               xs,
               -1,
               [d](Backend& be, const std::vector<Tensor>& in, const Tensor& out) {
                 be.batch_norm_forward_inference(d, in[0], d.has_gamma ? in[1] : Tensor(), in[2], in[3], in[4], out);
               },
               [d](const Inputs& x) {
                 return ref::batch_norm_forward_inference(d, widen(x[0]), d.has_gamma ? widen(x[1]) : Vec{},
                                                          widen(x[2]), widen(x[3]), widen(x[4]));
               },
               1e-5};
    inf.ranges = {x_range, gamma_range, any, any, {0.5f, 2.f}};
    inf.cuda_same_bits = true;
    t.push_back(inf);
    // Both forwards with a fused ReLU (BatchNormDesc::relu): max(y, 0) of the reference's y.
    BatchNormDesc r = d;
    r.relu = true;
    OpCase train_relu{r.key() + "_training_y",
                      {xs, cs, cs},
                      xs,
                      -1,
                      [r, cs](Backend& be, const std::vector<Tensor>& in, const Tensor& out) {
                        Scratch s{be, {}};
                        be.batch_norm_forward_training(r, in[0], r.has_gamma ? in[1] : Tensor(), in[2], out, s.f32(cs),
                                                       s.f32(cs));
                        be.synchronize();
                      },
                      [d](const Inputs& x) {
                        Vec mean, var;
                        Vec y = ref::batch_norm_forward_training(d, widen(x[0]), d.has_gamma ? widen(x[1]) : Vec{},
                                                                 widen(x[2]), &mean, &var);
                        for (double& v : y) v = v < 0 ? 0 : v;
                        return y;
                      },
                      1e-5};
    train_relu.ranges = {x_range, gamma_range, any};
    train_relu.cuda_same_bits = true;
    t.push_back(train_relu);
    OpCase inf_relu = inf;
    inf_relu.name = r.key() + "_inference_y";
    inf_relu.run = [r](Backend& be, const std::vector<Tensor>& in, const Tensor& out) {
      be.batch_norm_forward_inference(r, in[0], r.has_gamma ? in[1] : Tensor(), in[2], in[3], in[4], out);
    };
    inf_relu.reference = [d](const Inputs& x) {
      Vec y = ref::batch_norm_forward_inference(d, widen(x[0]), d.has_gamma ? widen(x[1]) : Vec{}, widen(x[2]),
                                                widen(x[3]), widen(x[4]));
      for (double& v : y) v = v < 0 ? 0 : v;
      return y;
    };
    t.push_back(inf_relu);
  }
}

// Channel concatenation of three NHWC tensors (4, 1 and 7 channels) and its split, the middle part not wanted (a
// branch without a gradient): one row per written part.
void add_concat_rows(std::vector<OpCase>& t) {
  const Shape p1{2, 3, 5, 4}, p2{2, 3, 5, 1}, p3{2, 3, 5, 7}, all{2, 3, 5, 12};
  const int64_t rows = 2 * 3 * 5;
  auto concat = [rows](const Inputs& x) {  // rows of 4 + 1 + 7 channels
    Vec out;
    for (int64_t r = 0; r < rows; ++r)
      for (size_t k = 0; k < 3; ++k) {
        const int64_t c = static_cast<int64_t>(x[k].size()) / rows;
        for (int64_t i = 0; i < c; ++i) out.push_back(x[k][static_cast<size_t>(r * c + i)]);
      }
    return out;
  };
  t.push_back({"concat_channels_4_1_7",
               {p1, p2, p3},
               all,
               -1,
               [](Backend& be, const std::vector<Tensor>& in, const Tensor& out) {
                 be.concat_channels({in[0], in[1], in[2]}, out);
               },
               concat});
  for (int part : {0, 2}) {
    const int64_t first = part == 0 ? 0 : 5, width = part == 0 ? 4 : 7;
    t.push_back({std::string("split_channels_part") + std::to_string(part + 1) + "_of_4_1_7",
                 {all},
                 part == 0 ? p1 : p3,
                 -1,
                 [part, p1, p2, p3](Backend& be, const std::vector<Tensor>& in, const Tensor& out) {
                   Scratch s{be, {}};
                   const Tensor skipped(nullptr, p2, DType::kF32, be.device());
                   be.split_channels(in[0], {part == 0 ? out : s.f32(p1), skipped, part == 2 ? out : s.f32(p3)});
                   be.synchronize();
                 },
                 [rows, first, width](const Inputs& x) {
                   Vec out;
                   for (int64_t r = 0; r < rows; ++r)
                     for (int64_t i = 0; i < width; ++i) out.push_back(x[0][static_cast<size_t>(r * 12 + first + i)]);
                   return out;
                 }});
  }
}

// Matrix products with beta 0.5 into an existing c (every transpose; k = 1029 spans many of cuBLAS's tiles) and the
// Gram-Schmidt of 4099 x 3 (PowerSGD's shapes: a long column block).
void add_linear_algebra_rows(std::vector<OpCase>& t) {
  const int64_t m = 37, k = 1029, n = 5;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const Shape as = ta ? Shape{k, m} : Shape{m, k}, bs = tb ? Shape{n, k} : Shape{k, n}, cs{m, n};
      t.push_back({std::string("matmul_beta_") + (ta ? "T" : "N") + (tb ? "T" : "N") + "_37x1029x5",
                   {as, bs, cs},
                   cs,
                   2,  // c starts as input 2: out = op(a) op(b) + 0.5 c
                   [ta, tb](Backend& be, const std::vector<Tensor>& in, const Tensor& out) {
                     be.matmul(in[0], ta, in[1], tb, 0.5f, out);
                   },
                   [ta, tb, as, bs](const Inputs& x) {
                     return ref::matmul(widen(x[0]), as[0], as[1], ta, widen(x[1]), bs[0], bs[1], tb, 0.5, widen(x[2]));
                   },
                   1e-5});
    }
  t.push_back({"orthogonalize_columns_4099x3",
               {Shape{4099, 3}},
               Shape{4099, 3},
               0,
               [](Backend& be, const std::vector<Tensor>&, const Tensor& out) { be.orthogonalize_columns(out, 0.f); },
               [](const Inputs& x) { return ref::orthogonalize_columns(widen(x[0]), 4099, 3, 0.0); },
               1e-5});
}

// The labels of the loss rows: example i's class is (i * 7919) % k, on `be` as i32.
std::vector<int32_t> loss_labels(int64_t n, int64_t k) {
  std::vector<int32_t> lab(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) lab[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919) % k);
  return lab;
}
Tensor labels_on(Scratch& s, int64_t n, int64_t k) {
  std::vector<int32_t> lab = loss_labels(n, k);
  s.keep.emplace_back(s.be.allocator(), lab.size() * sizeof(int32_t));
  const Tensor t(s.keep.back().data(), Shape{n}, DType::kI32, s.be.device());
  s.be.copy(t, Tensor(lab.data(), Shape{n}, DType::kI32, Device::cpu()));
  return t;
}

// Softmax cross-entropy with and without label smoothing on 10 and 1001 classes: forward probabilities and losses,
// and the backward of given probabilities (shared arithmetic: CUDA the CPU's bits).
void add_loss_rows(std::vector<OpCase>& t) {
  const int64_t n = 37;
  for (int64_t k : {int64_t{10}, int64_t{1001}})
    for (float ls : {0.f, 0.1f}) {
      const std::string at = "softmax_xent_k" + std::to_string(k) + (ls > 0 ? "_smoothed" : "");
      // target_ij = (1 - ls) [j == label_i] + ls / k
      auto target = [k, ls](int64_t i, int64_t j) {
        return (1.0 - ls) * (j == loss_labels(i + 1, k)[static_cast<size_t>(i)] ? 1.0 : 0.0) + ls / double(k);
      };
      for (int which : {0, 1}) {
        OpCase c{
            at + (which == 0 ? "_probs" : "_losses"),
            {Shape{n, k}},
            which == 0 ? Shape{n, k} : Shape{n},
            -1,
            [n, k, ls, which](Backend& be, const std::vector<Tensor>& in, const Tensor& out) {
              Scratch s{be, {}};
              const Tensor probs = which == 0 ? out : s.f32(Shape{n, k}), losses = which == 1 ? out : s.f32(Shape{n});
              be.softmax_xent_forward(in[0], labels_on(s, n, k), ls, probs, losses);
              be.synchronize();
            },
            [n, k, which, target](const Inputs& x) {
              Vec out;
              for (int64_t i = 0; i < n; ++i) {
                double mx = -1e300, sum = 0;
                for (int64_t j = 0; j < k; ++j) mx = std::max(mx, double(x[0][static_cast<size_t>(i * k + j)]));
                for (int64_t j = 0; j < k; ++j) sum += std::exp(x[0][static_cast<size_t>(i * k + j)] - mx);
                double loss = 0;
                for (int64_t j = 0; j < k; ++j) {
                  const double logp = x[0][static_cast<size_t>(i * k + j)] - mx - std::log(sum);
                  if (which == 0) out.push_back(std::exp(logp));
                  loss -= target(i, j) * logp;
                }
                if (which == 1) out.push_back(loss);
              }
              return out;
            },
            1e-6};
        c.ranges = {{-8.f, 8.f}};
        t.push_back(c);
      }
      OpCase back{at + "_backward",
                  {Shape{n, k}},
                  Shape{n, k},
                  -1,
                  [n, k, ls](Backend& be, const std::vector<Tensor>& in, const Tensor& out) {
                    Scratch s{be, {}};
                    be.softmax_xent_backward(in[0], labels_on(s, n, k), ls, 1.f / static_cast<float>(n), out);
                    be.synchronize();
                  },
                  [n, k, target](const Inputs& x) {
                    Vec out;
                    for (int64_t i = 0; i < n; ++i)
                      for (int64_t j = 0; j < k; ++j)
                        out.push_back((x[0][static_cast<size_t>(i * k + j)] - target(i, j)) / static_cast<double>(n));
                    return out;
                  },
                  1e-6};
      back.ranges = {{0.f, 1.f}};
      back.cuda_same_bits = true;
      t.push_back(back);
    }
}

// The optimizers (gd, momentum, adam, rmsprop with its slot at 1) over 3 steps of 50001 parameters, inputs w and
// the three gradients: one row per state tensor (w and the slots each has). The shared update math: CUDA the CPU's
// bits; the CPU against the formulas of optim_math.h in double.
void add_optimizer_rows(std::vector<OpCase>& t) {
  const Shape s{50001};
  struct Opt {
    const char* name;
    OptimizerStep step;
    int slots;
    float s1_init;
  };
  OptimizerStep gd, mom, adam, rms;
  gd.kind = OptimizerKind::kGd, gd.lr = 0.1f;
  mom.kind = OptimizerKind::kMomentum, mom.lr = 0.05f, mom.momentum = 0.9f;
  adam.kind = OptimizerKind::kAdam, adam.lr = 0.001f;
  rms.kind = OptimizerKind::kRmsprop, rms.lr = 0.01f, rms.momentum = 0.5f, rms.decay = 0.9f, rms.epsilon = 1e-10f;
  for (const Opt& o :
       {Opt{"gd", gd, 0, 0.f}, Opt{"momentum", mom, 1, 0.f}, Opt{"adam", adam, 2, 0.f}, Opt{"rmsprop", rms, 2, 1.f}}) {
    for (int which = 0; which <= o.slots; ++which) {
      const char* names[] = {"_w", "_slot1", "_slot2"};
      OpCase c{std::string("optimizer_") + o.name + names[which],
               {s, s, s, s},
               s,
               which == 0 ? 0 : -1,
               [o, s, which](Backend& be, const std::vector<Tensor>& in, const Tensor& out) {
                 Scratch sc{be, {}};
                 const Tensor w = which == 0 ? out : sc.f32(s), s1 = which == 1 ? out : sc.f32(s);
                 const Tensor s2 = which == 2 ? out : sc.f32(s);
                 if (which != 0) be.copy(w, in[0]);
                 be.fill(s1, o.s1_init), be.fill(s2, 0.f);
                 for (int step = 1; step <= 3; ++step)
                   be.optimizer_update(o.step, w, in[static_cast<size_t>(step)], s1, s2, Tensor());
                 be.synchronize();
               },
               [o, which](const Inputs& x) {
                 const OptimizerStep& p = o.step;
                 Vec out;
                 for (size_t i = 0; i < x[0].size(); ++i) {
                   double w = x[0][i], s1 = o.s1_init, s2 = 0;
                   for (int step = 1; step <= 3; ++step) {
                     const double g = x[static_cast<size_t>(step)][i];
                     switch (p.kind) {
                       case OptimizerKind::kGd:
                         w -= p.lr * g;
                         break;
                       case OptimizerKind::kMomentum:
                         s1 = p.momentum * s1 + g, w -= p.lr * s1;
                         break;
                       case OptimizerKind::kAdam:
                         s1 = p.beta1 * s1 + (1.0 - p.beta1) * g, s2 = p.beta2 * s2 + (1.0 - p.beta2) * g * g;
                         w -= p.lr * s1 / (std::sqrt(s2) + p.epsilon);
                         break;
                       case OptimizerKind::kRmsprop:
                         s1 = p.decay * s1 + (1.0 - p.decay) * g * g;
                         s2 = p.momentum * s2 + p.lr * g / std::sqrt(s1 + p.epsilon);
                         w -= s2;
                         break;
                     }
                   }
                   out.push_back(which == 0 ? w : which == 1 ? s1 : s2);
                 }
                 return out;
               },
               1e-5};
      c.cuda_same_bits = true;
      t.push_back(c);
    }
  }
}

}  // namespace

std::vector<ConvDesc> table_conv_descs() {
  struct ConvCase {
    int64_t n, h, w, c, k, o, stride;
    Padding pad;
    int64_t groups;
    bool bias;
  };
  const ConvCase cases[] = {
      {2, 9, 9, 3, 3, 8, 1, Padding::kSame, 1, true},      // symmetric padding: cuDNN pads
      {3, 10, 11, 4, 3, 6, 2, Padding::kSame, 1, true},    // odd pixel after: CUDA's output shift
      {2, 14, 14, 3, 7, 5, 2, Padding::kSame, 1, false},   // ResNet stem shape, asymmetric: CUDA's output shift
      {2, 14, 14, 3, 7, 64, 2, Padding::kSame, 1, false},  // the same, 64 outputs: CUDA's input copy
      {2, 8, 9, 4, 5, 4, 2, Padding::kValid, 2, true},     // groups
      {1, 6, 6, 8, 1, 16, 1, Padding::kSame, 1, true},     // 1x1
  };
  std::vector<ConvDesc> out;
  for (const ConvCase& c : cases)
    out.push_back(make_conv_desc(c.n, c.h, c.w, c.c, c.k, c.k, c.o, c.stride, c.pad, c.groups, c.bias));
  return out;
}

std::vector<OpCase> layer_op_cases() {
  std::vector<OpCase> t;
  add_conv_rows(t);
  add_inner_product_rows(t);
  add_pool_rows(t);
  add_lrn_rows(t);
  add_batch_norm_rows(t);
  add_concat_rows(t);
  add_linear_algebra_rows(t);
  add_loss_rows(t);
  add_optimizer_rows(t);
  return t;
}

}  // namespace tg::testing

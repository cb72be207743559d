// Plain-loop double-precision references for convolution, pooling, LRN, batch norm and inner product.
#include "common/reference_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "terngrad/core/error.h"

namespace tg::ref {
namespace {

// Index helpers for NHWC activations and (KH, KW, Cg, O) weights.
struct ConvIndex {
  const ConvDesc& d;
  int64_t cg, og;
  explicit ConvIndex(const ConvDesc& desc) : d(desc), cg(desc.c / desc.groups), og(desc.out_c / desc.groups) {}
  int64_t x(int64_t n, int64_t h, int64_t w, int64_t c) const { return ((n * d.h + h) * d.w + w) * d.c + c; }
  int64_t y(int64_t n, int64_t h, int64_t w, int64_t o) const {
    return ((n * d.out_h + h) * d.out_w + w) * d.out_c + o;
  }
  int64_t w(int64_t kh, int64_t kw, int64_t ci, int64_t o) const { return ((kh * d.kw + kw) * cg + ci) * d.out_c + o; }
};

void check_size(const Vec& v, int64_t n, const char* what) {
  TG_CHECK(static_cast<int64_t>(v.size()) == n, "reference op: {} has {} elements, expected {}", what, v.size(), n);
}

}  // namespace

Vec conv2d_forward(const ConvDesc& d, const Vec& x, const Vec& w, const Vec& b) {
  ConvIndex ix(d);
  check_size(x, d.n * d.h * d.w * d.c, "conv x");
  check_size(w, d.kh * d.kw * ix.cg * d.out_c, "conv w");
  Vec y(d.n * d.out_h * d.out_w * d.out_c);
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t oh = 0; oh < d.out_h; ++oh)
      for (int64_t ow = 0; ow < d.out_w; ++ow)
        for (int64_t o = 0; o < d.out_c; ++o) {
          int64_t g = o / ix.og;
          double acc = b.empty() ? 0.0 : b[o];
          for (int64_t kh = 0; kh < d.kh; ++kh) {
            int64_t ih = oh * d.stride_h - d.pad_top + kh;
            if (ih < 0 || ih >= d.h) continue;
            for (int64_t kw = 0; kw < d.kw; ++kw) {
              int64_t iw = ow * d.stride_w - d.pad_left + kw;
              if (iw < 0 || iw >= d.w) continue;
              for (int64_t ci = 0; ci < ix.cg; ++ci) acc += x[ix.x(n, ih, iw, g * ix.cg + ci)] * w[ix.w(kh, kw, ci, o)];
            }
          }
          y[ix.y(n, oh, ow, o)] = acc;
        }
  return y;
}

void conv2d_backward(const ConvDesc& d, const Vec& x, const Vec& w, const Vec& dy, Vec* dx, Vec* dw, Vec* db) {
  ConvIndex ix(d);
  check_size(dy, d.n * d.out_h * d.out_w * d.out_c, "conv dy");
  if (dx) dx->assign(x.size(), 0.0);
  if (dw) dw->assign(w.size(), 0.0);
  if (db) db->assign(d.out_c, 0.0);
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t oh = 0; oh < d.out_h; ++oh)
      for (int64_t ow = 0; ow < d.out_w; ++ow)
        for (int64_t o = 0; o < d.out_c; ++o) {
          int64_t g = o / ix.og;
          double gy = dy[ix.y(n, oh, ow, o)];
          if (db) (*db)[o] += gy;
          for (int64_t kh = 0; kh < d.kh; ++kh) {
            int64_t ih = oh * d.stride_h - d.pad_top + kh;
            if (ih < 0 || ih >= d.h) continue;
            for (int64_t kw = 0; kw < d.kw; ++kw) {
              int64_t iw = ow * d.stride_w - d.pad_left + kw;
              if (iw < 0 || iw >= d.w) continue;
              for (int64_t ci = 0; ci < ix.cg; ++ci) {
                int64_t xi = ix.x(n, ih, iw, g * ix.cg + ci), wi = ix.w(kh, kw, ci, o);
                if (dx) (*dx)[xi] += gy * w[wi];
                if (dw) (*dw)[wi] += gy * x[xi];
              }
            }
          }
        }
}

// Calls f(output index, input index) for every in-image cell of every pooling window, window by window.
template <typename F>
static void for_each_window(const PoolDesc& d, F&& f) {
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t oh = 0; oh < d.out_h; ++oh)
      for (int64_t ow = 0; ow < d.out_w; ++ow)
        for (int64_t c = 0; c < d.c; ++c) {
          int64_t yi = ((n * d.out_h + oh) * d.out_w + ow) * d.c + c;
          std::vector<int64_t> cells;
          for (int64_t kh = 0; kh < d.kh; ++kh) {
            int64_t ih = oh * d.stride_h - d.pad_top + kh;
            if (ih < 0 || ih >= d.h) continue;
            for (int64_t kw = 0; kw < d.kw; ++kw) {
              int64_t iw = ow * d.stride_w - d.pad_left + kw;
              if (iw < 0 || iw >= d.w) continue;
              cells.push_back(((n * d.h + ih) * d.w + iw) * d.c + c);
            }
          }
          TG_CHECK(!cells.empty(), "reference pool: empty window at output ({}, {}, {})", n, oh, ow);
          f(yi, cells);
        }
}

// What an average pool divides by: the in-image cells (TF) or the whole window (PyTorch's count_include_pad).
static double avg_count(const PoolDesc& d, const std::vector<int64_t>& cells) {
  return d.kind == PoolKind::kAvgIncludePad ? static_cast<double>(d.kh * d.kw) : static_cast<double>(cells.size());
}

Vec pool_forward(const PoolDesc& d, const Vec& x) {
  check_size(x, d.n * d.h * d.w * d.c, "pool x");
  Vec y(d.n * d.out_h * d.out_w * d.c);
  for_each_window(d, [&](int64_t yi, const std::vector<int64_t>& cells) {
    if (d.kind == PoolKind::kMax) {
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t i : cells) m = std::max(m, x[i]);
      y[yi] = m;
    } else {
      double s = 0;
      for (int64_t i : cells) s += x[i];
      y[yi] = s / avg_count(d, cells);
    }
  });
  return y;
}

Vec pool_backward(const PoolDesc& d, const Vec& x, const Vec& dy) {
  check_size(dy, d.n * d.out_h * d.out_w * d.c, "pool dy");
  Vec dx(x.size(), 0.0);
  for_each_window(d, [&](int64_t yi, const std::vector<int64_t>& cells) {
    if (d.kind == PoolKind::kMax) {
      int64_t best = cells[0];
      for (int64_t i : cells)
        if (x[i] > x[best]) best = i;
      dx[best] += dy[yi];
    } else {
      for (int64_t i : cells) dx[i] += dy[yi] / avg_count(d, cells);
    }
  });
  return dx;
}

// s = bias + alpha * sum_{window} x^2 at every element.
static Vec lrn_scale(const LrnDesc& d, const Vec& x) {
  check_size(x, d.n * d.h * d.w * d.c, "lrn x");
  Vec s(x.size());
  int64_t pixels = d.n * d.h * d.w;
  for (int64_t p = 0; p < pixels; ++p)
    for (int64_t c = 0; c < d.c; ++c) {
      double sum = 0;
      for (int64_t k = std::max<int64_t>(0, c - d.depth_radius); k <= std::min(d.c - 1, c + d.depth_radius); ++k)
        sum += x[p * d.c + k] * x[p * d.c + k];
      s[p * d.c + c] = d.bias + static_cast<double>(d.alpha) * sum;
    }
  return s;
}

Vec lrn_forward(const LrnDesc& d, const Vec& x) {
  Vec s = lrn_scale(d, x), y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * std::pow(s[i], -static_cast<double>(d.beta));
  return y;
}

Vec lrn_backward(const LrnDesc& d, const Vec& x, const Vec& dy) {
  Vec s = lrn_scale(d, x), dx(x.size(), 0.0);
  double beta = d.beta, alpha = d.alpha;
  int64_t pixels = d.n * d.h * d.w;
  for (int64_t p = 0; p < pixels; ++p)
    for (int64_t i = 0; i < d.c; ++i) {
      int64_t ii = p * d.c + i;
      // y_i = x_i s_i^-beta; d y_i / d x_j = [i==j] s_i^-beta - 2 alpha beta x_i x_j s_i^(-beta-1), |i-j| <= r
      dx[ii] += dy[ii] * std::pow(s[ii], -beta);
      double common = -2.0 * alpha * beta * dy[ii] * x[ii] * std::pow(s[ii], -beta - 1.0);
      for (int64_t j = std::max<int64_t>(0, i - d.depth_radius); j <= std::min(d.c - 1, i + d.depth_radius); ++j)
        dx[p * d.c + j] += common * x[p * d.c + j];
    }
  return dx;
}

Vec batch_norm_forward_training(const BatchNormDesc& d, const Vec& x, const Vec& gamma, const Vec& beta, Vec* mean,
                                Vec* var) {
  check_size(x, d.rows * d.c, "bn x");
  Vec m(d.c, 0.0), v(d.c, 0.0);
  for (int64_t r = 0; r < d.rows; ++r)
    for (int64_t c = 0; c < d.c; ++c) m[c] += x[r * d.c + c];
  for (auto& e : m) e /= static_cast<double>(d.rows);
  for (int64_t r = 0; r < d.rows; ++r)
    for (int64_t c = 0; c < d.c; ++c) v[c] += (x[r * d.c + c] - m[c]) * (x[r * d.c + c] - m[c]);
  for (auto& e : v) e /= static_cast<double>(d.rows);
  Vec y = batch_norm_forward_inference(d, x, gamma, beta, m, v);
  if (mean) *mean = m;
  if (var) *var = v;
  return y;
}

Vec batch_norm_forward_inference(const BatchNormDesc& d, const Vec& x, const Vec& gamma, const Vec& beta,
                                 const Vec& mean, const Vec& var) {
  check_size(x, d.rows * d.c, "bn x");
  Vec y(x.size());
  for (int64_t r = 0; r < d.rows; ++r)
    for (int64_t c = 0; c < d.c; ++c) {
      double g = gamma.empty() ? 1.0 : gamma[c];
      y[r * d.c + c] = g * (x[r * d.c + c] - mean[c]) / std::sqrt(var[c] + d.epsilon) + beta[c];
    }
  return y;
}

void batch_norm_backward(const BatchNormDesc& d, const Vec& x, const Vec& gamma, const Vec& mean, const Vec& var,
                         const Vec& dy, Vec* dx, Vec* dgamma, Vec* dbeta) {
  check_size(dy, d.rows * d.c, "bn dy");
  Vec sum_dy(d.c, 0.0), sum_dy_xhat(d.c, 0.0), inv_std(d.c);
  for (int64_t c = 0; c < d.c; ++c) inv_std[c] = 1.0 / std::sqrt(var[c] + d.epsilon);
  for (int64_t r = 0; r < d.rows; ++r)
    for (int64_t c = 0; c < d.c; ++c) {
      int64_t i = r * d.c + c;
      sum_dy[c] += dy[i];
      sum_dy_xhat[c] += dy[i] * (x[i] - mean[c]) * inv_std[c];
    }
  if (dbeta) *dbeta = sum_dy;
  if (dgamma) *dgamma = sum_dy_xhat;
  if (dx) {
    dx->assign(x.size(), 0.0);
    double rows = static_cast<double>(d.rows);
    for (int64_t r = 0; r < d.rows; ++r)
      for (int64_t c = 0; c < d.c; ++c) {
        int64_t i = r * d.c + c;
        double g = gamma.empty() ? 1.0 : gamma[c];
        double xhat = (x[i] - mean[c]) * inv_std[c];
        (*dx)[i] = g * inv_std[c] * (dy[i] - sum_dy[c] / rows - xhat * sum_dy_xhat[c] / rows);
      }
  }
}

Vec inner_product_forward(const InnerProductDesc& d, const Vec& x, const Vec& w, const Vec& b) {
  check_size(x, d.n * d.in, "ip x");
  check_size(w, d.in * d.out, "ip w");
  Vec y(d.n * d.out);
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t o = 0; o < d.out; ++o) {
      double acc = b.empty() ? 0.0 : b[o];
      for (int64_t i = 0; i < d.in; ++i) acc += x[n * d.in + i] * w[i * d.out + o];
      y[n * d.out + o] = acc;
    }
  return y;
}

void inner_product_backward(const InnerProductDesc& d, const Vec& x, const Vec& w, const Vec& dy, Vec* dx, Vec* dw,
                            Vec* db) {
  check_size(dy, d.n * d.out, "ip dy");
  if (dx) dx->assign(x.size(), 0.0);
  if (dw) dw->assign(w.size(), 0.0);
  if (db) db->assign(d.out, 0.0);
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t o = 0; o < d.out; ++o) {
      double gy = dy[n * d.out + o];
      if (db) (*db)[o] += gy;
      for (int64_t i = 0; i < d.in; ++i) {
        if (dx) (*dx)[n * d.in + i] += gy * w[i * d.out + o];
        if (dw) (*dw)[i * d.out + o] += gy * x[n * d.in + i];
      }
    }
}

Vec matmul(const Vec& a, int64_t ra, int64_t ca, bool transpose_a, const Vec& b, int64_t rb, int64_t cb,
           bool transpose_b, double beta, const Vec& c) {
  check_size(a, ra * ca, "matmul a");
  check_size(b, rb * cb, "matmul b");
  const int64_t m = transpose_a ? ca : ra, k = transpose_a ? ra : ca, n = transpose_b ? rb : cb;
  Vec out(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = c.empty() ? 0.0 : beta * c[i * n + j];
      for (int64_t q = 0; q < k; ++q)
        acc += (transpose_a ? a[q * ca + i] : a[i * ca + q]) * (transpose_b ? b[j * cb + q] : b[q * cb + j]);
      out[i * n + j] = acc;
    }
  return out;
}

Vec orthogonalize_columns(const Vec& m, int64_t rows, int64_t cols, double epsilon) {
  check_size(m, rows * cols, "orthogonalize m");
  Vec p = m;
  for (int64_t i = 0; i < cols; ++i) {
    double norm2 = 0;
    for (int64_t r = 0; r < rows; ++r) norm2 += p[r * cols + i] * p[r * cols + i];
    const double norm = std::sqrt(norm2) + epsilon;
    for (int64_t r = 0; r < rows; ++r) p[r * cols + i] = norm > 0 ? p[r * cols + i] / norm : 0.0;
    for (int64_t j = i + 1; j < cols; ++j) {
      double dot = 0;
      for (int64_t r = 0; r < rows; ++r) dot += p[r * cols + i] * p[r * cols + j];
      for (int64_t r = 0; r < rows; ++r) p[r * cols + j] -= dot * p[r * cols + i];
    }
  }
  return p;
}

}  // namespace tg::ref

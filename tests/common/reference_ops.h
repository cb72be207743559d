// Naive double-precision reference implementations (plain loops, no libraries) of the heavy layer ops:
// convolution (groups, stride, TF padding), max/avg pooling (TF: avg counts in-image cells only), LRN (TF
// convention), batch normalization and inner product, forward and backward. They take the same descriptors
// as the Backend ops and are the oracle the oneDNN (and CUDA) implementations are tested against.
//
// Layouts as in the Backend: activations NHWC, conv weights (KH, KW, C/groups, O), FC weights (in, out).
// An empty vector stands for an absent optional operand (bias, gamma); a null output pointer for a result
// not wanted.
#pragma once

#include <vector>

#include "terngrad/backend/op_desc.h"

namespace tg::ref {

using Vec = std::vector<double>;

// x (N,H,W,C), w (KH,KW,C/g,O), b (O) or empty -> y (N,OH,OW,O)
Vec conv2d_forward(const ConvDesc& d, const Vec& x, const Vec& w, const Vec& b);
void conv2d_backward(const ConvDesc& d, const Vec& x, const Vec& w, const Vec& dy, Vec* dx, Vec* dw, Vec* db);

// x (N,H,W,C) -> y (N,OH,OW,C). Max backward routes each gradient to the first maximum of its window in
// row-major window order (callers avoid ties).
Vec pool_forward(const PoolDesc& d, const Vec& x);
Vec pool_backward(const PoolDesc& d, const Vec& x, const Vec& dy);

// TF LRN: y = x / (bias + alpha * sum_{|c'-c|<=r} x_{c'}^2)^beta
Vec lrn_forward(const LrnDesc& d, const Vec& x);
Vec lrn_backward(const LrnDesc& d, const Vec& x, const Vec& dy);

// x (rows, C); statistics per channel; population variance; gamma empty = 1.
Vec batch_norm_forward_training(const BatchNormDesc& d, const Vec& x, const Vec& gamma, const Vec& beta, Vec* mean,
                                Vec* var);
Vec batch_norm_forward_inference(const BatchNormDesc& d, const Vec& x, const Vec& gamma, const Vec& beta,
                                 const Vec& mean, const Vec& var);
// Gradient of the training forward (batch statistics depend on x).
void batch_norm_backward(const BatchNormDesc& d, const Vec& x, const Vec& gamma, const Vec& mean, const Vec& var,
                         const Vec& dy, Vec* dx, Vec* dgamma, Vec* dbeta);

// x (N,in), w (in,out), b (out) or empty -> y (N,out)
Vec inner_product_forward(const InnerProductDesc& d, const Vec& x, const Vec& w, const Vec& b);
void inner_product_backward(const InnerProductDesc& d, const Vec& x, const Vec& w, const Vec& dy, Vec* dx, Vec* dw,
                            Vec* db);

// Row-major matrices: c (m, n) = op(a) * op(b) + beta * c (c empty: beta ignored), a (ra, ca), b (rb, cb).
Vec matmul(const Vec& a, int64_t ra, int64_t ca, bool transpose_a, const Vec& b, int64_t rb, int64_t cb,
           bool transpose_b, double beta, const Vec& c);
// The columns of m (rows, cols) by Gram-Schmidt in column order: column i / (norm + epsilon) (a zero column stays
// zero), then its projection removed from the later columns.
Vec orthogonalize_columns(const Vec& m, int64_t rows, int64_t cols, double epsilon);

}  // namespace tg::ref

// The list of the Backend's implementation hooks (*_impl), one X(return type, name, (parameters)) per op, so
// the interface (include/terngrad/backend/backend.h) and every backend declare the same signatures from one
// place instead of mirrored 50-line lists:
//   #define TG_DECLARE_IMPL(ret, name, params) ret name params override;
//   TG_BACKEND_IMPLS(TG_DECLARE_IMPL)
//   #undef TG_DECLARE_IMPL
// The operations' contracts are documented on the public operations in backend.h.
#pragma once

#define TG_BACKEND_IMPLS(X)                                                                                           \
  X(void, copy_impl, (const Tensor& dst, const Tensor& src))                                                          \
  X(void, cast_impl, (const Tensor& dst, const Tensor& src))                                                          \
  X(void, unscale_and_check_impl, (const Tensor& src, float scale, const Tensor& dst, const Tensor& found))           \
  X(void, zero_impl, (const Tensor& dst))                                                                             \
  X(void, fill_impl, (const Tensor& dst, float value))                                                                \
  X(void, add_impl, (const Tensor& a, const Tensor& b, const Tensor& out))                                            \
  X(void, axpy_impl, (float alpha, const Tensor& x, const Tensor& y))                                                 \
  X(void, scale_impl, (float alpha, const Tensor& x))                                                                 \
  X(void, relu_forward_impl, (const Tensor& x, const Tensor& y))                                                      \
  X(void, relu_backward_impl, (const Tensor& y, const Tensor& dy, const Tensor& dx))                                  \
  X(void, dropout_forward_impl,                                                                                       \
    (const Tensor& x, const Tensor& y, const Tensor& mask, float keep_prob, PhiloxKey key, uint32_t step,             \
     uint32_t salt))                                                                                                  \
  X(void, dropout_backward_impl, (const Tensor& dy, const Tensor& mask, float keep_prob, const Tensor& dx))           \
  X(void, concat_channels_impl, (const std::vector<Tensor>& parts, const Tensor& out))                                \
  X(void, split_channels_impl, (const Tensor& dout, const std::vector<Tensor>& dparts))                               \
  X(double, sum_impl, (const Tensor& x))                                                                              \
  X(double, sum_squares_impl, (const Tensor& x))                                                                      \
  X(float, max_abs_impl, (const Tensor& x))                                                                           \
  X(void, reduce_into_impl, (Reduction r, const Tensor* xs, const float* weights, int count, const Tensor& out))      \
  X(void, softmax_xent_forward_impl,                                                                                  \
    (const Tensor& logits, const Tensor& labels, float label_smoothing, const Tensor& probs, const Tensor& losses))   \
  X(void, softmax_xent_backward_impl,                                                                                 \
    (const Tensor& probs, const Tensor& labels, float label_smoothing, float scale, const Tensor& dlogits))           \
  X(void, conv2d_forward_impl,                                                                                        \
    (const ConvDesc& d, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y))                          \
  X(void, conv2d_backward_impl,                                                                                       \
    (const ConvDesc& d, const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dx, const Tensor& dw,       \
     const Tensor& db))                                                                                               \
  X(size_t, pool_workspace_bytes_impl, (const PoolDesc& d))                                                           \
  X(void, pool_forward_impl, (const PoolDesc& d, const Tensor& x, const Tensor& y, const Tensor& workspace))          \
  X(void, pool_backward_impl,                                                                                         \
    (const PoolDesc& d, const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& workspace,                  \
     const Tensor& dx))                                                                                               \
  X(size_t, lrn_workspace_bytes_impl, (const LrnDesc& d))                                                             \
  X(void, lrn_forward_impl, (const LrnDesc& d, const Tensor& x, const Tensor& y, const Tensor& workspace))            \
  X(void, lrn_backward_impl,                                                                                          \
    (const LrnDesc& d, const Tensor& x, const Tensor& dy, const Tensor& workspace, const Tensor& dx))                 \
  X(void, batch_norm_forward_training_impl,                                                                           \
    (const BatchNormDesc& d, const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,               \
     const Tensor& mean, const Tensor& var, const BatchNormMoving& moving))                                           \
  X(void, batch_norm_forward_inference_impl,                                                                          \
    (const BatchNormDesc& d, const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& mean,            \
     const Tensor& var, const Tensor& y))                                                                             \
  X(void, batch_norm_backward_impl,                                                                                   \
    (const BatchNormDesc& d, const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& var,             \
     const Tensor& dy, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta, const Tensor& beta))              \
  X(void, inner_product_forward_impl,                                                                                 \
    (const InnerProductDesc& d, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y))                  \
  X(void, inner_product_backward_impl,                                                                                \
    (const InnerProductDesc& d, const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dx,                 \
     const Tensor& dw, const Tensor& db))                                                                             \
  X(void, optimizer_update_impl,                                                                                      \
    (const OptimizerStep& step, const Tensor& w, const Tensor& g, const Tensor& s1, const Tensor& s2,                 \
     const Tensor& ema))                                                                                              \
  X(void, optimizer_update_coded_impl,                                                                                \
    (const OptimizerStep& step, const Tensor& w, const CodedAverage& g, const Tensor& s1, const Tensor& s2,           \
     const Tensor& ema))                                                                                              \
  X(void, ema_update_impl, (float decay, const Tensor& w, const Tensor& ema))                                         \
  X(void, ternary_scaler_impl,                                                                                        \
    (const Tensor& g, float clip_factor, const Tensor& scaler, const Tensor& residual, const Tensor& decayed,         \
     float decay, int64_t bucket))                                                                                    \
  X(void, ternary_encode_impl,                                                                                        \
    (const Tensor& g, const Tensor& scaler, PhiloxKey key, uint32_t step, uint32_t tensor, const Tensor& packed,      \
     const Tensor& zero_count, int64_t bucket))                                                                       \
  X(void, ternary_encode_many_impl, (const TernaryEncodeItem* items, int count, PhiloxKey key, uint32_t step))        \
  X(void, ternary_sum_codes_impl, (const Tensor& packed, int64_t stride, int num_workers, const Tensor& code_sums))   \
  X(void, max_scalers_impl, (const Tensor* xs, int count, const Tensor& out))                                         \
  X(void, ternary_decode_sums_impl,                                                                                   \
    (const Tensor& code_sums, const Tensor& scaler, int num_workers, const Tensor& g, int64_t bucket))                \
  X(void, ternary_decode_gathered_impl,                                                                               \
    (const Tensor& gathered, int64_t stride, int num_workers, const Tensor& scaler, const Tensor& g, int64_t bucket)) \
  X(void, encode_f16_sum_impl, (const Tensor* xs, int count, const Tensor& out))                                      \
  X(void, encode_f32_sum_impl, (const Tensor* xs, int count, const Tensor& out))                                      \
  X(void, average_f16_impl, (const Tensor* xs, int count, const Tensor& out))                                         \
  X(void, average_f32_impl, (const Tensor* xs, int count, const Tensor& out))                                         \
  X(void, decode_f16_sum_impl, (const Tensor& sum, int num_workers, const Tensor& g))                                 \
  X(void, decode_f32_sum_impl, (const Tensor& sum, int num_workers, const Tensor& g))                                 \
  X(void, matmul_impl,                                                                                                \
    (const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, float beta, const Tensor& c))              \
  X(void, orthogonalize_columns_impl, (const Tensor& m, float epsilon))

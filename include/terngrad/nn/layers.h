// Factories of the layers a model builder composes. Parameter names follow the reference's scopes:
// "<layer>/weights", "<layer>/biases", "<layer>/beta", "<layer>/gamma"; BN state "<layer>/moving_mean",
// "<layer>/moving_variance". Every layer is NHWC.
#pragma once

#include <string>

#include "terngrad/nn/layer.h"

namespace tg {

struct ConvOptions {
  int64_t out_channels = 0;
  int64_t kernel_h = 1, kernel_w = 1;
  int64_t stride = 1;
  Padding padding = Padding::kSame;
  int64_t groups = 1;
  Initializer weight_init = Initializer::truncated_normal(0.1f, 0);
  float weight_decay = 0.f;
  bool bias = true;
  float bias_init = 0.f;
};
// x (N,H,W,C) -> y (N,OH,OW,out_channels); weights (KH,KW,C/groups,out_channels), biases (out_channels)
LayerPtr conv2d(const std::string& name, const ConvOptions& o);

// x (N,H,W,C) -> y (N,OH,OW,C); TF padding arithmetic; AVG counts only in-image elements.
LayerPtr max_pool(const std::string& name, int64_t kernel, int64_t stride, Padding padding);
LayerPtr avg_pool(const std::string& name, int64_t kernel, int64_t stride, Padding padding);

// TF LRN across channels (alpha not divided by the window).
LayerPtr lrn(const std::string& name, int64_t depth_radius, float bias, float alpha, float beta);

struct BatchNormOptions {  // the defaults: the reference's ops.batch_norm (AlexNet, Inception-v3)
  float epsilon = 0.001f;
  float decay = 0.9997f;  // moving averages: moving = decay * moving + (1 - decay) * batch
  bool gamma = false;     // beta-only as the reference's ops.batch_norm; true for ResNet/Inception
  float gamma_init = 1.f;
};
// x (N,H,W,C) or (N,C) -> same shape. Training: batch statistics, moving statistics updated;
// inference: moving statistics.
LayerPtr batch_norm(const std::string& name, const BatchNormOptions& o);

LayerPtr relu(const std::string& name);

struct FcOptions {
  int64_t out = 0;
  Initializer weight_init = Initializer::truncated_normal(0.1f, 0);
  float weight_decay = 0.f;
  bool bias = true;
  float bias_init = 0.f;
};
// x (N,in) -> y (N,out); weights (in,out), biases (out)
LayerPtr fully_connected(const std::string& name, const FcOptions& o);

// Inverted dropout in training (scale 1/keep_prob), identity in inference.
LayerPtr dropout(const std::string& name, float keep_prob);

// Channel concat of NHWC inputs with equal N, H, W.
LayerPtr concat(const std::string& name);
// Element-wise sum of inputs of equal shape.
LayerPtr add(const std::string& name);
// (N, H, W, C) -> (N, H*W*C), row-major NHWC order as TF's flatten.
LayerPtr flatten(const std::string& name);

// inputs: logits (N,K), labels (N) i32 -> output: loss (1) = mean over N of the cross-entropy with
// label smoothing ls (target = (1-ls)*onehot + ls/K). Saves the softmax for backward.
LayerPtr softmax_cross_entropy(const std::string& name, float label_smoothing = 0.f);

}  // namespace tg

// Inception-v3 (Szegedy et al. 2016) with the auxiliary head: the layer structure of TF-slim's inception_v3
// and torchvision's Inception3 (same layers, same parameter counts), with TF-slim's names.
//
// Every convolution is a "BasicConv2d": conv without bias -> batch norm with gamma and beta (eps 0.001,
// moving-average decay 0.9997 as the reference's BATCHNORM_MOVING_AVERAGE_DECAY) -> ReLU. Conv weights are
// truncated normal 0.1 (the reference's arg_scope), except the aux head's 5x5 conv (0.01); both fc layers are
// truncated normal 0.001 (the reference's inception_model.py). Weight decay config.weight_decay on every conv
// and fc weight. Pooling inside the mixed blocks is 3x3/1 SAME average pooling counting only in-image cells
// (TF); torchvision counts the padding (no parameter depends on it).
//
// Output sizes for a 299x299x3 input (K classes; parameters = conv weights + BN gamma/beta):
//
//   Conv2d_1a_3x3   3x3/2 VALID, 32      (N, 149, 149, 32)       864 + 64
//   Conv2d_2a_3x3   3x3 VALID, 32        (N, 147, 147, 32)     9,216 + 64
//   Conv2d_2b_3x3   3x3 SAME, 64         (N, 147, 147, 64)    18,432 + 128
//   MaxPool_3a_3x3  3x3/2 VALID          (N, 73, 73, 64)
//   Conv2d_3b_1x1   1x1, 80              (N, 73, 73, 80)       5,120 + 160
//   Conv2d_4a_3x3   3x3 VALID, 192       (N, 71, 71, 192)    138,240 + 384
//   MaxPool_5a_3x3  3x3/2 VALID          (N, 35, 35, 192)
//   Mixed_5b        A: 64 | 48>64(5x5) | 64>96>96 | avg>32   (N, 35, 35, 256)     255,904
//   Mixed_5c        A, pool branch 64                        (N, 35, 35, 288)     277,472
//   Mixed_5d        A, pool branch 64                        (N, 35, 35, 288)     285,152
//   Mixed_6a        B: 384(3x3/2) | 64>96>96(/2) | max/2     (N, 17, 17, 768)   1,153,280
//   Mixed_6b        C, c7 = 128: 192 | c7>c7(1x7)>192(7x1) | c7>c7(7x1)>c7(1x7)>c7(7x1)>192(1x7) | avg>192
//                                                            (N, 17, 17, 768)   1,297,408
//   Mixed_6c, 6d    C, c7 = 160                              (N, 17, 17, 768)   1,691,008 each
//   Mixed_6e        C, c7 = 192                              (N, 17, 17, 768)   2,141,952
//   AuxLogits       avg 5x5/3 VALID (N, 5, 5, 768) > 1x1 128 > 5x5 VALID 768 (N, 1, 1, 768) > fc K
//                                                                       2,557,696 + 769*K
//   Mixed_7a        D: 192>320(3x3/2) | 192>192(1x7)>192(7x1)>192(3x3/2) | max/2  (N, 8, 8, 1280)  1,698,304
//   Mixed_7b        E: 320 | 384>[384(1x3), 384(3x1)] | 448>384(3x3)>[384(1x3), 384(3x1)] | avg>192
//                                                            (N, 8, 8, 2048)    5,044,608
//   Mixed_7c        E                                        (N, 8, 8, 2048)    6,076,800
//   Logits/AvgPool_1a  avg 8x8 VALID (global)                (N, 1, 1, 2048)
//   Logits/Dropout_1b  keep config.dropout_keep_prob; flatten (N, 2048)
//   logits          fc K                                     (N, K)             2049*K
// Total without the aux head: 21,785,568 + 2049*K = 23,834,568 (K = 1000), 23,836,617 (K = 1001);
// with it: + 2,557,696 + 769*K = 27,161,264 (K = 1000), 27,164,082 (K = 1001) (torchvision's counts).
//
// Small inputs (the minimum is 75: the last stride-2 VALID reduction needs a 3x3 map): the aux head's
// average pool shrinks its window to the map (as TF-slim's _reduced_kernel_size_for_small_input), its 5x5
// conv switches to SAME padding when the pooled map is smaller than 5x5 (same parameters at every size),
// and a global average pool follows when its output is larger than 1x1 (torchvision's adaptive pool).
//
// Loss: softmax cross-entropy with config.label_smoothing on the logits, plus 0.4 x the same loss on the
// aux logits (net.add_aux_loss). The aux head's parameters come before Mixed_7a's, so the main logits are
// the last two parameter tensors (what --quantize_logits refers to).
#include <fmt/format.h>

#include <algorithm>

#include "terngrad/models/registry.h"
#include "terngrad/nn/layers.h"

namespace tg {
namespace {

constexpr float kConvStddev = 0.1f;
constexpr float kAuxLossWeight = 0.4f;

int64_t out_size(int64_t size, int64_t kernel, int64_t stride, Padding padding) {
  // SAME and SYMMETRIC give ceil(size / stride) for the odd kernels used here; VALID may go negative for a too
  // small image, which the registry's minimum size check reports first.
  return padding == Padding::kValid ? (size - kernel) / stride + 1 : (size + stride - 1) / stride;
}

class InceptionBuilder {
 public:
  InceptionBuilder(Net& net, const ModelConfig& c) : net_(net), c_(c) {}

  // BasicConv2d: conv (no bias) -> BN (gamma, beta) -> ReLU; returns the ReLU's output name.
  std::string conv(const std::string& name, const std::string& input, int64_t out_channels, int64_t kh, int64_t kw,
                   int64_t stride = 1, Padding padding = Padding::kSame, float stddev = kConvStddev) {
    ConvOptions o;
    o.out_channels = out_channels;
    o.kernel_h = kh;
    o.kernel_w = kw;
    o.stride = stride;
    o.padding = padding == Padding::kSame ? c_.same() : padding;  // SAME: the network's padding style
    o.weight_init = Initializer::truncated_normal(stddev, 0);
    o.weight_decay = c_.weight_decay;
    BatchNormOptions bn;  // the reference's epsilon and moving-average decay (the defaults), with gamma
    bn.gamma = true;
    return add_conv_bn(net_, name, input, o, bn);
  }
  std::string avg3x3(const std::string& name, const std::string& input) {
    return net_.add(avg_pool(name, 3, 1, c_.same()), {input});
  }
  std::string max3x3s2(const std::string& name, const std::string& input) {
    return net_.add(max_pool(name, 3, 2, Padding::kValid), {input});
  }
  std::string concat_of(const std::string& name, const std::vector<std::string>& branches) {
    return net_.add(concat(name), branches);
  }

  // 35x35 block (torchvision InceptionA).
  std::string block_a(const std::string& s, const std::string& x, int64_t pool_features) {
    std::string b0 = conv(s + "/Branch_0/Conv2d_0a_1x1", x, 64, 1, 1);
    std::string b1 = conv(s + "/Branch_1/Conv2d_0a_1x1", x, 48, 1, 1);
    b1 = conv(s + "/Branch_1/Conv2d_0b_5x5", b1, 64, 5, 5);
    std::string b2 = conv(s + "/Branch_2/Conv2d_0a_1x1", x, 64, 1, 1);
    b2 = conv(s + "/Branch_2/Conv2d_0b_3x3", b2, 96, 3, 3);
    b2 = conv(s + "/Branch_2/Conv2d_0c_3x3", b2, 96, 3, 3);
    std::string b3 = avg3x3(s + "/Branch_3/AvgPool_0a_3x3", x);
    b3 = conv(s + "/Branch_3/Conv2d_0b_1x1", b3, pool_features, 1, 1);
    return concat_of(s, {b0, b1, b2, b3});
  }
  // 35 -> 17 reduction (InceptionB).
  std::string block_b(const std::string& s, const std::string& x) {
    std::string b0 = conv(s + "/Branch_0/Conv2d_1a_3x3", x, 384, 3, 3, 2, Padding::kValid);
    std::string b1 = conv(s + "/Branch_1/Conv2d_0a_1x1", x, 64, 1, 1);
    b1 = conv(s + "/Branch_1/Conv2d_0b_3x3", b1, 96, 3, 3);
    b1 = conv(s + "/Branch_1/Conv2d_1a_3x3", b1, 96, 3, 3, 2, Padding::kValid);
    std::string b2 = max3x3s2(s + "/Branch_2/MaxPool_1a_3x3", x);
    spatial_ = out_size(spatial_, 3, 2, Padding::kValid);
    return concat_of(s, {b0, b1, b2});
  }
  // 17x17 block with factorized 7x7 convolutions (InceptionC).
  std::string block_c(const std::string& s, const std::string& x, int64_t c7) {
    std::string b0 = conv(s + "/Branch_0/Conv2d_0a_1x1", x, 192, 1, 1);
    std::string b1 = conv(s + "/Branch_1/Conv2d_0a_1x1", x, c7, 1, 1);
    b1 = conv(s + "/Branch_1/Conv2d_0b_1x7", b1, c7, 1, 7);
    b1 = conv(s + "/Branch_1/Conv2d_0c_7x1", b1, 192, 7, 1);
    std::string b2 = conv(s + "/Branch_2/Conv2d_0a_1x1", x, c7, 1, 1);
    b2 = conv(s + "/Branch_2/Conv2d_0b_7x1", b2, c7, 7, 1);
    b2 = conv(s + "/Branch_2/Conv2d_0c_1x7", b2, c7, 1, 7);
    b2 = conv(s + "/Branch_2/Conv2d_0d_7x1", b2, c7, 7, 1);
    b2 = conv(s + "/Branch_2/Conv2d_0e_1x7", b2, 192, 1, 7);
    std::string b3 = avg3x3(s + "/Branch_3/AvgPool_0a_3x3", x);
    b3 = conv(s + "/Branch_3/Conv2d_0b_1x1", b3, 192, 1, 1);
    return concat_of(s, {b0, b1, b2, b3});
  }
  // 17 -> 8 reduction (InceptionD).
  std::string block_d(const std::string& s, const std::string& x) {
    std::string b0 = conv(s + "/Branch_0/Conv2d_0a_1x1", x, 192, 1, 1);
    b0 = conv(s + "/Branch_0/Conv2d_1a_3x3", b0, 320, 3, 3, 2, Padding::kValid);
    std::string b1 = conv(s + "/Branch_1/Conv2d_0a_1x1", x, 192, 1, 1);
    b1 = conv(s + "/Branch_1/Conv2d_0b_1x7", b1, 192, 1, 7);
    b1 = conv(s + "/Branch_1/Conv2d_0c_7x1", b1, 192, 7, 1);
    b1 = conv(s + "/Branch_1/Conv2d_1a_3x3", b1, 192, 3, 3, 2, Padding::kValid);
    std::string b2 = max3x3s2(s + "/Branch_2/MaxPool_1a_3x3", x);
    spatial_ = out_size(spatial_, 3, 2, Padding::kValid);
    return concat_of(s, {b0, b1, b2});
  }
  // 8x8 block with expanded filter banks (InceptionE); the split 1x3 / 3x1 outputs are concatenated in
  // torchvision's order.
  std::string block_e(const std::string& s, const std::string& x) {
    std::string b0 = conv(s + "/Branch_0/Conv2d_0a_1x1", x, 320, 1, 1);
    std::string b1 = conv(s + "/Branch_1/Conv2d_0a_1x1", x, 384, 1, 1);
    std::string b1a = conv(s + "/Branch_1/Conv2d_0b_1x3", b1, 384, 1, 3);
    std::string b1b = conv(s + "/Branch_1/Conv2d_0b_3x1", b1, 384, 3, 1);
    std::string b2 = conv(s + "/Branch_2/Conv2d_0a_1x1", x, 448, 1, 1);
    b2 = conv(s + "/Branch_2/Conv2d_0b_3x3", b2, 384, 3, 3);
    std::string b2a = conv(s + "/Branch_2/Conv2d_0c_1x3", b2, 384, 1, 3);
    std::string b2b = conv(s + "/Branch_2/Conv2d_0d_3x1", b2, 384, 3, 1);
    std::string b3 = avg3x3(s + "/Branch_3/AvgPool_0a_3x3", x);
    b3 = conv(s + "/Branch_3/Conv2d_0b_1x1", b3, 192, 1, 1);
    return concat_of(s, {b0, b1a, b1b, b2a, b2b, b3});
  }

  // Auxiliary classifier on Mixed_6e (N, S, S, 768); adds its loss with weight 0.4.
  void aux_head(const std::string& x) {
    const int64_t pool_kernel = std::min<int64_t>(5, spatial_);
    net_.add(avg_pool("AuxLogits/AvgPool_1a_5x5", pool_kernel, 3, Padding::kValid), {x});
    int64_t s = out_size(spatial_, pool_kernel, 3, Padding::kValid);
    std::string y = conv("AuxLogits/Conv2d_1b_1x1", "AuxLogits/AvgPool_1a_5x5", 128, 1, 1);
    const Padding pad5 = s >= 5 ? Padding::kValid : c_.same();
    y = conv("AuxLogits/Conv2d_2a_5x5", y, 768, 5, 5, 1, pad5, 0.01f);
    s = out_size(s, 5, 1, pad5);
    if (s > 1) y = net_.add(avg_pool("AuxLogits/AvgPool_2b", s, 1, Padding::kValid), {y});
    net_.add(flatten("AuxLogits/flatten"), {y});  // (N, 768)
    FcOptions fc;
    fc.out = c_.num_classes;
    fc.weight_init = Initializer::truncated_normal(0.001f, 0);
    fc.weight_decay = c_.weight_decay;
    const std::string& aux_logits = net_.add(fully_connected("AuxLogits/logits", fc));
    net_.add_aux_loss(net_.add(softmax_cross_entropy("AuxLogits/loss", c_.label_smoothing), {aux_logits, "labels"}),
                      kAuxLossWeight);
  }

  void build() {
    net_.set_input_shape(c_.image_size, c_.image_size, c_.channels);
    spatial_ = c_.image_size;
    std::string x = conv("Conv2d_1a_3x3", "images", 32, 3, 3, 2, Padding::kValid);
    x = conv("Conv2d_2a_3x3", x, 32, 3, 3, 1, Padding::kValid);
    x = conv("Conv2d_2b_3x3", x, 64, 3, 3);
    x = max3x3s2("MaxPool_3a_3x3", x);
    x = conv("Conv2d_3b_1x1", x, 80, 1, 1);
    x = conv("Conv2d_4a_3x3", x, 192, 3, 3, 1, Padding::kValid);
    x = max3x3s2("MaxPool_5a_3x3", x);
    spatial_ = out_size(spatial_, 3, 2, Padding::kValid);  // Conv2d_1a_3x3
    spatial_ = out_size(spatial_, 3, 1, Padding::kValid);  // Conv2d_2a_3x3
    spatial_ = out_size(spatial_, 3, 2, Padding::kValid);  // MaxPool_3a_3x3
    spatial_ = out_size(spatial_, 3, 1, Padding::kValid);  // Conv2d_4a_3x3
    spatial_ = out_size(spatial_, 3, 2, Padding::kValid);  // MaxPool_5a_3x3

    x = block_a("Mixed_5b", x, 32);
    x = block_a("Mixed_5c", x, 64);
    x = block_a("Mixed_5d", x, 64);
    x = block_b("Mixed_6a", x);
    x = block_c("Mixed_6b", x, 128);
    x = block_c("Mixed_6c", x, 160);
    x = block_c("Mixed_6d", x, 160);
    x = block_c("Mixed_6e", x, 192);
    if (c_.aux_logits) aux_head(x);
    x = block_d("Mixed_7a", x);
    x = block_e("Mixed_7b", x);
    x = block_e("Mixed_7c", x);

    net_.add(avg_pool("Logits/AvgPool_1a", spatial_, 1, Padding::kValid), {x});  // (N, 1, 1, 2048)
    net_.add(dropout("Logits/Dropout_1b", c_.dropout_keep_prob));
    net_.add(flatten("Logits/flatten"));  // (N, 2048)
    FcOptions fc;
    fc.out = c_.num_classes;
    fc.weight_init = Initializer::truncated_normal(0.001f, 0);
    fc.weight_decay = c_.weight_decay;
    add_logits_and_loss(net_, fc, c_.label_smoothing);
  }

 private:
  Net& net_;
  const ModelConfig& c_;
  int64_t spatial_ = 0;  // height (= width) of the main path's current feature map
};

}  // namespace

void build_inception_v3(Net& net, const ModelConfig& c) { InceptionBuilder(net, c).build(); }

}  // namespace tg

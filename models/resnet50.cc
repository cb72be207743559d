// ResNet-50 v1.5 (He et al. 2016, with the stride of each downsampling bottleneck on its 3x3 convolution, as
// torchvision's resnet50 and the TF official model). Convolutions have no bias and are followed by batch norm
// with gamma and beta (eps 1e-5, moving-average decay 0.9 = torchvision's momentum 0.1); He init for the
// convolutions; weight decay (config.weight_decay) on every conv and fc weight, none on BN parameters and
// biases. With config.zero_init_last_bn_gamma the gamma of the last BN of every bottleneck starts at 0, so
// each residual block starts as the identity (Goyal et al. 2017).
//
// Padding is TF SAME throughout; for every size it gives the same output sizes as torchvision's explicit
// padding (ceil(H / stride)). The smallest --image_size is 32, the network's total stride: the last stage is
// then 1x1 (smaller inputs would still compute, on maps made mostly of padding; Keras' ResNet50 has the same
// minimum). Output sizes below are for a 224x224x3 input.
//
//   layer    operation                                        output               parameters
//   conv1    7x7/2, 64                                        (N, 112, 112, 64)         9,408 + BN 128
//   pool1    max 3x3/2 SAME                                   (N, 56, 56, 64)
//   block1   3 x [1x1 64, 3x3 64, 1x1 256]                    (N, 56, 56, 256)        212,992 + BN 2,816
//   block2   4 x [1x1 128, 3x3 128 (/2 in unit_1), 1x1 512]   (N, 28, 28, 512)      1,212,416 + BN 7,168
//   block3   6 x [1x1 256, 3x3 256 (/2 in unit_1), 1x1 1024]  (N, 14, 14, 1024)     7,077,888 + BN 20,480
//   block4   3 x [1x1 512, 3x3 512 (/2 in unit_1), 1x1 2048]  (N, 7, 7, 2048)      14,942,208 + BN 22,528
//   pool5    avg 7x7 VALID (global)                           (N, 1, 1, 2048)
//   flatten                                                   (N, 2048)
//   logits   fc K, truncated normal 0.01                      (N, K)               2048*K + K
// (each block's unit_1 has a projection shortcut: 1x1 conv, stride of the block, + BN)
// Total: 23,508,032 + 2049*K = 25,557,032 for K = 1000, 25,559,081 for K = 1001 (torchvision's counts).
//
// Names: "conv1", "conv1/BatchNorm", "block2/unit_1/conv2", "block2/unit_1/shortcut/BatchNorm", ...;
// parameters "block2/unit_1/conv2/weights", "block2/unit_1/conv2/BatchNorm/gamma", "logits/weights".
#include <fmt/format.h>

#include "terngrad/models/registry.h"
#include "terngrad/nn/layers.h"

namespace tg {
namespace {

constexpr float kBnEpsilon = 1e-5f;
constexpr float kBnDecay = 0.9f;

// SAME padding: output size ceil(size / stride).
int64_t same_out(int64_t size, int64_t stride) { return (size + stride - 1) / stride; }

class ResNetBuilder {
 public:
  ResNetBuilder(Net& net, const ModelConfig& c) : net_(net), c_(c) {}

  // conv (no bias, He init) -> BN [-> ReLU]; returns the name of the last tensor.
  std::string conv_bn(const std::string& name, const std::string& input, int64_t out_channels, int64_t kernel,
                      int64_t stride, bool relu_after, float gamma_init = 1.f) {
    ConvOptions conv;
    conv.out_channels = out_channels;
    conv.kernel_h = conv.kernel_w = kernel;
    conv.stride = stride;
    conv.padding = c_.same();
    conv.weight_init = Initializer::he(0);
    conv.weight_decay = c_.weight_decay;
    BatchNormOptions bn;
    bn.epsilon = kBnEpsilon;
    bn.decay = kBnDecay;
    bn.gamma = true;
    bn.gamma_init = gamma_init;
    return add_conv_bn(net_, name, input, conv, bn, relu_after);
  }

  // Bottleneck v1.5: 1x1 width -> 3x3 width (stride) -> 1x1 4*width, plus the shortcut; ReLU after the sum.
  std::string bottleneck(const std::string& scope, const std::string& input, int64_t in_channels, int64_t width,
                         int64_t stride) {
    const int64_t out_channels = 4 * width;
    const float last_gamma = c_.zero_init_last_bn_gamma ? 0.f : 1.f;
    std::string y = conv_bn(scope + "/conv1", input, width, 1, 1, true);
    y = conv_bn(scope + "/conv2", y, width, 3, stride, true);
    y = conv_bn(scope + "/conv3", y, out_channels, 1, 1, false, last_gamma);
    std::string shortcut = input;
    if (stride != 1 || in_channels != out_channels)
      shortcut = conv_bn(scope + "/shortcut", input, out_channels, 1, stride, false);
    net_.add(add(scope + "/add"), {y, shortcut});
    return net_.add(relu(scope + "/relu"));
  }

  void build() {
    net_.set_input_shape(c_.image_size, c_.image_size, c_.channels);
    int64_t spatial = c_.image_size;
    std::string x = conv_bn("conv1", "images", 64, 7, 2, true);
    spatial = same_out(spatial, 2);
    x = net_.add(max_pool("pool1", 3, 2, c_.same()));
    spatial = same_out(spatial, 2);

    const int64_t units[4] = {3, 4, 6, 3};
    const int64_t widths[4] = {64, 128, 256, 512};
    int64_t channels = 64;
    for (int b = 0; b < 4; ++b) {
      for (int64_t u = 0; u < units[b]; ++u) {
        const int64_t stride = (b > 0 && u == 0) ? 2 : 1;
        x = bottleneck(fmt::format("block{}/unit_{}", b + 1, u + 1), x, channels, widths[b], stride);
        channels = 4 * widths[b];
        spatial = same_out(spatial, stride);
      }
    }
    net_.add(avg_pool("pool5", spatial, 1, Padding::kValid));  // global average: (N, 1, 1, 2048)
    net_.add(flatten("flatten"));                              // (N, 2048)
    FcOptions fc;
    fc.out = c_.num_classes;
    fc.weight_init = Initializer::truncated_normal(0.01f, 0);
    fc.weight_decay = c_.weight_decay;
    add_logits_and_loss(net_, fc, c_.label_smoothing);
  }

 private:
  Net& net_;
  const ModelConfig& c_;
};

}  // namespace

void build_resnet50(Net& net, const ModelConfig& c) { ResNetBuilder(net, c).build(); }

}  // namespace tg

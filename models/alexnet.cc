// AlexNet as the reference defines it (terngrad/inception/slim/models.py alexnet, reference section 3.4):
// the two-branch ("two-GPU") AlexNet with batch norm on every convolution. Each convolution is followed by
// BN (beta only, no gamma; decay 0.9997, eps 0.001) and ReLU and has no bias; convolutions are stride 1 SAME
// except conv1 (stride 4 SAME); max pools are 3x3/2 VALID; LRN: depth radius 2, bias 2, alpha 1e-4
// (TF convention), beta 0.75. Both conv1 branches and both conv3 branches read the full input / the full
// concat; conv2, conv4, conv5 stay on their branch. Dropout(keep_prob) after fc6 and fc7 (training only).
// Weight decay on every conv and fc weight, logits included. Seeds are the reference's seed+1..seed+13.
//
//   layer (per branch b = 1, 2)      init                out at 224          parameters (both branches)
//   conv1_b 11x11x3->48 /4 SAME BN   tn(0.01, +1/+2)     (N, 56, 56, 48)     2*(17424 + 48)
//   lrn1_b, pool1_b 3x3/2 VALID                          (N, 27, 27, 48)
//   conv2_b 5x5x48->128 BN           tn(0.01, +3/+4)     (N, 27, 27, 128)    2*(153600 + 128)
//   lrn2_b, pool2_b; pool2 = concat                      (N, 13, 13, 256)
//   conv3_b 3x3x256->192 BN          tn(0.01, +5/+6)     (N, 13, 13, 192)    2*(442368 + 192)
//   conv4_b 3x3x192->192 BN          tn(0.01, +7/+8)     (N, 13, 13, 192)    2*(331776 + 192)
//   conv5_b 3x3x192->128 BN          tn(0.01, +9/+10)    (N, 13, 13, 128)    2*(221184 + 128)
//   pool5_b 3x3/2 VALID; pool5 = concat, flatten         (N, 9216)
//   fc6    4096 ReLU, dropout6       tn(0.005, +11) b0.1 (N, 4096)           37748736 + 4096
//   fc7    4096 ReLU, dropout7       tn(0.005, +12) b0.1 (N, 4096)           16777216 + 4096
//   logits K linear                  tn(0.01, +13)  b0   (N, K)              4096*K + K
//   total 56,868,224 + 4097*K: 60,969,321 for K = 1001, 60,965,224 for K = 1000
//
// Smallest image: conv1 gives ceil(S/4); each VALID 3x3/2 pool maps h to floor((h-3)/2)+1 and needs h >= 3.
// pool5 needs 3 rows, so pool2 needs 7, so conv1 needs 15, so S >= 57 (registry minimum).
#include "terngrad/models/registry.h"
#include "terngrad/nn/layers.h"

namespace tg {

namespace {

// conv (no bias) -> BN (beta only) -> ReLU; returns the ReLU's output.
std::string conv_bn_relu(Net& net, const std::string& name, const std::string& input, int64_t out_channels,
                         int64_t kernel, int64_t stride, uint32_t seed_offset, const ModelConfig& c) {
  ConvOptions conv;
  conv.out_channels = out_channels;
  conv.kernel_h = conv.kernel_w = kernel;
  conv.stride = stride;
  conv.padding = c.same();
  conv.weight_decay = c.weight_decay;
  conv.weight_init = Initializer::truncated_normal(0.01f, seed_offset);
  return add_conv_bn(net, name, input, conv, BatchNormOptions{});  // the reference's ops.batch_norm: the defaults
}

LayerPtr alexnet_lrn(const std::string& name) { return lrn(name, 2, 2.f, 1e-4f, 0.75f); }

}  // namespace

void build_alexnet(Net& net, const ModelConfig& c) {
  const float wd = c.weight_decay;
  net.set_input_shape(c.image_size, c.image_size, c.channels);

  // Stage 1 and 2: two independent branches, both reading the full image.
  std::string pool2[2];
  for (int b = 0; b < 2; ++b) {
    const std::string s = std::to_string(b + 1);
    conv_bn_relu(net, "conv1_" + s, "images", 48, 11, 4, 1 + b, c);
    net.add(alexnet_lrn("lrn1_" + s));
    const std::string pool1 = net.add(max_pool("pool1_" + s, 3, 2, Padding::kValid));
    conv_bn_relu(net, "conv2_" + s, pool1, 128, 5, 1, 3 + b, c);
    net.add(alexnet_lrn("lrn2_" + s));
    pool2[b] = net.add(max_pool("pool2_" + s, 3, 2, Padding::kValid));
  }
  const std::string merged2 = net.add(concat("pool2"), {pool2[0], pool2[1]});

  // Stage 3-5: both conv3 branches read the concat; conv4 and conv5 stay on their branch.
  std::string pool5[2];
  for (int b = 0; b < 2; ++b) {
    const std::string s = std::to_string(b + 1);
    std::string x = conv_bn_relu(net, "conv3_" + s, merged2, 192, 3, 1, 5 + b, c);
    x = conv_bn_relu(net, "conv4_" + s, x, 192, 3, 1, 7 + b, c);
    conv_bn_relu(net, "conv5_" + s, x, 128, 3, 1, 9 + b, c);
    pool5[b] = net.add(max_pool("pool5_" + s, 3, 2, Padding::kValid));
  }
  net.add(concat("pool5"), {pool5[0], pool5[1]});
  net.add(flatten("flatten"));

  FcOptions fc;
  fc.weight_decay = wd;
  fc.bias_init = 0.1f;
  fc.out = 4096;
  fc.weight_init = Initializer::truncated_normal(0.005f, 11);
  net.add(fully_connected("fc6", fc));
  net.add(relu("fc6/relu"));
  net.add(dropout("dropout6", c.dropout_keep_prob));

  fc.weight_init = Initializer::truncated_normal(0.005f, 12);
  net.add(fully_connected("fc7", fc));
  net.add(relu("fc7/relu"));
  net.add(dropout("dropout7", c.dropout_keep_prob));

  fc.out = c.num_classes;
  fc.bias_init = 0.f;
  fc.weight_init = Initializer::truncated_normal(0.01f, 13);
  add_logits_and_loss(net, fc, c.label_smoothing);
}

}  // namespace tg

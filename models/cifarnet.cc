// CifarNet as the reference defines it (terngrad/inception/slim/models.py cifar10_alexnet, reference section
// 3.3): the TF CIFAR-10 tutorial net. No batch norm, no dropout (--dropout_keep_prob is ignored, as in the
// reference), weight decay only on fc3 and fc4. Note the order: conv1 -> pool1 -> lrn1 but conv2 -> lrn2 ->
// pool2. LRN: depth radius 4, bias 1, alpha 0.001/9 (TF convention, not divided by the window), beta 0.75.
// Registered as "cifarnet" and as the reference's name "cifar10_alexnet".
//
//   conv1  5x5x64 SAME ReLU   tn(0.05, seed+1)  bias 0.0   (N, 24, 24, 64)   4800 + 64
//   pool1  max 3x3/2 SAME                                  (N, 12, 12, 64)
//   lrn1   r 4, bias 1, alpha 0.001/9, beta 0.75           (N, 12, 12, 64)
//   conv2  5x5x64 SAME ReLU   tn(0.05, seed+2)  bias 0.1   (N, 12, 12, 64)   102400 + 64
//   lrn2   as lrn1                                         (N, 12, 12, 64)
//   pool2  max 3x3/2 SAME                                  (N, 6, 6, 64)
//   flatten                                                (N, 2304)
//   fc3    384 ReLU           tn(0.04, seed+3)  bias 0.1   (N, 384)          884736 + 384   wd
//   fc4    192 ReLU           tn(0.04, seed+4)  bias 0.1   (N, 192)          73728 + 192    wd
//   logits 10 linear          tn(1/192, seed+5) bias 0.0   (N, 10)           1920 + 10      total 1,068,298
//
// Every layer pads SAME, so any image size >= 1 gives a valid net (the spatial size after pool2 is
// ceil(ceil(S/2)/2)); fc3's input grows with S.
#include "terngrad/models/registry.h"
#include "terngrad/nn/layers.h"

namespace tg {

void build_cifarnet(Net& net, const ModelConfig& c) {
  const float lrn_alpha = 0.001f / 9.f;
  net.set_input_shape(c.image_size, c.image_size, c.channels);

  ConvOptions conv;
  conv.kernel_h = conv.kernel_w = 5;
  conv.padding = c.same();
  conv.out_channels = 64;
  conv.weight_decay = 0.f;

  conv.weight_init = Initializer::truncated_normal(0.05f, 1);
  conv.bias_init = 0.f;
  net.add(conv2d("conv1", conv), {"images"});
  net.add(relu("conv1/relu"));
  net.add(max_pool("pool1", 3, 2, c.same()));
  net.add(lrn("lrn1", 4, 1.f, lrn_alpha, 0.75f));

  conv.weight_init = Initializer::truncated_normal(0.05f, 2);
  conv.bias_init = 0.1f;
  net.add(conv2d("conv2", conv));
  net.add(relu("conv2/relu"));
  net.add(lrn("lrn2", 4, 1.f, lrn_alpha, 0.75f));
  net.add(max_pool("pool2", 3, 2, c.same()));
  net.add(flatten("flatten"));

  FcOptions fc;
  fc.weight_decay = c.weight_decay;
  fc.bias_init = 0.1f;
  fc.out = 384;
  fc.weight_init = Initializer::truncated_normal(0.04f, 3);
  net.add(fully_connected("fc3", fc));
  net.add(relu("fc3/relu"));

  fc.out = 192;
  fc.weight_init = Initializer::truncated_normal(0.04f, 4);
  net.add(fully_connected("fc4", fc));
  net.add(relu("fc4/relu"));

  fc.out = c.num_classes;
  fc.weight_init = Initializer::truncated_normal(1.f / 192.f, 5);
  fc.weight_decay = 0.f;
  fc.bias_init = 0.f;
  add_logits_and_loss(net, fc, c.label_smoothing);
}

}  // namespace tg

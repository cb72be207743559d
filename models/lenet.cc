// LeNet as the reference defines it (terngrad/inception/slim/models.py, reference section 3.2): SAME
// padding, ReLU after the convolutions, no batch norm, no dropout, weight decay on every weight.
//
//   conv1  5x5x20 SAME ReLU   tn(0.05, seed+1)    (N, 28, 28, 20)   500 + 20
//   pool1  max 2x2/2 SAME                          (N, 14, 14, 20)
//   conv2  5x5x50 SAME ReLU   tn(0.05, seed+2)    (N, 14, 14, 50)   25000 + 50
//   pool2  max 2x2/2 SAME                          (N, 7, 7, 50)
//   flatten                                        (N, 2450)
//   fc3    500 ReLU           tn(0.048, seed+3)   (N, 500)          1225000 + 500
//   logits 10 linear          tn(0.0767, seed+5)  (N, 10)           5000 + 10      total 1,256,080
#include "terngrad/models/registry.h"
#include "terngrad/nn/layers.h"

namespace tg {

void build_lenet(Net& net, const ModelConfig& c) {
  const float wd = c.weight_decay;
  net.set_input_shape(c.image_size, c.image_size, c.channels);
  ConvOptions conv;
  conv.kernel_h = conv.kernel_w = 5;
  conv.padding = c.same();
  conv.weight_decay = wd;
  conv.bias_init = 0.f;

  conv.out_channels = 20;
  conv.weight_init = Initializer::truncated_normal(0.05f, 1);
  net.add(conv2d("conv1", conv), {"images"});
  net.add(relu("conv1/relu"));
  net.add(max_pool("pool1", 2, 2, c.same()));

  conv.out_channels = 50;
  conv.weight_init = Initializer::truncated_normal(0.05f, 2);
  net.add(conv2d("conv2", conv));
  net.add(relu("conv2/relu"));
  net.add(max_pool("pool2", 2, 2, c.same()));
  net.add(flatten("flatten"));

  FcOptions fc;
  fc.weight_decay = wd;
  fc.out = 500;
  fc.weight_init = Initializer::truncated_normal(0.048f, 3);
  net.add(fully_connected("fc3", fc));
  net.add(relu("fc3/relu"));

  fc.out = c.num_classes;
  fc.weight_init = Initializer::truncated_normal(0.0767f, 5);
  add_logits_and_loss(net, fc, c.label_smoothing);
}

}  // namespace tg

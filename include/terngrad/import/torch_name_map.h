// The one name map between our networks and their PyTorch equivalents: for each tensor of ours (a parameter or
// a batch-norm statistic, by its name in the net), the state_dict key PyTorch stores it under.
//
//   resnet50      torchvision.models.resnet50: conv1 / bn1, layer{1-4}.{i}.conv{1-3} / bn{1-3},
//                 layer{b}.0.downsample.0 / .1, fc
//   inception_v3  torchvision.models.inception_v3 (transform_input=False): Conv2d_1a_3x3.conv / .bn, ...,
//                 Mixed_5b.branch1x1, ..., AuxLogits.conv0 / conv1 / fc, fc
//   lenet         the module in README "Start from trained weights": conv1, conv2, fc3, logits
//   cifarnet      likewise: conv1, conv2, fc3, fc4, logits
//
// Suffixes: weights -> weight, biases -> bias; BatchNorm gamma -> weight, beta -> bias, moving_mean ->
// running_mean, moving_variance -> running_var. PyTorch's num_batches_tracked has no counterpart (ignored).
// alexnet cannot be imported: torchvision's AlexNet is another network (one branch of 64-192-384-256-256
// convolutions with biases, no batch norm, no LRN) than the reference's two-branch AlexNet with batch norm.
#pragma once

#include <string>

namespace tg {

// Why `net` cannot be imported, or nullptr when it can.
const char* torch_import_refusal(const std::string& net);

// The PyTorch state_dict key of our tensor `ours` ("block2/unit_1/conv2/weights") of `net`; throws naming the
// tensor if the map has no entry (a network of ours the map does not know).
std::string torch_key(const std::string& net, const std::string& ours);

// True for keys PyTorch stores that have no counterpart here (BN's num_batches_tracked).
bool torch_key_ignored(const std::string& key);

}  // namespace tg

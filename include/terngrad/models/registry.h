// Model registry: builders by name ("lenet", "cifarnet", ...). A builder adds its layers to an empty Net
// for a given configuration; an unknown name is an error listing the known ones.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "terngrad/core/enum_names.h"
#include "terngrad/core/flag_table.h"
#include "terngrad/nn/layers.h"
#include "terngrad/nn/net.h"

namespace tg {

// How a network's SAME layers pad: TensorFlow's split (the reference's networks, the default) or PyTorch's
// symmetric (kernel - 1) / 2 with average pools counting the padding (what a network imported from PyTorch was
// trained with: terngrad-import writes it). Same output sizes for odd kernels; recorded in every checkpoint.
enum class PaddingStyle { kTf, kTorch };
template <>
struct EnumNames<PaddingStyle> : EnumNamesBase {
  static constexpr const char* kFlag = "--padding_style";
  static constexpr EnumName<PaddingStyle> kList[] = {{PaddingStyle::kTf, "tf"}, {PaddingStyle::kTorch, "torch"}};
};

// The networks' flags whose values a network takes as they are, their defaults written once here, with their flag
// sub-table (model_flags()); TrainConfig derives from this struct and embeds the table.
struct ModelFlags {
  float weight_decay = 0.0005f;
  float dropout_keep_prob = 0.5f;
  bool aux_logits = true;                // Inception-v3: auxiliary head (loss weight 0.4)
  bool zero_init_last_bn_gamma = false;  // ResNet-50: zero gamma of the last BN of each block
};
const std::vector<Flag<ModelFlags>>& model_flags();

// What a builder builds from: those flags and the settings the run resolves (input size, classes, smoothing,
// padding).
struct ModelConfig : ModelFlags {
  int64_t image_size = 28;  // square input, pixels
  int64_t channels = 1;     // 1 for MNIST, 3 otherwise
  int64_t num_classes = 10;
  float label_smoothing = 0.f;
  PaddingStyle padding_style = PaddingStyle::kTf;

  // The padding of the layers the network's definition calls SAME.
  Padding same() const { return padding_style == PaddingStyle::kTorch ? Padding::kSymmetric : Padding::kSame; }
};

using ModelBuilder = std::function<void(Net&, const ModelConfig&)>;

struct ModelInfo {
  std::string name;
  std::string description;
  int64_t min_image_size;              // smallest --image_size the architecture accepts
  int64_t default_image_size;          // --image_size 0 means this; 0: the dataset's
  float label_smoothing;               // --label_smoothing < 0 means this
  const char* imagenet_preprocessing;  // on ImageNet: "alexnet" or "inception" (data/preprocess.h)
  ModelBuilder build;
  int64_t design_image_size = 0;  // the input it was designed for; far larger: a warning (its dense layers grow)
};

const std::vector<ModelInfo>& model_registry();
const ModelInfo& find_model(const std::string& name);  // throws listing the known names
std::string model_names();                             // "lenet, cifarnet, ..."

// Builds `name` into `net` after checking the configuration (image size, classes).
void build_model(const std::string& name, const ModelConfig& config, Net& net);

// The classifier tail every network ends with: the fully connected layer "logits" (fc.out classes) reading
// the previous layer, marked as the net's logits, and the softmax cross-entropy loss on it and the labels.
void add_logits_and_loss(Net& net, const FcOptions& fc, float label_smoothing);

// The block of every batch-norm network here (AlexNet, ResNet-50, Inception-v3): the convolution `name` (without a
// bias) of `input`, batch norm `name`/BatchNorm, then, with relu_after, ReLU `name`/relu. Returns the last tensor.
std::string add_conv_bn(Net& net, const std::string& name, const std::string& input, ConvOptions conv,
                        const BatchNormOptions& bn, bool relu_after = true);

// Builders (one file each in models/).
void build_lenet(Net& net, const ModelConfig& config);         // models/lenet.cc
void build_cifarnet(Net& net, const ModelConfig& config);      // models/cifarnet.cc
void build_alexnet(Net& net, const ModelConfig& config);       // models/alexnet.cc
void build_resnet50(Net& net, const ModelConfig& config);      // models/resnet50.cc
void build_inception_v3(Net& net, const ModelConfig& config);  // models/inception_v3.cc

}  // namespace tg

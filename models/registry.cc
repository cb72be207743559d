// The table of known networks and the checks every build goes through.
#include "terngrad/models/registry.h"

namespace tg {

const std::vector<Flag<ModelFlags>>& model_flags() {
  using C = ModelFlags;
  static const std::vector<Flag<C>> table = {
      {"weight_decay", &C::weight_decay, "L2 coefficient (per layer as the reference)", at_least(0), kFlagRun},
      {"dropout_keep_prob", &C::dropout_keep_prob, "AlexNet/Inception dropout", in_range(0, 1, "(]"), kFlagRun},
      {"aux_logits", &C::aux_logits, "inception_v3: the auxiliary head (weight 0.4 in the loss)"},
      {"zero_init_last_bn_gamma", &C::zero_init_last_bn_gamma, "resnet50: start the last BN gamma of each block at 0"},
  };
  return table;
}

void add_logits_and_loss(Net& net, const FcOptions& fc, float label_smoothing) {
  const std::string& logits = net.add(fully_connected("logits", fc));
  net.set_logits(logits);
  net.set_loss(net.add(softmax_cross_entropy("loss", label_smoothing), {logits, "labels"}));
}

std::string add_conv_bn(Net& net, const std::string& name, const std::string& input, ConvOptions conv,
                        const BatchNormOptions& bn, bool relu_after) {
  conv.bias = false;  // the batch norm's beta is the bias
  net.add(conv2d(name, conv), {input});
  const std::string out = net.add(batch_norm(name + "/BatchNorm", bn));
  return relu_after ? net.add(relu(name + "/relu")) : out;
}

const std::vector<ModelInfo>& model_registry() {
  static const std::vector<ModelInfo> models = {
      // name, description, min and default image size, label smoothing, ImageNet preprocessing, builder, the size it
      // was designed for
      {"lenet", "LeNet (reference variant: SAME padding, ReLU), MNIST 28x28x1", 4, 0, 0.f, "inception", build_lenet,
       28},
      {"cifarnet", "CifarNet (TF CIFAR-10 tutorial net with LRN), 24x24x3", 1, 0, 0.f, "inception", build_cifarnet, 24},
      {"cifar10_alexnet", "alias of cifarnet (the reference's name)", 1, 0, 0.f, "inception", build_cifarnet, 24},
      {"alexnet", "AlexNet, the reference's two-branch variant with BN on every conv, 224x224x3", 57, 0, 0.f, "alexnet",
       build_alexnet, 224},
      {"resnet50", "ResNet-50 v1.5 (stride 2 on the 3x3 conv), 224x224x3", 32, 0, 0.f, "inception", build_resnet50,
       224},
      {"inception_v3", "Inception-v3 with the auxiliary head, 299x299x3", 75, 299, 0.1f, "inception",
       build_inception_v3, 299},
  };
  return models;
}

std::string model_names() {
  std::string s;
  for (const auto& m : model_registry()) s += (s.empty() ? "" : ", ") + m.name;
  return s;
}

const ModelInfo& find_model(const std::string& name) {
  for (const auto& m : model_registry())
    if (m.name == name) return m;
  TG_THROW("--net '{}' is not a known network (known: {})", name, model_names());
}

void build_model(const std::string& name, const ModelConfig& c, Net& net) {
  const ModelInfo& m = find_model(name);
  TG_CHECK(c.image_size >= m.min_image_size, "--image_size {} is too small for --net {} (minimum {})", c.image_size,
           name, m.min_image_size);
  TG_CHECK(c.num_classes >= 2, "--num_classes {} must be at least 2", c.num_classes);
  TG_CHECK(c.channels == 1 || c.channels == 3, "input channels {} must be 1 or 3", c.channels);
  TG_CHECK(c.dropout_keep_prob > 0.f && c.dropout_keep_prob <= 1.f, "--dropout_keep_prob {} is not in (0, 1]",
           c.dropout_keep_prob);
  TG_CHECK(c.weight_decay >= 0.f, "--weight_decay {} must be >= 0", c.weight_decay);
  m.build(net, c);
}

}  // namespace tg

// Our tensor names -> PyTorch state_dict keys, per network (import/torch_name_map.h).
#include "terngrad/import/torch_name_map.h"

#include <map>
#include <regex>
#include <vector>

#include "terngrad/core/error.h"

namespace tg {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Splits "scope/leaf" at the layer's parameter: "conv1/BatchNorm/gamma" -> layer "conv1", bn true, field "gamma".
struct TensorName {
  std::string layer;  // our layer scope, BatchNorm stripped
  bool batch_norm = false;
  std::string field;  // weights, biases, gamma, beta, moving_mean, moving_variance
};

TensorName split(const std::string& ours) {
  TensorName t;
  const size_t slash = ours.rfind('/');
  TG_CHECK(slash != std::string::npos, "tensor '{}' has no layer scope", ours);
  t.field = ours.substr(slash + 1);
  t.layer = ours.substr(0, slash);
  if (ends_with(t.layer, "/BatchNorm")) {
    t.batch_norm = true;
    t.layer.resize(t.layer.size() - std::string("/BatchNorm").size());
  }
  return t;
}

std::string torch_field(const TensorName& t, const std::string& ours) {
  static const std::map<std::string, std::string> kFields = {{"weights", "weight"},
                                                             {"biases", "bias"},
                                                             {"gamma", "weight"},
                                                             {"beta", "bias"},
                                                             {"moving_mean", "running_mean"},
                                                             {"moving_variance", "running_var"}};
  auto it = kFields.find(t.field);
  if (it == kFields.end()) TG_THROW("tensor '{}': no PyTorch name for its field '{}'", ours, t.field);
  return it->second;
}

// ResNet-50: "conv1" -> conv1 / bn1; "blockB/unit_U/convK" -> layerB.(U-1).convK / bnK; "blockB/unit_U/shortcut"
// -> layerB.(U-1).downsample.0 / .1; "logits" -> fc.
std::string resnet50_key(const std::string& ours) {
  const TensorName t = split(ours);
  const std::string f = torch_field(t, ours);
  if (t.layer == "conv1") return (t.batch_norm ? "bn1." : "conv1.") + f;
  if (t.layer == "logits") return "fc." + f;
  static const std::regex unit(R"(block([1-4])/unit_([0-9]+)/(conv([1-3])|shortcut))");
  std::smatch m;
  if (std::regex_match(t.layer, m, unit)) {
    const std::string prefix = "layer" + m[1].str() + "." + std::to_string(std::stoi(m[2].str()) - 1) + ".";
    if (m[3] == "shortcut") return prefix + (t.batch_norm ? "downsample.1." : "downsample.0.") + f;
    return prefix + (t.batch_norm ? "bn" : "conv") + m[4].str() + "." + f;
  }
  TG_THROW("resnet50 tensor '{}' has no PyTorch name", ours);
}

// Inception-v3: TF-slim's scopes -> torchvision's module names. A BasicConv2d X is X.conv / X.bn.
std::string inception_module(const std::string& layer, const std::string& ours) {
  static const std::map<std::string, std::string> kBranchA = {
      {"Branch_0/Conv2d_0a_1x1", "branch1x1"},      {"Branch_1/Conv2d_0a_1x1", "branch5x5_1"},
      {"Branch_1/Conv2d_0b_5x5", "branch5x5_2"},    {"Branch_2/Conv2d_0a_1x1", "branch3x3dbl_1"},
      {"Branch_2/Conv2d_0b_3x3", "branch3x3dbl_2"}, {"Branch_2/Conv2d_0c_3x3", "branch3x3dbl_3"},
      {"Branch_3/Conv2d_0b_1x1", "branch_pool"}};
  static const std::map<std::string, std::string> kBranchB = {{"Branch_0/Conv2d_1a_3x3", "branch3x3"},
                                                              {"Branch_1/Conv2d_0a_1x1", "branch3x3dbl_1"},
                                                              {"Branch_1/Conv2d_0b_3x3", "branch3x3dbl_2"},
                                                              {"Branch_1/Conv2d_1a_3x3", "branch3x3dbl_3"}};
  static const std::map<std::string, std::string> kBranchC = {
      {"Branch_0/Conv2d_0a_1x1", "branch1x1"},      {"Branch_1/Conv2d_0a_1x1", "branch7x7_1"},
      {"Branch_1/Conv2d_0b_1x7", "branch7x7_2"},    {"Branch_1/Conv2d_0c_7x1", "branch7x7_3"},
      {"Branch_2/Conv2d_0a_1x1", "branch7x7dbl_1"}, {"Branch_2/Conv2d_0b_7x1", "branch7x7dbl_2"},
      {"Branch_2/Conv2d_0c_1x7", "branch7x7dbl_3"}, {"Branch_2/Conv2d_0d_7x1", "branch7x7dbl_4"},
      {"Branch_2/Conv2d_0e_1x7", "branch7x7dbl_5"}, {"Branch_3/Conv2d_0b_1x1", "branch_pool"}};
  static const std::map<std::string, std::string> kBranchD = {
      {"Branch_0/Conv2d_0a_1x1", "branch3x3_1"},   {"Branch_0/Conv2d_1a_3x3", "branch3x3_2"},
      {"Branch_1/Conv2d_0a_1x1", "branch7x7x3_1"}, {"Branch_1/Conv2d_0b_1x7", "branch7x7x3_2"},
      {"Branch_1/Conv2d_0c_7x1", "branch7x7x3_3"}, {"Branch_1/Conv2d_1a_3x3", "branch7x7x3_4"}};
  static const std::map<std::string, std::string> kBranchE = {
      {"Branch_0/Conv2d_0a_1x1", "branch1x1"},       {"Branch_1/Conv2d_0a_1x1", "branch3x3_1"},
      {"Branch_1/Conv2d_0b_1x3", "branch3x3_2a"},    {"Branch_1/Conv2d_0b_3x1", "branch3x3_2b"},
      {"Branch_2/Conv2d_0a_1x1", "branch3x3dbl_1"},  {"Branch_2/Conv2d_0b_3x3", "branch3x3dbl_2"},
      {"Branch_2/Conv2d_0c_1x3", "branch3x3dbl_3a"}, {"Branch_2/Conv2d_0d_3x1", "branch3x3dbl_3b"},
      {"Branch_3/Conv2d_0b_1x1", "branch_pool"}};
  static const std::map<std::string, const std::map<std::string, std::string>*> kBlocks = {
      {"Mixed_5b", &kBranchA}, {"Mixed_5c", &kBranchA}, {"Mixed_5d", &kBranchA}, {"Mixed_6a", &kBranchB},
      {"Mixed_6b", &kBranchC}, {"Mixed_6c", &kBranchC}, {"Mixed_6d", &kBranchC}, {"Mixed_6e", &kBranchC},
      {"Mixed_7a", &kBranchD}, {"Mixed_7b", &kBranchE}, {"Mixed_7c", &kBranchE}};
  static const std::map<std::string, std::string> kOthers = {{"Conv2d_1a_3x3", "Conv2d_1a_3x3"},
                                                             {"Conv2d_2a_3x3", "Conv2d_2a_3x3"},
                                                             {"Conv2d_2b_3x3", "Conv2d_2b_3x3"},
                                                             {"Conv2d_3b_1x1", "Conv2d_3b_1x1"},
                                                             {"Conv2d_4a_3x3", "Conv2d_4a_3x3"},
                                                             {"AuxLogits/Conv2d_1b_1x1", "AuxLogits.conv0"},
                                                             {"AuxLogits/Conv2d_2a_5x5", "AuxLogits.conv1"}};
  if (auto it = kOthers.find(layer); it != kOthers.end()) return it->second;
  const size_t slash = layer.find('/');
  if (slash != std::string::npos) {
    auto block = kBlocks.find(layer.substr(0, slash));
    if (block != kBlocks.end()) {
      auto branch = block->second->find(layer.substr(slash + 1));
      if (branch != block->second->end()) return block->first + "." + branch->second;
    }
  }
  TG_THROW("inception_v3 tensor '{}' has no PyTorch name", ours);
}

std::string inception_key(const std::string& ours) {
  const TensorName t = split(ours);
  const std::string f = torch_field(t, ours);
  if (t.layer == "logits") return "fc." + f;
  if (t.layer == "AuxLogits/logits") return "AuxLogits.fc." + f;
  // Every convolution of the network is a BasicConv2d (conv without bias, then BN).
  return inception_module(t.layer, ours) + (t.batch_norm ? ".bn." : ".conv.") + f;
}

// LeNet and CifarNet have no batch norm: the layer's name, then weight / bias.
std::string plain_key(const std::string& net, const std::string& ours, const std::vector<std::string>& layers) {
  const TensorName t = split(ours);
  for (const std::string& l : layers)
    if (t.layer == l && !t.batch_norm) return l + "." + torch_field(t, ours);
  TG_THROW("{} tensor '{}' has no PyTorch name", net, ours);
}

}  // namespace

const char* torch_import_refusal(const std::string& net) {
  if (net == "alexnet")
    return "torchvision's AlexNet is another network than ours (one branch of 64-192-384-256-256 convolutions with "
           "biases, no batch norm, no LRN; ours is the reference's two-branch AlexNet with batch norm and LRN), so "
           "no weights of it compute our AlexNet";
  return nullptr;
}

std::string torch_key(const std::string& net, const std::string& ours) {
  if (const char* why = torch_import_refusal(net)) TG_THROW("--net {} cannot be imported: {}", net, why);
  if (net == "resnet50") return resnet50_key(ours);
  if (net == "inception_v3") return inception_key(ours);
  if (net == "lenet") return plain_key(net, ours, {"conv1", "conv2", "fc3", "logits"});
  if (net == "cifarnet" || net == "cifar10_alexnet")
    return plain_key(net, ours, {"conv1", "conv2", "fc3", "fc4", "logits"});
  TG_THROW("--net {} has no PyTorch name map", net);
}

bool torch_key_ignored(const std::string& key) { return ends_with(key, ".num_batches_tracked"); }

}  // namespace tg

// terngrad-import's work: PyTorch weights (import/torch_weights.h) of one of our networks, matched to its tensors
// through the name map (import/torch_name_map.h), converted to our layouts and written as a checkpoint of ours at
// step 0 that terngrad-eval, terngrad-export and terngrad-train --pretrained_model_checkpoint_path read.
//
// Layouts: convolution weights OIHW -> (KH, KW, I, O); fully connected (out, in) -> (in, out), and for the first
// one after a flatten of an (H, W, C) map its rows reordered from PyTorch's (C, H, W) order to our (H, W, C);
// biases and batch-norm tensors as they are (PyTorch's eps matches our networks': 1e-5 resnet50, 1e-3 inception_v3).
// The checkpoint records --padding_style torch, so every program builds the network with PyTorch's padding.
// The number of classes comes from the logits weights; inception_v3's auxiliary head is built when the file has it.
//
// Refused, with one line naming the file (and the tensor, and both shapes): a tensor missing from the file (all
// listed), a tensor the map does not expect (all listed), a shape or a dtype that does not fit, an eval-mode ONNX
// export whose batch norm PyTorch folded into the convolutions (its statistics are then not in the file), a
// network that cannot be imported (alexnet), an --output_dir that already holds a checkpoint. Nothing is written
// before every tensor has been converted; the checkpoint is written atomically.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "terngrad/import/torch_weights.h"

namespace tg {

struct TorchImportOptions {
  std::string net;
  std::string input;
  std::string output_dir;
  WeightsFormat format = WeightsFormat::kAuto;
  std::string dataset;     // empty: the network's usual one (mnist, cifar10, imagenet)
  int64_t image_size = 0;  // 0: the network's or the dataset's default
};

struct TorchImportSummary {
  std::string checkpoint;  // the file written
  WeightsFormat format = WeightsFormat::kAuto;
  std::string dataset;
  int64_t image_size = 0, num_classes = 0;
  bool aux_logits = false;
  int64_t tensors = 0, parameters = 0;  // tensors written (weights and BN statistics); trainable elements
  std::vector<std::string> ignored;     // keys of the file with no counterpart (num_batches_tracked)
  std::string parameter_digest;
};

TorchImportSummary import_torch_weights(const TorchImportOptions& options);

}  // namespace tg

// The facts of each dataset the trainer knows (classes, channels, examples, default image size, the
// evaluation subset): one table, read by the flag checks, the trainer, the input pipeline and preprocessing; and
// "custom", whose facts are a folder's own description (<data_dir>/dataset.json, data/dataset_description.h).
#pragma once

#include <cstdint>
#include <string>

#include "terngrad/core/enum_names.h"

namespace tg {

enum class Dataset { kMnist, kFashionMnist, kCifar10, kImagenet, kCustom };
template <>
struct EnumNames<Dataset> : EnumNamesBase {
  static constexpr const char* kFlag = "--dataset";
  static constexpr EnumName<Dataset> kList[] = {{Dataset::kMnist, "mnist"},
                                                {Dataset::kFashionMnist, "fashion_mnist"},
                                                {Dataset::kCifar10, "cifar10"},
                                                {Dataset::kImagenet, "imagenet"},
                                                {Dataset::kCustom, "custom"}};
};

struct DatasetInfo {
  Dataset id;
  std::string name;
  int64_t num_classes;  // 1001 for ImageNet (label 0 is background)
  int64_t channels;
  int64_t train_examples;      // examples per epoch of the training subset
  int64_t eval_examples;       // of the evaluation subset
  std::string eval_subset;     // "test" or "validation"
  int64_t default_image_size;  // custom: the images' size (0: mixed sizes), the network's design size at most
  bool has_gray_images;        // color dataset with a few gray images (converted, not refused as the wrong data)
};

// The entry of "mnist", "fashion_mnist", "cifar10" or "imagenet"; "custom" is an error (its facts are in a data
// folder: the overload below), anything else an error listing the names.
const DatasetInfo& dataset_info(const std::string& name);
// Any dataset: a built-in's entry, or custom's facts from <data_dir>/dataset.json (an error naming the file and
// the converter that writes it when there is none).
DatasetInfo dataset_info(const std::string& name, const std::string& data_dir);
// The images' preprocessing follows the dataset's kind: custom folders get the network's ImageNet preprocessing.
inline bool uses_imagenet_preprocessing(Dataset d) { return d == Dataset::kImagenet || d == Dataset::kCustom; }

}  // namespace tg

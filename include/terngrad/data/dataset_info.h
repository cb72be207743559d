// The facts of each dataset the trainer knows (classes, channels, examples, default image size, the
// evaluation subset): one table, read by the flag checks, the trainer, the input pipeline and preprocessing.
#pragma once

#include <cstdint>
#include <string>

#include "terngrad/core/enum_names.h"

namespace tg {

enum class Dataset { kMnist, kFashionMnist, kCifar10, kImagenet };
template <>
struct EnumNames<Dataset> : EnumNamesBase {
  static constexpr const char* kFlag = "--dataset";
  static constexpr EnumName<Dataset> kList[] = {{Dataset::kMnist, "mnist"},
                                                {Dataset::kFashionMnist, "fashion_mnist"},
                                                {Dataset::kCifar10, "cifar10"},
                                                {Dataset::kImagenet, "imagenet"}};
};

struct DatasetInfo {
  Dataset id;
  std::string name;
  int64_t num_classes;  // 1001 for ImageNet (label 0 is background)
  int64_t channels;
  int64_t train_examples;   // examples per epoch of the training subset
  int64_t eval_examples;    // of the evaluation subset
  std::string eval_subset;  // "test" or "validation"
  int64_t default_image_size;
  bool has_gray_images;  // color dataset with a few gray images (converted, not refused as the wrong data)
};

// The entry of "mnist", "fashion_mnist", "cifar10" or "imagenet"; anything else is an error listing them.
const DatasetInfo& dataset_info(const std::string& name);

}  // namespace tg

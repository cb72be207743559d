// The dataset table.
#include "terngrad/data/dataset_info.h"

namespace tg {

const DatasetInfo& dataset_info(const std::string& name) {
  static const DatasetInfo table[] = {
      {Dataset::kMnist, "mnist", 10, 1, 60000, 10000, "test", 28, false},
      {Dataset::kFashionMnist, "fashion_mnist", 10, 1, 60000, 10000, "test", 28, false},
      {Dataset::kCifar10, "cifar10", 10, 3, 50000, 10000, "test", 24, false},
      {Dataset::kImagenet, "imagenet", 1001, 3, 1281167, 50000, "validation", 224, true},
  };
  return table[static_cast<int>(parse_enum<Dataset>(name))];
}

}  // namespace tg

// The dataset table, and custom datasets' facts from their description.
#include "terngrad/data/dataset_info.h"

#include <algorithm>

#include "terngrad/core/error.h"
#include "terngrad/data/dataset_description.h"

namespace tg {

const DatasetInfo& dataset_info(const std::string& name) {
  static const DatasetInfo table[] = {
      {Dataset::kMnist, "mnist", 10, 1, 60000, 10000, "test", 28, false},
      {Dataset::kFashionMnist, "fashion_mnist", 10, 1, 60000, 10000, "test", 28, false},
      {Dataset::kCifar10, "cifar10", 10, 3, 50000, 10000, "test", 24, false},
      {Dataset::kImagenet, "imagenet", 1001, 3, 1281167, 50000, "validation", 224, true},
  };
  const Dataset id = parse_enum<Dataset>(name);
  if (id == Dataset::kCustom)
    TG_THROW("--dataset custom takes its classes, channels and image size from the data folder's {} (--data_dir)",
             kDatasetDescriptionFile);
  return table[static_cast<int>(id)];
}

DatasetInfo dataset_info(const std::string& name, const std::string& data_dir) {
  if (parse_enum<Dataset>(name) != Dataset::kCustom) return dataset_info(name);
  TG_CHECK(!data_dir.empty(),
           "--dataset custom takes its classes, channels and image size from --data_dir's {}: give --data_dir",
           kDatasetDescriptionFile);
  const std::optional<DatasetDescription> d = find_dataset_description(data_dir);
  if (!d)
    TG_THROW(
        "--dataset custom: {} does not exist; `terngrad-data build-image-data --input_dir <class folders> "
        "--output_dir {}` writes it beside the shards (or name the data's --dataset: mnist, fashion_mnist, cifar10, "
        "imagenet)",
        dataset_description_path(data_dir), data_dir);
  DatasetInfo info{Dataset::kCustom,
                   "custom",
                   d->num_classes(),
                   d->channels,
                   d->examples_of("train"),
                   d->examples_of("validation"),
                   "validation",
                   std::min(d->height, d->width),
                   true};
  return info;
}

}  // namespace tg

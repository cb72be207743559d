// A dataset's description, written beside its shards by `terngrad-data build-image-data` as <data_dir>/dataset.json
// and read by the trainer and evaluator for `--dataset custom` (chosen by itself when the file is there and
// --dataset is not given): the classes in label order, the channels and size every image was converted to, and the
// examples of each subset. Labels are 1..K (0 stays the reference's background class), so a model of K classes has
// K + 1 outputs. A file that cannot be read, or lacks a field, is an error naming the file and the field.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tg {

inline constexpr const char* kDatasetDescriptionFile = "dataset.json";
inline constexpr int kDatasetDescriptionVersion = 1;

struct DatasetDescription {
  std::vector<std::string> classes;         // label k + 1 is classes[k]
  int channels = 3;                         // 1 or 3: every image was converted to this
  int height = 0, width = 0;                // the size of every image; 0: they keep their own sizes (--resize 0)
  std::string image_format;                 // "JPEG" or "RAW"
  std::map<std::string, int64_t> examples;  // subset ("train", "validation") -> examples
  std::vector<std::string> skipped;         // files of the class folders that are not images, not converted

  int64_t num_classes() const { return static_cast<int64_t>(classes.size()) + 1; }
  int64_t examples_of(const std::string& subset) const;  // 0 when the subset is missing
  // "3 classes of 256x256 RGB images (train 90, validation 10)": what error messages name.
  std::string summary() const;
};

std::string dataset_description_path(const std::string& data_dir);
std::string dataset_description_json(const DatasetDescription& d);  // the file's text
// The description in <data_dir>/dataset.json; nullopt when the file does not exist. Throws tg::Error naming the file
// when it is there but unreadable, of another version, or missing a field.
std::optional<DatasetDescription> find_dataset_description(const std::string& data_dir);

}  // namespace tg

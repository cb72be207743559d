// <data_dir>/dataset.json: written by build-image-data, read for --dataset custom (see dataset_description.h).
#include "terngrad/data/dataset_description.h"

#include <filesystem>
#include <system_error>

#include "terngrad/core/error.h"
#include "terngrad/core/json_value.h"
#include "terngrad/core/json_writer.h"
#include "terngrad/core/read_file.h"

namespace tg {

int64_t DatasetDescription::examples_of(const std::string& subset) const {
  const auto it = examples.find(subset);
  return it == examples.end() ? 0 : it->second;
}

std::string DatasetDescription::summary() const {
  std::string counts;
  for (const auto& [subset, n] : examples) counts += fmt::format("{}{} {}", counts.empty() ? "" : ", ", subset, n);
  const std::string size = height > 0 ? fmt::format("{}x{}", height, width) : std::string("mixed-size");
  return fmt::format("{} classes of {} {} images ({})", classes.size(), size, channels == 1 ? "grayscale" : "RGB",
                     counts);
}

std::string dataset_description_path(const std::string& data_dir) {
  return (std::filesystem::path(data_dir) / kDatasetDescriptionFile).string();
}

std::string dataset_description_json(const DatasetDescription& d) {
  std::vector<std::string> classes, skipped;
  for (const std::string& c : d.classes) classes.push_back(json_string(c));
  for (const std::string& s : d.skipped) skipped.push_back(json_string(s));
  JsonObject examples;
  for (const auto& [subset, n] : d.examples) examples.add(subset, n);
  JsonObject o;
  o.add("version", int64_t{kDatasetDescriptionVersion})
      .add("written_by", "terngrad-data build-image-data")
      .add("labels", "label k is classes[k - 1]; 0 is the background class, so --num_classes is classes + 1")
      .add_json("classes", json_array(classes))
      .add("num_classes", d.num_classes())
      .add("channels", int64_t{d.channels})
      .add("height", int64_t{d.height})
      .add("width", int64_t{d.width})
      .add("image_format", d.image_format)
      .add_json("examples", examples.str())
      .add_json("skipped", json_array(skipped));
  return o.str() + "\n";
}

std::optional<DatasetDescription> find_dataset_description(const std::string& data_dir) {
  const std::string path = dataset_description_path(data_dir);
  std::error_code ec;
  if (data_dir.empty() || !std::filesystem::exists(path, ec)) return std::nullopt;
  const JsonValue v = parse_json(read_file(path), path);
  auto field = [&](const char* key) -> const JsonValue& {
    const JsonValue* f = v.is_object() ? v.find(key) : nullptr;
    if (!f)
      TG_THROW("{}: no \"{}\" (a dataset description written by terngrad-data build-image-data has it)", path, key);
    return *f;
  };
  auto where = [&](const char* key) { return fmt::format("{}: \"{}\"", path, key); };
  const int64_t version = field("version").as_int64(where("version"));
  TG_CHECK(version == kDatasetDescriptionVersion, "{}: version {}, this build reads version {}", path, version,
           kDatasetDescriptionVersion);
  DatasetDescription d;
  for (const JsonValue& c : field("classes").as_array(where("classes")))
    d.classes.push_back(c.as_string(where("classes")));
  d.channels = static_cast<int>(field("channels").as_int64(where("channels")));
  d.height = static_cast<int>(field("height").as_int64(where("height")));
  d.width = static_cast<int>(field("width").as_int64(where("width")));
  d.image_format = field("image_format").as_string(where("image_format"));
  for (const auto& [subset, n] : field("examples").as_object(where("examples")))
    d.examples[subset] = n.as_int64(where("examples"));
  if (const JsonValue* s = v.find("skipped"))
    for (const JsonValue& f : s->as_array(where("skipped"))) d.skipped.push_back(f.as_string(where("skipped")));
  TG_CHECK(!d.classes.empty(), "{}: \"classes\" is empty", path);
  TG_CHECK(d.channels == 1 || d.channels == 3, "{}: \"channels\" {} is not 1 or 3", path, d.channels);
  TG_CHECK(d.height >= 0 && d.width >= 0 && (d.height > 0) == (d.width > 0), "{}: \"height\" {} and \"width\" {}", path,
           d.height, d.width);
  for (const auto& [subset, n] : d.examples) TG_CHECK(n >= 0, "{}: \"examples\" of {} is {}", path, subset, n);
  return d;
}

}  // namespace tg

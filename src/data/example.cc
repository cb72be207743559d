// tf.Example build/parse for image records, through the protobuf messages of proto/example.proto.
#include "terngrad/data/example.h"

#include <algorithm>

#include "example.pb.h"
#include "terngrad/core/error.h"

namespace tg {
namespace {

void set_bytes(tensorflow::Features* f, const std::string& key, const std::string& value) {
  (*f->mutable_feature())[key].mutable_bytes_list()->add_value(value);
}
void set_int(tensorflow::Features* f, const std::string& key, int64_t value) {
  (*f->mutable_feature())[key].mutable_int64_list()->add_value(value);
}

const tensorflow::Feature* find(const tensorflow::Features& f, const char* key) {
  auto it = f.feature().find(key);
  return it == f.feature().end() ? nullptr : &it->second;
}

// Single int64 value of `key`; false when the key is absent.
bool get_int(const tensorflow::Features& f, const char* key, int64_t* out, const std::string& where) {
  const tensorflow::Feature* feat = find(f, key);
  if (!feat) return false;
  if (feat->kind_case() != tensorflow::Feature::kInt64List || feat->int64_list().value_size() < 1)
    TG_THROW("{}: feature '{}' is not a non-empty int64 list", where, key);
  *out = feat->int64_list().value(0);
  return true;
}

bool get_bytes(const tensorflow::Features& f, const char* key, std::string* out, const std::string& where) {
  const tensorflow::Feature* feat = find(f, key);
  if (!feat) return false;
  if (feat->kind_case() != tensorflow::Feature::kBytesList)
    TG_THROW("{}: feature '{}' is not a bytes list", where, key);
  if (feat->bytes_list().value_size() < 1) return false;
  *out = feat->bytes_list().value(0);
  return true;
}

}  // namespace

std::string build_image_example(const ImageExample& ex) {
  tensorflow::Example proto;
  tensorflow::Features* f = proto.mutable_features();
  set_bytes(f, "image/encoded", ex.encoded);
  if (!ex.format.empty()) set_bytes(f, "image/format", ex.format);
  set_int(f, "image/class/label", ex.label);
  if (ex.height > 0) set_int(f, "image/height", ex.height);
  if (ex.width > 0) set_int(f, "image/width", ex.width);
  if (ex.channels > 0) set_int(f, "image/channels", ex.channels);
  if (!ex.colorspace.empty()) set_bytes(f, "image/colorspace", ex.colorspace);
  if (!ex.filename.empty()) set_bytes(f, "image/filename", ex.filename);
  if (!ex.class_text.empty()) set_bytes(f, "image/class/text", ex.class_text);
  std::string out;
  proto.SerializeToString(&out);
  return out;
}

ImageExample parse_image_example(const std::string& bytes, const std::string& where) {
  tensorflow::Example proto;
  if (!proto.ParseFromString(bytes)) TG_THROW("{}: record is not a tf.Example", where);
  const tensorflow::Features& f = proto.features();
  ImageExample ex;
  if (!get_bytes(f, "image/encoded", &ex.encoded, where)) TG_THROW("{}: example has no image/encoded", where);
  if (!get_int(f, "image/class/label", &ex.label, where)) TG_THROW("{}: example has no image/class/label", where);
  get_bytes(f, "image/format", &ex.format, where);
  get_int(f, "image/height", &ex.height, where);
  get_int(f, "image/width", &ex.width, where);
  get_int(f, "image/channels", &ex.channels, where);
  get_bytes(f, "image/colorspace", &ex.colorspace, where);
  get_bytes(f, "image/filename", &ex.filename, where);
  get_bytes(f, "image/class/text", &ex.class_text, where);
  return ex;
}

std::vector<std::string> example_feature_keys(const std::string& bytes, const std::string& where) {
  tensorflow::Example proto;
  if (!proto.ParseFromString(bytes)) TG_THROW("{}: record is not a tf.Example", where);
  std::vector<std::string> keys;
  for (const auto& kv : proto.features().feature()) keys.push_back(kv.first);
  std::sort(keys.begin(), keys.end());
  return keys;
}

}  // namespace tg

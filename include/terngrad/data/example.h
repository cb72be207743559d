// tf.Example records of images, as the reference writes them (keys in README "Formats"):
//   image/encoded (bytes), image/format ("png", "jpeg"/"JPEG", "RAW"), image/class/label (int64),
//   image/height, image/width, image/channels (int64), optionally image/colorspace, image/filename,
//   image/class/text. Parsing reads only the keys it needs and ignores every other key.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tg {

// One image example. height/width/channels are 0 when the record does not carry them (they are required
// only for RAW pixels).
struct ImageExample {
  std::string encoded;  // image/encoded
  std::string format;   // image/format; empty when absent
  int64_t label = 0;    // image/class/label
  int64_t height = 0, width = 0, channels = 0;
  std::string colorspace;  // image/colorspace (optional)
  std::string filename;    // image/filename (optional)
  std::string class_text;  // image/class/text (optional)
};

// Serialized tf.Example with the keys above (optional strings only when non-empty).
std::string build_image_example(const ImageExample& ex);

// Parses a serialized tf.Example. Throws tg::Error prefixed with `where` (e.g. "file:offset") when the bytes
// are not an Example, image/encoded or image/class/label is missing, or a key has the wrong list kind.
ImageExample parse_image_example(const std::string& bytes, const std::string& where);

// Keys of a serialized Example (for `terngrad-data inspect`); throws tg::Error when it is not an Example.
std::vector<std::string> example_feature_keys(const std::string& bytes, const std::string& where);

}  // namespace tg

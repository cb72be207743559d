// Per-dataset image preprocessing, following the reference (terngrad-reference.md section 4.3). Input: a
// decoded uint8 image (H, W, C); output: float32 (S, S, C) with S = image_size, written to `out`.
//
//   mnist      train = eval: crop-or-pad to S (centred), x/255, (x - 0.5) * 2.
//   cifar10    train: random S crop, flip (p 0.5), brightness + U[-63/255, 63/255], contrast factor
//              U[0.2, 1.8] around the per-channel mean, per-image standardization (no clipping).
//              eval: centre crop S, per-image standardization. An image smaller than S is an error.
//   alexnet    (ImageNet) train: bilinear resize to R x R (R = round(256 * S / 224), 256 for S = 224; aspect
//              not kept), random S crop, flip, x * 255, minus RGB means (123.68, 116.78, 103.94).
//              eval: the same with the centre crop and no flip.
//   inception  (ImageNet for ResNet-50 / Inception-v3) train: distorted bounding-box crop (min object
//              covered 0.1, aspect [0.75, 1.33], area [0.05, 1], 100 attempts, whole image on failure),
//              bilinear resize to S, flip, colour distortion (brightness 32/255, saturation [0.5, 1.5],
//              hue 0.2, contrast [0.5, 1.5]; the order is one of the reference's two, chosen per record),
//              clip to [0, 1], (x - 0.5) * 2. eval: central crop 0.875, bilinear resize to S, (x - 0.5) * 2.
//
// Deliberate differences from the reference: the resize method of inception train is always bilinear (the
// reference chose by thread id, which would make results depend on the thread count), and the colour
// ordering is drawn per record for the same reason. Bilinear resizing uses TensorFlow 1's convention
// (align_corners = false, source = dest * in / out), as the reference's resize_images did.
//
// Randomness: every draw comes from an AugmentRng, a Philox4x32-10 stream keyed by the run's seed with the
// counter naming (epoch, file index, record index), so a record's augmentation does not depend on which
// thread handled it or how many threads there are.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "terngrad/core/error.h"
#include "terngrad/core/philox.h"
#include "terngrad/data/image_codec.h"

namespace tg {

enum class PreprocessKind { kMnist, kCifar10, kAlexnet, kInception };

// "mnist"/"fashion_mnist" -> kMnist, "cifar10" -> kCifar10; "imagenet" and "custom" -> `imagenet` (the model's
// choice, its registry entry: kAlexnet or kInception). An unknown dataset is an error listing the known ones.
PreprocessKind preprocess_kind_for(const std::string& dataset, PreprocessKind imagenet);
template <>
struct EnumNames<PreprocessKind> : EnumNamesBase {
  static constexpr const char* kFlag = "preprocessing";
  static constexpr EnumName<PreprocessKind> kList[] = {{PreprocessKind::kMnist, "mnist"},
                                                       {PreprocessKind::kCifar10, "cifar10"},
                                                       {PreprocessKind::kAlexnet, "alexnet"},
                                                       {PreprocessKind::kInception, "inception"}};
};

class AugmentRng {
 public:
  AugmentRng(uint64_t seed, uint32_t epoch, uint32_t file_index, uint32_t record_index)
      : key_(philox_key(seed, 0x41554731u /* "AUG1" */)), epoch_(epoch), file_(file_index), record_(record_index) {}
  float uniform() { return philox_uniform(key_, i_++, epoch_, file_, record_); }  // [0, 1)
  float uniform(float lo, float hi) { return lo + (hi - lo) * uniform(); }
  int below(int n) { return std::min(n - 1, static_cast<int>(uniform() * n)); }  // [0, n)

 private:
  PhiloxKey key_;
  uint32_t epoch_, file_, record_;
  uint64_t i_ = 0;
};

// A float image (H, W, C), values in [0, 1] after to_float.
struct FloatImage {
  int height = 0, width = 0, channels = 0;
  std::vector<float> data;  // (H, W, C)
  float& at(int y, int x, int c) { return data[(static_cast<size_t>(y) * width + x) * channels + c]; }
  float at(int y, int x, int c) const { return data[(static_cast<size_t>(y) * width + x) * channels + c]; }
};

// ---- building blocks (each tested against a hand-computed case) ---------------------------------------
FloatImage to_float(const Image& img);                                 // x / 255
FloatImage crop(const FloatImage& img, int y0, int x0, int h, int w);  // must fit
FloatImage crop_or_pad(const FloatImage& img, int h, int w);           // TF resize_image_with_crop_or_pad
FloatImage central_crop(const FloatImage& img, float fraction);        // TF central_crop
FloatImage resize_bilinear(const FloatImage& img, int h, int w);       // TF1 convention
void flip_left_right(FloatImage* img);
void adjust_brightness(FloatImage* img, float delta);   // x + delta
void adjust_contrast(FloatImage* img, float factor);    // (x - mean_c) * f + mean_c
void adjust_saturation(FloatImage* img, float factor);  // HSV s * f, clipped to [0, 1]
void adjust_hue(FloatImage* img, float delta);          // HSV h + delta (mod 1)
void per_image_standardization(FloatImage* img);        // (x - mean) / max(std, 1 / sqrt(N))
void clip01(FloatImage* img);

// Crop window of TF's sample_distorted_bounding_box with the whole image as the only box.
struct CropWindow {
  int y0, x0, h, w;
};
CropWindow sample_distorted_crop(int height, int width, AugmentRng& rng, float min_object_covered = 0.1f,
                                 float min_aspect = 0.75f, float max_aspect = 1.33f, float min_area = 0.05f,
                                 float max_area = 1.0f, int max_attempts = 100);

struct PreprocessSpec {
  PreprocessKind kind = PreprocessKind::kMnist;
  int image_size = 28;
  int channels = 1;  // channels of the output (and of the decoded image)
  bool train = true;
};

// An image whose stored channels contradict --dataset: the shards belong to another dataset (e.g. 1-channel
// Fashion-MNIST shards read with --dataset cifar10). Not a corrupt record: the pipeline should stop on it even
// with --skip_corrupt_records (catch it before tg::Error).
class DatasetMismatchError : public Error {
 public:
  using Error::Error;
};

// Throws DatasetMismatchError (prefixed with `where`) when img.source_channels contradicts the dataset:
// mnist/fashion_mnist need grayscale sources, cifar10 colour ones. ImageNet (kAlexnet, kInception) takes any:
// its grayscale and CMYK JPEGs become RGB, as the reference's decode_jpeg(channels=3) made them. Images not
// decoded from bytes (source_channels 0) are judged by their channels.
void check_image_channels(const Image& img, const PreprocessSpec& spec, const std::string& where);

// Preprocesses `img` into out[0 .. S*S*C). Throws tg::Error prefixed with `where` when the image cannot be
// used (check_image_channels, pixel buffer not H*W*C, image smaller than the crop).
void preprocess_image(const Image& img, const PreprocessSpec& spec, AugmentRng& rng, float* out,
                      const std::string& where);

}  // namespace tg

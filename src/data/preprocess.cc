// Image preprocessing per dataset (specification and deliberate differences in preprocess.h).
#include "terngrad/data/preprocess.h"

#include <cmath>

#include "terngrad/core/error.h"
#include "terngrad/data/bilinear_resize.h"
#include "terngrad/data/dataset_info.h"

namespace tg {

PreprocessKind preprocess_kind_for(const std::string& dataset, PreprocessKind imagenet) {
  switch (parse_enum<Dataset>(dataset)) {
    case Dataset::kMnist:
    case Dataset::kFashionMnist:
      return PreprocessKind::kMnist;
    case Dataset::kCifar10:
      return PreprocessKind::kCifar10;
    case Dataset::kImagenet:
    case Dataset::kCustom:
      break;
  }
  TG_CHECK(imagenet == PreprocessKind::kAlexnet || imagenet == PreprocessKind::kInception,
           "ImageNet preprocessing '{}' is not one of alexnet, inception", enum_name(imagenet));
  return imagenet;
}

FloatImage to_float(const Image& img) {
  FloatImage f;
  f.height = img.height;
  f.width = img.width;
  f.channels = img.channels;
  f.data.resize(img.pixels.size());
  const float scale = 1.0f / 255.0f;
  for (size_t i = 0; i < img.pixels.size(); ++i) f.data[i] = static_cast<float>(img.pixels[i]) * scale;
  return f;
}

FloatImage crop(const FloatImage& img, int y0, int x0, int h, int w) {
  TG_CHECK(y0 >= 0 && x0 >= 0 && h > 0 && w > 0 && y0 + h <= img.height && x0 + w <= img.width,
           "crop {}x{} at ({}, {}) outside a {}x{} image", h, w, y0, x0, img.height, img.width);
  FloatImage out;
  out.height = h;
  out.width = w;
  out.channels = img.channels;
  out.data.resize(static_cast<size_t>(h) * w * img.channels);
  const size_t row = static_cast<size_t>(w) * img.channels;
  for (int y = 0; y < h; ++y)
    std::copy_n(&img.data[((static_cast<size_t>(y0) + y) * img.width + x0) * img.channels], row, &out.data[y * row]);
  return out;
}

FloatImage crop_or_pad(const FloatImage& img, int h, int w) {
  // TF: crop offsets max((in - target) / 2, 0), pad offsets max((target - in) / 2, 0), zero padding.
  FloatImage out;
  out.height = h;
  out.width = w;
  out.channels = img.channels;
  out.data.assign(static_cast<size_t>(h) * w * img.channels, 0.0f);
  const int crop_y = std::max((img.height - h) / 2, 0), crop_x = std::max((img.width - w) / 2, 0);
  const int pad_y = std::max((h - img.height) / 2, 0), pad_x = std::max((w - img.width) / 2, 0);
  const int ch = std::min(h, img.height), cw = std::min(w, img.width);
  for (int y = 0; y < ch; ++y)
    for (int x = 0; x < cw; ++x)
      for (int c = 0; c < img.channels; ++c) out.at(y + pad_y, x + pad_x, c) = img.at(y + crop_y, x + crop_x, c);
  return out;
}

FloatImage central_crop(const FloatImage& img, float fraction) {
  TG_CHECK(fraction > 0.0f && fraction <= 1.0f, "central_crop fraction {} outside (0, 1]", fraction);
  if (fraction == 1.0f) return img;
  // TF: start = int((size - size * fraction) / 2), kept size = size - 2 * start.
  const int y0 = static_cast<int>((img.height - img.height * static_cast<double>(fraction)) / 2);
  const int x0 = static_cast<int>((img.width - img.width * static_cast<double>(fraction)) / 2);
  return crop(img, y0, x0, img.height - 2 * y0, img.width - 2 * x0);
}

FloatImage resize_bilinear(const FloatImage& img, int h, int w) {
  TG_CHECK(h > 0 && w > 0, "resize to {}x{}", h, w);
  if (h == img.height && w == img.width) return img;
  FloatImage out;
  out.height = h;
  out.width = w;
  out.channels = img.channels;
  out.data.resize(static_cast<size_t>(h) * w * img.channels);
  bilinear_resize(img.data.data(), img.height, img.width, img.channels, h, w,
                  [&](size_t i, float v) { out.data[i] = v; });
  return out;
}

void flip_left_right(FloatImage* img) {
  const int C = img->channels;
  for (int y = 0; y < img->height; ++y)
    for (int x = 0; x < img->width / 2; ++x)
      for (int c = 0; c < C; ++c) std::swap(img->at(y, x, c), img->at(y, img->width - 1 - x, c));
}

void adjust_brightness(FloatImage* img, float delta) {
  for (float& v : img->data) v += delta;
}

void adjust_contrast(FloatImage* img, float factor) {
  const int C = img->channels;
  const size_t n = static_cast<size_t>(img->height) * img->width;
  for (int c = 0; c < C; ++c) {
    double sum = 0;
    for (size_t i = 0; i < n; ++i) sum += img->data[i * C + c];
    const float mean = static_cast<float>(sum / static_cast<double>(n));
    for (size_t i = 0; i < n; ++i) {
      float& v = img->data[i * C + c];
      v = (v - mean) * factor + mean;
    }
  }
}

namespace {

void rgb_to_hsv(float r, float g, float b, float* h, float* s, float* v) {
  const float mx = std::max({r, g, b}), mn = std::min({r, g, b}), d = mx - mn;
  *v = mx;
  *s = mx > 0.0f ? d / mx : 0.0f;
  float hh = 0.0f;
  if (d > 0.0f) {
    if (mx == r)
      hh = (g - b) / d;
    else if (mx == g)
      hh = 2.0f + (b - r) / d;
    else
      hh = 4.0f + (r - g) / d;
    hh /= 6.0f;
    if (hh < 0.0f) hh += 1.0f;
  }
  *h = hh;
}

void hsv_to_rgb(float h, float s, float v, float* r, float* g, float* b) {
  const float h6 = h * 6.0f;
  const int sector = static_cast<int>(std::floor(h6)) % 6;
  const float f = h6 - std::floor(h6);
  const float p = v * (1 - s), q = v * (1 - s * f), t = v * (1 - s * (1 - f));
  switch (sector < 0 ? sector + 6 : sector) {
    case 0:
      *r = v, *g = t, *b = p;
      break;
    case 1:
      *r = q, *g = v, *b = p;
      break;
    case 2:
      *r = p, *g = v, *b = t;
      break;
    case 3:
      *r = p, *g = q, *b = v;
      break;
    case 4:
      *r = t, *g = p, *b = v;
      break;
    default:
      *r = v, *g = p, *b = q;
      break;
  }
}

template <class F>
void map_hsv(FloatImage* img, F&& f) {
  if (img->channels != 3) return;  // colour adjustments do nothing to grayscale
  const size_t n = static_cast<size_t>(img->height) * img->width;
  for (size_t i = 0; i < n; ++i) {
    float* p = &img->data[3 * i];
    float h, s, v;
    rgb_to_hsv(p[0], p[1], p[2], &h, &s, &v);
    f(&h, &s, &v);
    hsv_to_rgb(h, s, v, &p[0], &p[1], &p[2]);
  }
}

}  // namespace

void adjust_saturation(FloatImage* img, float factor) {
  map_hsv(img, [factor](float*, float* s, float*) { *s = std::clamp(*s * factor, 0.0f, 1.0f); });
}

void adjust_hue(FloatImage* img, float delta) {
  map_hsv(img, [delta](float* h, float*, float*) {
    float x = std::fmod(*h + delta, 1.0f);
    *h = x < 0.0f ? x + 1.0f : x;
  });
}

void per_image_standardization(FloatImage* img) {
  const size_t n = img->data.size();
  double sum = 0, sq = 0;
  for (float v : img->data) sum += v, sq += static_cast<double>(v) * v;
  const double mean = sum / n;
  const double var = std::max(sq / n - mean * mean, 0.0);
  const double adjusted = std::max(std::sqrt(var), 1.0 / std::sqrt(static_cast<double>(n)));
  const float m = static_cast<float>(mean), inv = static_cast<float>(1.0 / adjusted);
  for (float& v : img->data) v = (v - m) * inv;
}

void clip01(FloatImage* img) {
  for (float& v : img->data) v = std::clamp(v, 0.0f, 1.0f);
}

CropWindow sample_distorted_crop(int height, int width, AugmentRng& rng, float min_object_covered, float min_aspect,
                                 float max_aspect, float min_area, float max_area, int max_attempts) {
  // TensorFlow's GenerateRandomCrop, with the whole image as the object box: coverage = crop area / image area.
  const float image_area = static_cast<float>(height) * width;
  const float lo_area = min_area * image_area, hi_area = max_area * image_area;
  for (int attempt = 0; attempt < max_attempts; ++attempt) {
    const float aspect = rng.uniform(min_aspect, max_aspect);
    int min_h = static_cast<int>(std::lround(std::sqrt(lo_area / aspect)));
    int max_h = static_cast<int>(std::lround(std::sqrt(hi_area / aspect)));
    if (std::lround(max_h * aspect) > width) max_h = static_cast<int>((width + 0.5f - 1e-7f) / aspect);
    max_h = std::min(max_h, height);
    min_h = std::min(min_h, max_h);
    int h = min_h;
    if (max_h > min_h) h = min_h + rng.below(max_h - min_h + 1);
    int w = static_cast<int>(std::lround(h * aspect));
    float area = static_cast<float>(h) * w;
    if (area < lo_area) {
      h += 1;
      w = static_cast<int>(std::lround(h * aspect));
      area = static_cast<float>(h) * w;
    }
    if (h <= 0 || w <= 0 || h > height || w > width || area < lo_area || area > hi_area) continue;
    if (area < min_object_covered * image_area) continue;
    const int y0 = rng.below(height - h + 1), x0 = rng.below(width - w + 1);
    return CropWindow{y0, x0, h, w};
  }
  return CropWindow{0, 0, height, width};
}

namespace {

void copy_out(const FloatImage& img, float* out) { std::copy(img.data.begin(), img.data.end(), out); }

void require_at_least(const FloatImage& img, int s, const std::string& where) {
  if (img.height < s || img.width < s)
    TG_THROW("{}: image {}x{} is smaller than the {}x{} crop", where, img.height, img.width, s, s);
}

}  // namespace

void check_image_channels(const Image& img, const PreprocessSpec& spec, const std::string& where) {
  if (spec.kind != PreprocessKind::kMnist && spec.kind != PreprocessKind::kCifar10) return;
  const int source = img.source_channels != 0 ? img.source_channels : img.channels;
  const bool gray = source == 1, want_gray = spec.kind == PreprocessKind::kMnist;
  if (gray == want_gray) return;
  throw DatasetMismatchError(fmt::format(
      "{}: the image has {} channel{} ({}) but --dataset {} needs {} ({}): the shards do not hold this dataset", where,
      source, source == 1 ? "" : "s", gray ? "grayscale" : "colour", want_gray ? "mnist/fashion_mnist" : "cifar10",
      want_gray ? 1 : 3, want_gray ? "grayscale" : "colour"));
}

void preprocess_image(const Image& img, const PreprocessSpec& spec, AugmentRng& rng, float* out,
                      const std::string& where) {
  const int S = spec.image_size;
  check_image_channels(img, spec, where);
  if (img.channels != spec.channels)
    TG_THROW("{}: image has {} channels, the dataset needs {}", where, img.channels, spec.channels);
  if (img.height <= 0 || img.width <= 0) TG_THROW("{}: empty image ({}x{})", where, img.height, img.width);
  // The pixel buffer must hold exactly H*W*C bytes before any crop reads it (a decoder bug or a hand-built
  // Image must not become an out-of-bounds read).
  int64_t expect = 0;
  if (__builtin_mul_overflow(static_cast<int64_t>(img.height), static_cast<int64_t>(img.width), &expect) ||
      __builtin_mul_overflow(expect, static_cast<int64_t>(img.channels), &expect) ||
      static_cast<uint64_t>(expect) != img.pixels.size())
    TG_THROW("{}: image of {}x{}x{} has {} bytes of pixels", where, img.height, img.width, img.channels,
             img.pixels.size());
  FloatImage f = to_float(img);
  switch (spec.kind) {
    case PreprocessKind::kMnist: {
      f = crop_or_pad(f, S, S);
      for (float& v : f.data) v = (v - 0.5f) * 2.0f;
      break;
    }
    case PreprocessKind::kCifar10: {
      require_at_least(f, S, where);
      if (spec.train) {
        const int y0 = rng.below(f.height - S + 1), x0 = rng.below(f.width - S + 1);
        f = crop(f, y0, x0, S, S);
        if (rng.uniform() < 0.5f) flip_left_right(&f);
        adjust_brightness(&f, rng.uniform(-63.0f / 255.0f, 63.0f / 255.0f));
        adjust_contrast(&f, rng.uniform(0.2f, 1.8f));
      } else {
        f = crop_or_pad(f, S, S);
      }
      per_image_standardization(&f);
      break;
    }
    case PreprocessKind::kAlexnet: {
      const int R = static_cast<int>(std::lround(256.0 * S / 224.0));
      f = resize_bilinear(f, R, R);
      const int off = (R - S) / 2;
      if (spec.train) {
        const int y0 = rng.below(R - S + 1), x0 = rng.below(R - S + 1);
        f = crop(f, y0, x0, S, S);
        if (rng.uniform() < 0.5f) flip_left_right(&f);
      } else {
        f = crop(f, off, off, S, S);
      }
      static const float kMean[3] = {123.68f, 116.78f, 103.94f};
      const int C = f.channels;
      for (size_t i = 0; i < f.data.size(); ++i) f.data[i] = f.data[i] * 255.0f - kMean[i % C];
      break;
    }
    case PreprocessKind::kInception: {
      if (spec.train) {
        CropWindow win = sample_distorted_crop(f.height, f.width, rng);
        f = resize_bilinear(crop(f, win.y0, win.x0, win.h, win.w), S, S);
        if (rng.uniform() < 0.5f) flip_left_right(&f);
        const bool ordering = rng.uniform() < 0.5f;
        const float brightness = rng.uniform(-32.0f / 255.0f, 32.0f / 255.0f);
        const float saturation = rng.uniform(0.5f, 1.5f);
        const float hue = rng.uniform(-0.2f, 0.2f);
        const float contrast = rng.uniform(0.5f, 1.5f);
        adjust_brightness(&f, brightness);
        if (!ordering) {
          adjust_saturation(&f, saturation);
          adjust_hue(&f, hue);
          adjust_contrast(&f, contrast);
        } else {
          adjust_contrast(&f, contrast);
          adjust_saturation(&f, saturation);
          adjust_hue(&f, hue);
        }
        clip01(&f);
      } else {
        f = resize_bilinear(central_crop(f, 0.875f), S, S);
      }
      for (float& v : f.data) v = (v - 0.5f) * 2.0f;
      break;
    }
  }
  TG_CHECK(f.height == S && f.width == S && f.channels == spec.channels, "preprocess produced {}x{}x{}", f.height,
           f.width, f.channels);
  copy_out(f, out);
}

}  // namespace tg

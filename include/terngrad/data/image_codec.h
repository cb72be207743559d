// Image decoding and encoding: PNG (libpng), JPEG (libjpeg-turbo's TurboJPEG API) and RAW uint8 pixels.
// Images are 8-bit, interleaved, row-major: pixels[(y * width + x) * channels + c] (HWC).
//
// `channels` arguments: 0 keeps the image's own channel count (1 or 3; PNG alpha is dropped), 1 asks for
// grayscale, 3 for RGB (gray is replicated; RGB->gray uses the JPEG/PNG library's luma conversion).
// Every failure throws tg::Error prefixed with `where` (e.g. "train-00000-of-00001:1234").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tg {

struct Image {
  int height = 0, width = 0, channels = 0;
  std::vector<uint8_t> pixels;  // (H, W, C)
  size_t size() const { return static_cast<size_t>(height) * width * channels; }
};

enum class ImageFormat { kPng, kJpeg, kRaw, kUnknown };

// From the image/format string ("png", "jpeg"/"JPEG"/"jpg", "RAW"); empty or unrecognized strings fall back
// to the magic bytes of `data` (PNG signature, JPEG SOI marker); kUnknown when neither says.
ImageFormat detect_image_format(const std::string& format, const std::string& data);

Image decode_png(const std::string& data, int channels, const std::string& where);
Image decode_jpeg(const std::string& data, int channels, const std::string& where);
// RAW: data holds height*width*stored_channels bytes.
Image decode_raw(const std::string& data, int64_t height, int64_t width, int64_t stored_channels, int channels,
                 const std::string& where);
// Dispatch on `format` (falling back to magic bytes). RAW needs height/width/stored_channels.
Image decode_image(const std::string& data, const std::string& format, int64_t height, int64_t width,
                   int64_t stored_channels, int channels, const std::string& where);

// Converts between 1 and 3 channels (gray replicated / ITU-R BT.601 luma); no-op when equal.
Image convert_channels(Image img, int channels);

std::string encode_png(const Image& img);
std::string encode_jpeg(const Image& img, int quality);  // 4:2:0 for RGB; quality 1..100

// Bilinear resize of a uint8 image with TensorFlow 1's resize_bilinear convention (align_corners=false,
// source = dest * in/out), rounded to nearest: what the converters use for --resize.
Image resize_bilinear_u8(const Image& img, int height, int width);

}  // namespace tg

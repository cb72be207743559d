// Image decoding and encoding: PNG (libpng), JPEG (libjpeg-turbo's TurboJPEG API) and RAW uint8 pixels.
// Images are 8-bit, interleaved, row-major: pixels[(y * width + x) * channels + c] (HWC).
//
// `channels` arguments: 0 keeps the image's own channel count (1 or 3; PNG alpha is dropped), 1 asks for
// grayscale, 3 for RGB (gray is replicated; RGB->gray uses the JPEG/PNG library's luma conversion).
// Every failure throws tg::Error prefixed with `where` (e.g. "train-00000-of-00001: record at byte offset 1234").
//
// The content decides the decoder: a PNG signature means PNG, a JPEG SOI marker (ff d8 ff) JPEG; image/format is
// only a hint (it wins for RAW when the bytes are exactly height*width*channels long). A disagreement between
// the two is logged once per shard (the part of `where` before its first ": ").
//
// CMYK and YCCK JPEGs decode to RGB as TensorFlow's decode_jpeg does (tensorflow/core/lib/jpeg/jpeg_mem.cc):
// with an Adobe APP14 marker the data is taken as inverted CMYK (Photoshop's convention), R = K*C/255, else as
// plain CMYK, R = (255-K)*(255-C)/255 (likewise G from M, B from Y), integer division.
//
// Limits: before any pixel buffer is allocated, the dimensions from the header (JPEG SOF, PNG IHDR, RAW
// image/height,width) are checked against DecodeOptions::max_image_pixels (--max_image_pixels); sizes are
// computed in int64 with overflow checks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "terngrad/core/enum_names.h"

namespace tg {

struct Image {
  int height = 0, width = 0, channels = 0;
  // Channels of the encoded image before any conversion: 1 grayscale, 3 colour (RGB, YCbCr, palette), 4 CMYK
  // or YCCK JPEG; 0 when not decoded from bytes. What the dataset's channel check looks at.
  int source_channels = 0;
  std::vector<uint8_t> pixels;  // (H, W, C)
  size_t size() const { return static_cast<size_t>(height) * width * channels; }
};

enum class ImageFormat { kPng, kJpeg, kRaw, kUnknown };
template <>
struct EnumNames<ImageFormat> : EnumNamesBase {
  static constexpr const char* kFlag = "image/format";
  static constexpr EnumName<ImageFormat> kList[] = {{ImageFormat::kPng, "PNG"},
                                                    {ImageFormat::kJpeg, "JPEG"},
                                                    {ImageFormat::kRaw, "RAW"},
                                                    {ImageFormat::kUnknown, "unknown"}};
};

enum class JpegDct { kFast, kAccurate };  // libjpeg's JDCT_IFAST / JDCT_ISLOW
// "fast" | "accurate", any case (also libjpeg's "integer_fast", "integer_accurate").
template <>
struct EnumNames<JpegDct> : EnumNamesBase {
  static constexpr const char* kFlag = "--jpeg_dct";
  static constexpr bool kIgnoreCase = true;
  static constexpr EnumName<JpegDct> kList[] = {{JpegDct::kFast, "fast"},
                                                {JpegDct::kAccurate, "accurate"},
                                                {JpegDct::kFast, "integer_fast", true},
                                                {JpegDct::kAccurate, "integer_accurate", true}};
};

constexpr int64_t kDefaultMaxImagePixels = int64_t{64} * 1024 * 1024;

struct DecodeOptions {
  // TensorFlow's decode_jpeg with dct_method '' (the reference's call) uses JDCT_IFAST: "fast" is the default.
  JpegDct jpeg_dct = JpegDct::kFast;
  int64_t max_image_pixels = kDefaultMaxImagePixels;  // height * width limit, checked from the header
};
// Process-wide defaults (the apps set them from --jpeg_dct and --max_image_pixels before reading starts);
// every decode_* call without explicit options uses them. Read atomically.
void set_default_decode_options(const DecodeOptions& o);
DecodeOptions default_decode_options();
// The apps' one call: --tfrecord_compression (set_default_tfrecord_compression), --jpeg_dct and
// --max_image_pixels (set_default_decode_options). Throws tg::Error naming a bad value's flag.
void set_data_flag_defaults(const std::string& tfrecord_compression, const std::string& jpeg_dct,
                            int64_t max_image_pixels);

// The format the bytes carry (PNG signature, JPEG SOI marker), kUnknown otherwise.
ImageFormat sniff_image_format(const std::string& data);

// What a PNG or JPEG header says, without decoding the pixels: what the class-folder converter scans first.
struct ImageHeader {
  ImageFormat format = ImageFormat::kUnknown;
  int height = 0, width = 0;
  int source_channels = 0;  // as Image::source_channels: 1 grayscale, 3 colour, 4 CMYK/YCCK JPEG
};
// Throws tg::Error prefixed with `where` when the bytes are neither PNG nor JPEG or their header is unreadable.
ImageHeader read_image_header(const std::string& data, const std::string& where);
// The image/format string ("png", "jpeg"/"JPEG"/"jpg", "RAW"); kUnknown when empty or unrecognized.
ImageFormat labelled_image_format(const std::string& format);
// The decoder to use: RAW when labelled RAW and the size fits height*width*stored_channels, else the sniffed
// format, else RAW when the size fits, else the label's format (whose decoder then reports the bytes).
ImageFormat detect_image_format(const std::string& format, const std::string& data, int64_t height = 0,
                                int64_t width = 0, int64_t stored_channels = 0);

// TensorFlow's CMYK -> RGB of n pixels (4 bytes in, 3 out; formulas above); adobe_inverted: the JPEG has an
// Adobe APP14 marker, which jpeg_has_adobe_marker tells as libjpeg's saw_Adobe_marker does.
void cmyk_to_rgb(const uint8_t* cmyk, size_t n, bool adobe_inverted, uint8_t* rgb);
bool jpeg_has_adobe_marker(const std::string& data);

Image decode_png(const std::string& data, int channels, const std::string& where,
                 const DecodeOptions& opt = default_decode_options());
Image decode_jpeg(const std::string& data, int channels, const std::string& where,
                  const DecodeOptions& opt = default_decode_options());
// RAW: data holds height*width*stored_channels bytes.
Image decode_raw(const std::string& data, int64_t height, int64_t width, int64_t stored_channels, int channels,
                 const std::string& where, const DecodeOptions& opt = default_decode_options());
// Dispatch by content (detect_image_format); a format/content mismatch is logged once per shard. RAW needs
// height/width/stored_channels.
Image decode_image(const std::string& data, const std::string& format, int64_t height, int64_t width,
                   int64_t stored_channels, int channels, const std::string& where,
                   const DecodeOptions& opt = default_decode_options());

// Converts between 1 and 3 channels (gray replicated / ITU-R BT.601 luma); no-op when equal.
Image convert_channels(Image img, int channels);

std::string encode_png(const Image& img);
std::string encode_jpeg(const Image& img, int quality);  // 4:2:0 for RGB; quality 1..100

// Bilinear resize of a uint8 image with TensorFlow 1's resize_bilinear convention (align_corners=false,
// source = dest * in/out), rounded to nearest: what the converters use for --resize.
Image resize_bilinear_u8(const Image& img, int height, int width);

}  // namespace tg

// PNG/JPEG/RAW decoding and encoding (contract in image_codec.h).
#include "terngrad/data/image_codec.h"

#include <png.h>
#include <spdlog/spdlog.h>
#include <turbojpeg.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_set>

#include "terngrad/core/error.h"
#include "terngrad/data/bilinear_resize.h"
#include "terngrad/data/tfrecord.h"

namespace tg {
namespace {

bool has_png_magic(const std::string& d) { return d.size() >= 8 && std::memcmp(d.data(), "\x89PNG\r\n\x1a\n", 8) == 0; }
bool has_jpeg_magic(const std::string& d) {
  return d.size() >= 3 && static_cast<uint8_t>(d[0]) == 0xff && static_cast<uint8_t>(d[1]) == 0xd8 &&
         static_cast<uint8_t>(d[2]) == 0xff;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

void check_channels_arg(int channels, const std::string& where) {
  if (channels != 0 && channels != 1 && channels != 3)
    TG_THROW("{}: cannot decode to {} channels (0, 1 or 3)", where, channels);
}

std::atomic<int> g_dct{static_cast<int>(JpegDct::kFast)};
std::atomic<int64_t> g_max_pixels{kDefaultMaxImagePixels};

// height * width (* channels) in int64, false on overflow or a non-positive factor.
bool checked_product(int64_t a, int64_t b, int64_t* out) {
  return a > 0 && b > 0 && !__builtin_mul_overflow(a, b, out);
}

// Refuses a header whose pixel count exceeds the limit, before anything is allocated.
void check_pixels(int64_t height, int64_t width, const DecodeOptions& opt, const char* what, const std::string& where) {
  int64_t pixels = 0;
  if (!checked_product(height, width, &pixels))
    TG_THROW("{}: {} of {}x{} pixels: impossible dimensions", where, what, height, width);
  if (height > INT32_MAX / 4 || width > INT32_MAX / 4 || pixels > opt.max_image_pixels)
    TG_THROW("{}: {} of {}x{} = {} pixels is larger than --max_image_pixels {}", where, what, height, width, pixels,
             opt.max_image_pixels);
}

}  // namespace

// True when the JPEG has an Adobe APP14 marker before its first scan, as libjpeg's saw_Adobe_marker (identifier
// "Adobe" and at least 12 bytes of data).
bool jpeg_has_adobe_marker(const std::string& d) {
  size_t i = 2;  // after SOI
  while (i + 4 <= d.size()) {
    if (static_cast<uint8_t>(d[i]) != 0xff) return false;
    const uint8_t marker = static_cast<uint8_t>(d[i + 1]);
    if (marker == 0xff) {  // fill byte
      ++i;
      continue;
    }
    if (marker == 0xda || marker == 0xd9) return false;  // SOS / EOI: no more header markers
    const size_t len = (static_cast<size_t>(static_cast<uint8_t>(d[i + 2])) << 8) | static_cast<uint8_t>(d[i + 3]);
    if (len < 2) return false;
    if (marker == 0xee && len - 2 >= 12 && i + 4 + 5 <= d.size() && d.compare(i + 4, 5, "Adobe") == 0) return true;
    i += 2 + len;
  }
  return false;
}

void cmyk_to_rgb(const uint8_t* cmyk, size_t n, bool adobe_inverted, uint8_t* rgb) {
  for (size_t i = 0; i < n; ++i, cmyk += 4, rgb += 3) {
    const int k = cmyk[3];
    for (int j = 0; j < 3; ++j)
      rgb[j] = static_cast<uint8_t>(adobe_inverted ? k * cmyk[j] / 255 : (255 - k) * (255 - cmyk[j]) / 255);
  }
}

namespace {

// Shards whose format/content mismatch was already logged.
std::mutex g_mismatch_mu;
std::unordered_set<std::string> g_mismatch_shards;

void note_format_mismatch(const std::string& where, const std::string& label, ImageFormat actual) {
  const std::string shard = where.substr(0, where.find(": "));
  {
    std::lock_guard<std::mutex> lock(g_mismatch_mu);
    if (g_mismatch_shards.size() > 100000) g_mismatch_shards.clear();  // bounded
    if (!g_mismatch_shards.insert(shard).second) return;
  }
  spdlog::warn("{}: image/format '{}' but the bytes are {}; decoding by content (logged once per shard)", where, label,
               enum_name(actual));
}

struct TjHandle {
  tjhandle h;
  explicit TjHandle(tjhandle x) : h(x) {}
  ~TjHandle() {
    if (h) tjDestroy(h);
  }
};

}  // namespace

void set_default_decode_options(const DecodeOptions& o) {
  TG_CHECK(o.max_image_pixels > 0, "--max_image_pixels {} must be positive", o.max_image_pixels);
  g_dct = static_cast<int>(o.jpeg_dct);
  g_max_pixels = o.max_image_pixels;
}

void set_data_flag_defaults(const std::string& tfrecord_compression, const std::string& jpeg_dct,
                            int64_t max_image_pixels) {
  if (max_image_pixels <= 0) TG_THROW("--max_image_pixels {} must be positive", max_image_pixels);
  DecodeOptions o;
  o.jpeg_dct = parse_enum<JpegDct>(jpeg_dct);
  o.max_image_pixels = max_image_pixels;
  const TfRecordCompression c = parse_enum<TfRecordCompression>(tfrecord_compression, "--tfrecord_compression");
  set_default_decode_options(o);
  set_default_tfrecord_compression(c);
}

DecodeOptions default_decode_options() {
  DecodeOptions o;
  o.jpeg_dct = static_cast<JpegDct>(g_dct.load());
  o.max_image_pixels = g_max_pixels.load();
  return o;
}

ImageFormat sniff_image_format(const std::string& data) {
  if (has_png_magic(data)) return ImageFormat::kPng;
  if (has_jpeg_magic(data)) return ImageFormat::kJpeg;
  return ImageFormat::kUnknown;
}

ImageHeader read_image_header(const std::string& data, const std::string& where) {
  ImageHeader h;
  h.format = sniff_image_format(data);
  if (h.format == ImageFormat::kPng) {
    png_image im;
    std::memset(&im, 0, sizeof(im));
    im.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&im, data.data(), data.size()))
      TG_THROW("{}: undecodable PNG ({})", where, im.message);
    h.height = static_cast<int>(std::min<png_uint_32>(im.height, INT_MAX));
    h.width = static_cast<int>(std::min<png_uint_32>(im.width, INT_MAX));
    h.source_channels = (im.format & PNG_FORMAT_FLAG_COLOR) != 0 ? 3 : 1;
    png_image_free(&im);
  } else if (h.format == ImageFormat::kJpeg) {
    TjHandle tj(tjInitDecompress());
    TG_CHECK(tj.h != nullptr, "tjInitDecompress failed");
    int subsamp = 0, colorspace = 0;
    if (tjDecompressHeader3(tj.h, reinterpret_cast<const unsigned char*>(data.data()),
                            static_cast<unsigned long>(data.size()), &h.width, &h.height, &subsamp, &colorspace) != 0)
      TG_THROW("{}: undecodable JPEG ({})", where, tjGetErrorStr2(tj.h));
    h.source_channels = colorspace == TJCS_GRAY ? 1 : (colorspace == TJCS_CMYK || colorspace == TJCS_YCCK) ? 4 : 3;
  } else {
    TG_THROW("{}: neither JPEG nor PNG", where);
  }
  // libjpeg ends data that stops before the frame header with a fake end marker: no size, not an error of its own.
  if (h.height <= 0 || h.width <= 0) TG_THROW("{}: the header ends before the image's size", where);
  return h;
}

ImageFormat labelled_image_format(const std::string& format) {
  const std::string f = lower(format);
  if (f == "png") return ImageFormat::kPng;
  if (f == "jpeg" || f == "jpg") return ImageFormat::kJpeg;
  if (f == "raw") return ImageFormat::kRaw;
  return ImageFormat::kUnknown;
}

ImageFormat detect_image_format(const std::string& format, const std::string& data, int64_t height, int64_t width,
                                int64_t stored_channels) {
  const ImageFormat labelled = labelled_image_format(format);
  int64_t pixels = 0, bytes = 0;
  const bool raw_fits = (stored_channels == 1 || stored_channels == 3) && checked_product(height, width, &pixels) &&
                        checked_product(pixels, stored_channels, &bytes) && static_cast<uint64_t>(bytes) == data.size();
  if (labelled == ImageFormat::kRaw && raw_fits) return ImageFormat::kRaw;
  const ImageFormat sniffed = sniff_image_format(data);
  if (sniffed != ImageFormat::kUnknown) return sniffed;
  if (raw_fits) return ImageFormat::kRaw;
  return labelled;
}

Image convert_channels(Image img, int channels) {
  if (channels == 0 || channels == img.channels) return img;
  Image out;
  out.height = img.height;
  out.width = img.width;
  out.channels = channels;
  out.source_channels = img.source_channels;
  out.pixels.resize(out.size());
  const size_t n = static_cast<size_t>(img.height) * img.width;
  if (img.channels == 1 && channels == 3) {
    for (size_t i = 0; i < n; ++i) out.pixels[3 * i] = out.pixels[3 * i + 1] = out.pixels[3 * i + 2] = img.pixels[i];
  } else if (img.channels == 3 && channels == 1) {
    for (size_t i = 0; i < n; ++i) {
      const uint8_t* p = &img.pixels[3 * i];
      out.pixels[i] = static_cast<uint8_t>((299 * p[0] + 587 * p[1] + 114 * p[2] + 500) / 1000);
    }
  } else {
    TG_THROW("cannot convert an image from {} to {} channels", img.channels, channels);
  }
  return out;
}

Image decode_png(const std::string& data, int channels, const std::string& where, const DecodeOptions& opt) {
  check_channels_arg(channels, where);
  png_image im;
  std::memset(&im, 0, sizeof(im));
  im.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&im, data.data(), data.size()))
    TG_THROW("{}: undecodable PNG ({})", where, im.message);
  try {
    check_pixels(im.height, im.width, opt, "PNG", where);
  } catch (...) {
    png_image_free(&im);
    throw;
  }
  const bool src_color = (im.format & PNG_FORMAT_FLAG_COLOR) != 0;
  int out_c = channels != 0 ? channels : (src_color ? 3 : 1);
  im.format = out_c == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
  Image img;
  img.height = static_cast<int>(im.height);
  img.width = static_cast<int>(im.width);
  img.channels = out_c;
  img.source_channels = src_color ? 3 : 1;
  img.pixels.resize(img.size());
  // Alpha, if any, is composited onto black (background nullptr): MNIST/CIFAR have none.
  if (!png_image_finish_read(&im, nullptr, img.pixels.data(), 0, nullptr)) {
    std::string msg = im.message;
    png_image_free(&im);
    TG_THROW("{}: undecodable PNG ({})", where, msg);
  }
  return img;
}

Image decode_jpeg(const std::string& data, int channels, const std::string& where, const DecodeOptions& opt) {
  check_channels_arg(channels, where);
  TjHandle tj(tjInitDecompress());
  TG_CHECK(tj.h != nullptr, "tjInitDecompress failed");
  const auto* src = reinterpret_cast<const unsigned char*>(data.data());
  const auto src_size = static_cast<unsigned long>(data.size());
  int w = 0, h = 0, subsamp = 0, colorspace = 0;
  if (tjDecompressHeader3(tj.h, src, src_size, &w, &h, &subsamp, &colorspace) != 0)
    TG_THROW("{}: undecodable JPEG ({})", where, tjGetErrorStr2(tj.h));
  check_pixels(h, w, opt, "JPEG", where);
  const int flags = opt.jpeg_dct == JpegDct::kFast ? TJFLAG_FASTDCT : TJFLAG_ACCURATEDCT;
  const bool cmyk = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
  const int out_c = channels != 0 ? channels : (colorspace == TJCS_GRAY ? 1 : 3);
  Image img;
  img.height = h;
  img.width = w;
  img.source_channels = colorspace == TJCS_GRAY ? 1 : cmyk ? 4 : 3;
  // Warnings (e.g. premature end of data on a mostly intact file) are errors here too: a half-grey training
  // image is worse than a clear message.
  if (cmyk) {
    // libjpeg turns YCCK into CMYK; the CMYK -> RGB step is TensorFlow's (see the header).
    std::vector<uint8_t> cmyk_px(static_cast<size_t>(w) * h * 4);
    if (tjDecompress2(tj.h, src, src_size, cmyk_px.data(), w, 0, h, TJPF_CMYK, flags) != 0)
      TG_THROW("{}: undecodable CMYK JPEG ({})", where, tjGetErrorStr2(tj.h));
    img.channels = 3;
    img.pixels.resize(img.size());
    cmyk_to_rgb(cmyk_px.data(), static_cast<size_t>(w) * h, jpeg_has_adobe_marker(data), img.pixels.data());
    return convert_channels(std::move(img), out_c);
  }
  img.channels = out_c;
  img.pixels.resize(img.size());
  if (tjDecompress2(tj.h, src, src_size, img.pixels.data(), w, 0, h, out_c == 3 ? TJPF_RGB : TJPF_GRAY, flags) != 0)
    TG_THROW("{}: undecodable JPEG ({})", where, tjGetErrorStr2(tj.h));
  return img;
}

Image decode_raw(const std::string& data, int64_t height, int64_t width, int64_t stored_channels, int channels,
                 const std::string& where, const DecodeOptions& opt) {
  check_channels_arg(channels, where);
  if (height <= 0 || width <= 0 || (stored_channels != 1 && stored_channels != 3))
    TG_THROW("{}: RAW image needs image/height, image/width > 0 and image/channels 1 or 3 (got {}x{}x{})", where,
             height, width, stored_channels);
  check_pixels(height, width, opt, "RAW image", where);   // also bounds height and width to int
  const int64_t want = height * width * stored_channels;  // no overflow: height * width <= max_image_pixels
  if (static_cast<uint64_t>(want) != data.size())
    TG_THROW("{}: RAW image of {}x{}x{} needs {} bytes, has {}", where, height, width, stored_channels, want,
             data.size());
  Image img;
  img.height = static_cast<int>(height);
  img.width = static_cast<int>(width);
  img.channels = static_cast<int>(stored_channels);
  img.source_channels = img.channels;
  img.pixels.assign(data.begin(), data.end());
  return convert_channels(std::move(img), channels);
}

Image decode_image(const std::string& data, const std::string& format, int64_t height, int64_t width,
                   int64_t stored_channels, int channels, const std::string& where, const DecodeOptions& opt) {
  const ImageFormat fmt = detect_image_format(format, data, height, width, stored_channels);
  const ImageFormat labelled = labelled_image_format(format);
  if (!format.empty() && fmt != ImageFormat::kUnknown && fmt != labelled) note_format_mismatch(where, format, fmt);
  switch (fmt) {
    case ImageFormat::kPng:
      return decode_png(data, channels, where, opt);
    case ImageFormat::kJpeg:
      return decode_jpeg(data, channels, where, opt);
    case ImageFormat::kRaw:
      return decode_raw(data, height, width, stored_channels, channels, where, opt);
    case ImageFormat::kUnknown:
      break;
  }
  TG_THROW("{}: undecodable image (image/format '{}', no PNG or JPEG signature, not a RAW image of the stated size)",
           where, format);
}

std::string encode_png(const Image& img) {
  TG_CHECK(img.channels == 1 || img.channels == 3, "encode_png: {} channels", img.channels);
  TG_CHECK(img.pixels.size() == img.size(), "encode_png: pixel buffer size");
  png_image im;
  std::memset(&im, 0, sizeof(im));
  im.version = PNG_IMAGE_VERSION;
  im.width = static_cast<png_uint_32>(img.width);
  im.height = static_cast<png_uint_32>(img.height);
  im.format = img.channels == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
  png_alloc_size_t bytes = 0;
  if (!png_image_write_to_memory(&im, nullptr, &bytes, 0, img.pixels.data(), 0, nullptr))
    TG_THROW("PNG encoding failed: {}", im.message);
  std::string out(bytes, '\0');
  if (!png_image_write_to_memory(&im, out.data(), &bytes, 0, img.pixels.data(), 0, nullptr))
    TG_THROW("PNG encoding failed: {}", im.message);
  out.resize(bytes);
  return out;
}

std::string encode_jpeg(const Image& img, int quality) {
  TG_CHECK(img.channels == 1 || img.channels == 3, "encode_jpeg: {} channels", img.channels);
  TG_CHECK(quality >= 1 && quality <= 100, "JPEG quality {} outside 1..100", quality);
  TjHandle tj(tjInitCompress());
  TG_CHECK(tj.h != nullptr, "tjInitCompress failed");
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  if (tjCompress2(tj.h, img.pixels.data(), img.width, 0, img.height, img.channels == 3 ? TJPF_RGB : TJPF_GRAY, &buf,
                  &size, img.channels == 3 ? TJSAMP_420 : TJSAMP_GRAY, quality, 0) != 0) {
    std::string msg = tjGetErrorStr2(tj.h);
    if (buf) tjFree(buf);
    TG_THROW("JPEG encoding failed: {}", msg);
  }
  std::string out(reinterpret_cast<const char*>(buf), size);
  tjFree(buf);
  return out;
}

Image resize_bilinear_u8(const Image& img, int height, int width) {
  TG_CHECK(height > 0 && width > 0, "resize to {}x{}", height, width);
  if (height == img.height && width == img.width) return img;
  Image out;
  out.height = height;
  out.width = width;
  out.channels = img.channels;
  out.pixels.resize(out.size());
  bilinear_resize(img.pixels.data(), img.height, img.width, img.channels, height, width, [&](size_t i, float v) {
    out.pixels[i] = static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L));
  });
  return out;
}

}  // namespace tg

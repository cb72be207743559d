// PNG/JPEG/RAW decoding and encoding (contract in image_codec.h).
#include "terngrad/data/image_codec.h"

#include <png.h>
#include <turbojpeg.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "terngrad/core/error.h"

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

struct TjHandle {
  tjhandle h;
  explicit TjHandle(tjhandle x) : h(x) {}
  ~TjHandle() {
    if (h) tjDestroy(h);
  }
};

}  // namespace

ImageFormat detect_image_format(const std::string& format, const std::string& data) {
  std::string f = lower(format);
  if (f == "png") return ImageFormat::kPng;
  if (f == "jpeg" || f == "jpg") return ImageFormat::kJpeg;
  if (f == "raw") return ImageFormat::kRaw;
  if (has_png_magic(data)) return ImageFormat::kPng;
  if (has_jpeg_magic(data)) return ImageFormat::kJpeg;
  return ImageFormat::kUnknown;
}

Image convert_channels(Image img, int channels) {
  if (channels == 0 || channels == img.channels) return img;
  Image out;
  out.height = img.height;
  out.width = img.width;
  out.channels = channels;
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

Image decode_png(const std::string& data, int channels, const std::string& where) {
  check_channels_arg(channels, where);
  png_image im;
  std::memset(&im, 0, sizeof(im));
  im.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&im, data.data(), data.size()))
    TG_THROW("{}: undecodable PNG ({})", where, im.message);
  const bool src_color = (im.format & PNG_FORMAT_FLAG_COLOR) != 0;
  int out_c = channels != 0 ? channels : (src_color ? 3 : 1);
  im.format = out_c == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
  Image img;
  img.height = static_cast<int>(im.height);
  img.width = static_cast<int>(im.width);
  img.channels = out_c;
  img.pixels.resize(PNG_IMAGE_SIZE(im));
  // Alpha, if any, is composited onto black (background nullptr): MNIST/CIFAR have none.
  if (!png_image_finish_read(&im, nullptr, img.pixels.data(), 0, nullptr)) {
    std::string msg = im.message;
    png_image_free(&im);
    TG_THROW("{}: undecodable PNG ({})", where, msg);
  }
  TG_CHECK(img.pixels.size() == img.size(), "{}: PNG size mismatch", where);
  return img;
}

Image decode_jpeg(const std::string& data, int channels, const std::string& where) {
  check_channels_arg(channels, where);
  TjHandle tj(tjInitDecompress());
  TG_CHECK(tj.h != nullptr, "tjInitDecompress failed");
  int w = 0, h = 0, subsamp = 0, colorspace = 0;
  if (tjDecompressHeader3(tj.h, reinterpret_cast<const unsigned char*>(data.data()),
                          static_cast<unsigned long>(data.size()), &w, &h, &subsamp, &colorspace) != 0)
    TG_THROW("{}: undecodable JPEG ({})", where, tjGetErrorStr2(tj.h));
  int out_c = channels != 0 ? channels : (colorspace == TJCS_GRAY ? 1 : 3);
  Image img;
  img.height = h;
  img.width = w;
  img.channels = out_c;
  img.pixels.resize(img.size());
  if (tjDecompress2(tj.h, reinterpret_cast<const unsigned char*>(data.data()), static_cast<unsigned long>(data.size()),
                    img.pixels.data(), w, 0, h, out_c == 3 ? TJPF_RGB : TJPF_GRAY, 0) != 0) {
    // Warnings (e.g. premature end of data on a mostly intact file) are errors here too: a half-grey
    // training image is worse than a clear message.
    TG_THROW("{}: undecodable JPEG ({})", where, tjGetErrorStr2(tj.h));
  }
  return img;
}

Image decode_raw(const std::string& data, int64_t height, int64_t width, int64_t stored_channels, int channels,
                 const std::string& where) {
  check_channels_arg(channels, where);
  if (height <= 0 || width <= 0 || (stored_channels != 1 && stored_channels != 3))
    TG_THROW("{}: RAW image needs image/height, image/width > 0 and image/channels 1 or 3 (got {}x{}x{})", where,
             height, width, stored_channels);
  const uint64_t want = static_cast<uint64_t>(height) * width * stored_channels;
  if (data.size() != want)
    TG_THROW("{}: RAW image of {}x{}x{} needs {} bytes, has {}", where, height, width, stored_channels, want,
             data.size());
  Image img;
  img.height = static_cast<int>(height);
  img.width = static_cast<int>(width);
  img.channels = static_cast<int>(stored_channels);
  img.pixels.assign(data.begin(), data.end());
  return convert_channels(std::move(img), channels);
}

Image decode_image(const std::string& data, const std::string& format, int64_t height, int64_t width,
                   int64_t stored_channels, int channels, const std::string& where) {
  switch (detect_image_format(format, data)) {
    case ImageFormat::kPng:
      return decode_png(data, channels, where);
    case ImageFormat::kJpeg:
      return decode_jpeg(data, channels, where);
    case ImageFormat::kRaw:
      return decode_raw(data, height, width, stored_channels, channels, where);
    case ImageFormat::kUnknown:
      break;
  }
  TG_THROW("{}: undecodable image (image/format '{}', no PNG or JPEG signature)", where, format);
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
  const float sy = static_cast<float>(img.height) / height, sx = static_cast<float>(img.width) / width;
  const int C = img.channels;
  for (int y = 0; y < height; ++y) {
    float fy = y * sy;
    int y0 = std::min(static_cast<int>(fy), img.height - 1), y1 = std::min(y0 + 1, img.height - 1);
    float wy = fy - y0;
    for (int x = 0; x < width; ++x) {
      float fx = x * sx;
      int x0 = std::min(static_cast<int>(fx), img.width - 1), x1 = std::min(x0 + 1, img.width - 1);
      float wx = fx - x0;
      for (int c = 0; c < C; ++c) {
        auto at = [&](int yy, int xx) { return static_cast<float>(img.pixels[(static_cast<size_t>(yy) * img.width + xx) * C + c]); };
        float top = at(y0, x0) + (at(y0, x1) - at(y0, x0)) * wx;
        float bot = at(y1, x0) + (at(y1, x1) - at(y1, x0)) * wx;
        float v = top + (bot - top) * wy;
        out.pixels[(static_cast<size_t>(y) * width + x) * C + c] = static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L));
      }
    }
  }
  return out;
}

}  // namespace tg

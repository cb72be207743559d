// Decoders against known pixels (hand-built PNG files, JPEG round trips), format dispatch, RAW, bad bytes.
#include <gtest/gtest.h>

#include <cstdlib>

#include "common/images.h"
#include "terngrad/core/error.h"
#include "terngrad/data/image_codec.h"

using namespace tg;
using tg::testing::image_of;

namespace {

// The bytes of a string literal without its terminating NUL (a literal with embedded zero bytes cannot go
// through strlen, and a hand-counted length drifts from the literal).
template <size_t N>
std::string literal_bytes(const char (&s)[N]) {
  return std::string(s, N - 1);
}

// PNG files built byte by byte (zlib + chunk CRCs) outside libpng: 2x2 gray [[0,255],[17,200]] and 3x2 RGB
// [[red, green, blue], [(10,20,30), (40,50,60), (70,80,90)]].
const std::string kGrayPng = literal_bytes(
    "\x89\x50\x4e\x47\x0d\x0a\x1a\x0a\x00\x00\x00\x0d\x49\x48\x44\x52\x00\x00\x00\x02\x00\x00\x00\x02\x08\x00\x00"
    "\x00\x00\x57\xdd\x52\xf8\x00\x00\x00\x0e\x49\x44\x41\x54\x78\x9c\x63\x60\xf8\xcf\x20\x78\x02\x00\x04\xec\x01"
    "\xd9\x11\x83\x04\x03\x00\x00\x00\x00\x49\x45\x4e\x44\xae\x42\x60\x82");
const std::string kRgbPng = literal_bytes(
    "\x89\x50\x4e\x47\x0d\x0a\x1a\x0a\x00\x00\x00\x0d\x49\x48\x44\x52\x00\x00\x00\x03\x00\x00\x00\x02\x08\x02\x00"
    "\x00\x00\x12\x16\xf1\x4d\x00\x00\x00\x17\x49\x44\x41\x54\x78\x9c\x63\xf8\xcf\xc0\xc0\x00\xc1\x5c\x22\x72\x1a"
    "\x46\x36\x6e\x01\x51\x00\x33\x59\x04\xc0\xe4\x24\x98\xcb\x00\x00\x00\x00\x49\x45\x4e\x44\xae\x42\x60\x82");

Image pattern(int h, int w, int c) {  // smooth, so JPEG keeps it close
  return image_of(h, w, c, [](int y, int x, int k) { return static_cast<uint8_t>(40 + y + x + k * 20); });
}

}  // namespace

TEST(ImageDecode, PngKnownPixels) {
  Image g = decode_png(kGrayPng, 0, "gray");
  EXPECT_EQ(g.height, 2);
  EXPECT_EQ(g.width, 2);
  EXPECT_EQ(g.channels, 1);
  EXPECT_EQ(g.pixels, (std::vector<uint8_t>{0, 255, 17, 200}));
  Image g3 = decode_png(kGrayPng, 3, "gray");
  EXPECT_EQ(g3.channels, 3);
  EXPECT_EQ(g3.pixels[3 * 2 + 0], 17);
  EXPECT_EQ(g3.pixels[3 * 2 + 2], 17);

  Image c = decode_png(kRgbPng, 0, "rgb");
  EXPECT_EQ(c.height, 2);
  EXPECT_EQ(c.width, 3);
  EXPECT_EQ(c.channels, 3);
  EXPECT_EQ(c.pixels, (std::vector<uint8_t>{255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 20, 30, 40, 50, 60, 70, 80, 90}));
}

TEST(ImageDecode, PngEncodeRoundTripIsExact) {
  for (int c : {1, 3}) {
    Image img = pattern(28, 17, c);
    std::string bytes = encode_png(img);
    EXPECT_EQ(detect_image_format("", bytes), ImageFormat::kPng);
    Image back = decode_image(bytes, "png", 0, 0, 0, 0, "rt");
    EXPECT_EQ(back.height, 28);
    EXPECT_EQ(back.width, 17);
    EXPECT_EQ(back.channels, c);
    EXPECT_EQ(back.pixels, img.pixels);
  }
}

TEST(ImageDecode, JpegRoundTripIsClose) {
  for (int c : {1, 3}) {
    Image img = pattern(64, 48, c);
    std::string bytes = encode_jpeg(img, 100);
    EXPECT_EQ(detect_image_format("", bytes), ImageFormat::kJpeg);
    Image back = decode_image(bytes, "JPEG", 0, 0, 0, 0, "rt");
    ASSERT_EQ(back.channels, c);
    ASSERT_EQ(back.height, 64);
    ASSERT_EQ(back.width, 48);
    int worst = 0;
    for (size_t i = 0; i < img.pixels.size(); ++i) worst = std::max(worst, std::abs(back.pixels[i] - img.pixels[i]));
    // Quality 100: gray is near-lossless; RGB loses a little to 4:2:0 chroma subsampling.
    EXPECT_LE(worst, c == 1 ? 2 : 12) << "channels " << c;
  }
  // Constant colour survives 4:2:0 exactly up to rounding.
  Image flat;
  flat.height = flat.width = 16;
  flat.channels = 3;
  for (int i = 0; i < 256; ++i) flat.pixels.insert(flat.pixels.end(), {200, 100, 50});
  Image back = decode_jpeg(encode_jpeg(flat, 95), 3, "flat");
  for (size_t i = 0; i < back.pixels.size(); ++i) EXPECT_NEAR(back.pixels[i], flat.pixels[i], 2);
  // Gray output from an RGB JPEG.
  Image gray = decode_jpeg(encode_jpeg(flat, 95), 1, "flat");
  EXPECT_EQ(gray.channels, 1);
  EXPECT_NEAR(gray.pixels[0], (299 * 200 + 587 * 100 + 114 * 50) / 1000, 3);
}

TEST(ImageDecode, RawUsesHeightWidthChannels) {
  std::string data = {1, 2, 3, 4, 5, 6};
  Image img = decode_image(data, "RAW", 2, 1, 3, 0, "raw");
  EXPECT_EQ(img.height, 2);
  EXPECT_EQ(img.width, 1);
  EXPECT_EQ(img.channels, 3);
  EXPECT_EQ(img.pixels, (std::vector<uint8_t>{1, 2, 3, 4, 5, 6}));
  Image gray = decode_raw(std::string{10, 20}, 1, 2, 1, 3, "raw");
  EXPECT_EQ(gray.pixels, (std::vector<uint8_t>{10, 10, 10, 20, 20, 20}));
  EXPECT_THROW(decode_raw(data, 2, 2, 3, 0, "raw"), Error);  // wrong size
  EXPECT_THROW(decode_raw(data, 0, 2, 3, 0, "raw"), Error);  // missing height
}

TEST(ImageDecode, DispatchFallsBackToMagicBytes) {
  EXPECT_EQ(detect_image_format("jpeg", kGrayPng), ImageFormat::kPng);  // the content wins (issue 10)
  EXPECT_EQ(detect_image_format("", kGrayPng), ImageFormat::kPng);
  EXPECT_EQ(detect_image_format("bmp", kGrayPng), ImageFormat::kPng);
  EXPECT_EQ(detect_image_format("", "hello"), ImageFormat::kUnknown);
  Image g = decode_image(kGrayPng, "", 0, 0, 0, 0, "magic");
  EXPECT_EQ(g.pixels[3], 200);
}

TEST(ImageDecode, UndecodableBytesNameTheRecord) {
  std::string bad_png = kGrayPng.substr(0, 40);
  for (auto [bytes, fmt] :
       {std::pair<std::string, std::string>{bad_png, "png"}, {"\xff\xd8\xff garbage", "jpeg"}, {"hello", ""}}) {
    try {
      decode_image(bytes, fmt, 0, 0, 0, 0, "train-00000-of-00001:96");
      FAIL() << "expected an error for format '" << fmt << "'";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("train-00000-of-00001:96: undecodable", 0), 0u) << e.what();
    }
  }
}

TEST(ImageResize, BilinearU8HandCase) {
  Image img;
  img.height = 1;
  img.width = 2;
  img.channels = 1;
  img.pixels = {0, 100};
  // TF1 convention: out x maps to src x * 2/4 = {0, 0.5, 1, 1.5} -> {0, 50, 100, 100 (clamped)}.
  Image r = resize_bilinear_u8(img, 1, 4);
  EXPECT_EQ(r.pixels, (std::vector<uint8_t>{0, 50, 100, 100}));
}

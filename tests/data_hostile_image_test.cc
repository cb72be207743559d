// Images that lie (issue 10): decoding by content with image/format only a hint (mismatch logged once per
// shard), CMYK/YCCK JPEGs as TensorFlow converts them, --jpeg_dct, --max_image_pixels checked from the header
// (JPEG SOF, PNG IHDR, RAW dims) before allocating, RAW sizes that overflow, shards whose channels contradict
// --dataset; the crafted records of tests/data/ end as one clear error (or a skip) through the input pipeline.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <turbojpeg.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "common/files.h"
#include "common/images.h"
#include "terngrad/core/error.h"
#include "terngrad/data/converters.h"
#include "terngrad/data/example.h"
#include "terngrad/data/image_codec.h"
#include "terngrad/data/input_pipeline.h"
#include "terngrad/data/preprocess.h"
#include "terngrad/data/tfrecord.h"

namespace fs = std::filesystem;
using namespace tg;
using tg::testing::fixture;
using tg::testing::image_of;
using tg::testing::temp_dir;

namespace {

Image solid_blocks(int h, int w, int c) {  // four flat quadrants: JPEG keeps flat areas nearly exact
  static const uint8_t kColours[4][3] = {{200, 40, 30}, {20, 180, 60}, {30, 60, 220}, {250, 250, 120}};
  return image_of(h, w, c, [&](int y, int x, int k) { return kColours[(y >= h / 2) * 2 + (x >= w / 2)][k]; });
}

// CMYK JPEG through TurboJPEG (TJPF_CMYK; libjpeg writes it as YCCK with an Adobe APP14 marker).
std::string encode_cmyk(const std::vector<uint8_t>& cmyk, int h, int w) {
  tjhandle tj = tjInitCompress();
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  EXPECT_EQ(tjCompress2(tj, cmyk.data(), w, 0, h, TJPF_CMYK, &buf, &size, TJSAMP_444, 100, 0), 0) << tjGetErrorStr2(tj);
  std::string out(reinterpret_cast<const char*>(buf), size);
  tjFree(buf);
  tjDestroy(tj);
  return out;
}

// The JPEG without its APP14 (Adobe) segments.
std::string strip_app14(const std::string& j) {
  std::string out = j.substr(0, 2);
  size_t i = 2;
  while (i + 4 <= j.size() && static_cast<uint8_t>(j[i]) == 0xff && static_cast<uint8_t>(j[i + 1]) != 0xda) {
    const size_t len = (static_cast<uint8_t>(j[i + 2]) << 8) | static_cast<uint8_t>(j[i + 3]);
    if (static_cast<uint8_t>(j[i + 1]) != 0xee) out += j.substr(i, 2 + len);
    i += 2 + len;
  }
  return out + j.substr(i);
}

int max_diff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  int worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return a.size() == b.size() ? worst : 1000;
}

std::string what_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

// PNG bytes with the given IHDR size and a (never inflated) IDAT.
std::string png_header_only(uint32_t w, uint32_t h) {
  auto be32 = [](uint32_t v) {
    return std::string{static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
                       static_cast<char>(v)};
  };
  auto chunk = [&](const std::string& type, const std::string& data) {
    std::string td = type + data;
    return be32(static_cast<uint32_t>(data.size())) + td +
           be32(static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(td.data()), td.size())));
  };
  std::string ihdr = be32(w) + be32(h) + std::string("\x08\x02\x00\x00\x00", 5);
  return std::string("\x89PNG\r\n\x1a\n", 8) + chunk("IHDR", ihdr) + chunk("IDAT", std::string("\x78\x9c", 2)) +
         chunk("IEND", "");
}

struct LogCapture {
  std::ostringstream out;
  std::shared_ptr<spdlog::logger> old = spdlog::default_logger();
  LogCapture() {
    auto logger = std::make_shared<spdlog::logger>("capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(out));
    spdlog::set_default_logger(logger);
  }
  ~LogCapture() { spdlog::set_default_logger(old); }
  int count(const std::string& s) const {
    int n = 0;
    const std::string text = out.str();
    for (size_t p = text.find(s); p != std::string::npos; p = text.find(s, p + 1)) ++n;
    return n;
  }
};

}  // namespace

TEST(HostileImages, ContentDecidesTheDecoderAndMismatchesAreLoggedOncePerShard) {
  const Image rgb = solid_blocks(8, 8, 3);
  const std::string png = encode_png(rgb), jpeg = encode_jpeg(rgb, 95);
  EXPECT_EQ(detect_image_format("jpeg", png), ImageFormat::kPng);
  EXPECT_EQ(detect_image_format("png", jpeg), ImageFormat::kJpeg);
  EXPECT_EQ(detect_image_format("RAW", png), ImageFormat::kPng);  // RAW label, but the size does not fit
  // RAW pixels that happen to start like a JPEG stay RAW when labelled RAW with a fitting size...
  const std::string raw_ffd8("\xff\xd8\xff\x10\x20\x30", 6);
  EXPECT_EQ(detect_image_format("RAW", raw_ffd8, 1, 2, 3), ImageFormat::kRaw);
  // ... and unlabelled bytes of exactly height*width*channels are RAW.
  EXPECT_EQ(detect_image_format("png", std::string(12, '\x01'), 2, 2, 3), ImageFormat::kRaw);
  EXPECT_EQ(detect_image_format("", std::string(12, '\x01')), ImageFormat::kUnknown);

  LogCapture log;
  for (int i = 0; i < 5; ++i) {
    Image a = decode_image(png, "jpeg", 8, 8, 3, 0, "shardA: record at byte offset " + std::to_string(i));
    EXPECT_EQ(a.pixels, rgb.pixels);
    Image b = decode_image(jpeg, "png", 8, 8, 3, 0, "shardB: record at byte offset " + std::to_string(i));
    EXPECT_EQ(b.pixels, decode_jpeg(jpeg, 0, "j").pixels);
  }
  decode_image(png, "png", 8, 8, 3, 0, "shardC: record at byte offset 0");  // agreeing: nothing logged
  EXPECT_EQ(log.count("logged once per shard"), 2) << log.out.str();
  EXPECT_EQ(log.count("shardA: record at byte offset 0: image/format 'jpeg' but the bytes are PNG"), 1)
      << log.out.str();
  EXPECT_EQ(log.count("shardB"), 1) << log.out.str();
}

TEST(HostileImages, CmykAndYcckJpegsBecomeRgbAsTensorFlowConvertsThem) {
  const int h = 16, w = 16;
  const Image want = solid_blocks(h, w, 3);
  // Inverted (Adobe) data: TF's R = K*C/255. With K = 255 stored, R = C: store C,M,Y = R,G,B.
  std::vector<uint8_t> inv(static_cast<size_t>(h) * w * 4);
  for (int i = 0; i < h * w; ++i) {
    for (int k = 0; k < 3; ++k) inv[4 * i + k] = want.pixels[3 * i + k];
    inv[4 * i + 3] = 255;
  }
  const std::string adobe = encode_cmyk(inv, h, w);
  ASSERT_NE(adobe.find("Adobe"), std::string::npos) << "libjpeg writes an APP14 marker for CMYK";
  int ww, hh, sub, cs;
  tjhandle tj = tjInitDecompress();
  ASSERT_EQ(
      tjDecompressHeader3(tj, reinterpret_cast<const unsigned char*>(adobe.data()), adobe.size(), &ww, &hh, &sub, &cs),
      0);
  tjDestroy(tj);
  EXPECT_TRUE(cs == TJCS_YCCK || cs == TJCS_CMYK) << cs;
  for (int channels : {0, 3}) {
    Image img = decode_image(adobe, "jpeg", 0, 0, 0, channels, "cmyk");
    ASSERT_EQ(img.channels, 3);
    EXPECT_EQ(img.source_channels, 4);
    EXPECT_LE(max_diff(img.pixels, want.pixels), 3);
  }
  Image gray = decode_jpeg(adobe, 1, "cmyk");  // RGB, then luma
  EXPECT_EQ(gray.channels, 1);
  EXPECT_EQ(gray.pixels, convert_channels(decode_jpeg(adobe, 3, "cmyk"), 1).pixels);

  // Without the Adobe marker the data is plain CMYK: R = (255-K)(255-C)/255 (TurboJPEG writes CMYK only as
  // YCCK with the marker, so the formulas are checked on hand values, TF's integer arithmetic).
  EXPECT_TRUE(jpeg_has_adobe_marker(adobe));
  EXPECT_FALSE(jpeg_has_adobe_marker(strip_app14(adobe)));
  EXPECT_FALSE(jpeg_has_adobe_marker(encode_jpeg(want, 90)));
  const uint8_t px[8] = {200, 100, 0, 128, 255, 255, 255, 0};
  uint8_t out[6];
  cmyk_to_rgb(px, 2, true, out);
  EXPECT_EQ(std::vector<uint8_t>(out, out + 6), (std::vector<uint8_t>{200 * 128 / 255, 100 * 128 / 255, 0, 0, 0, 0}));
  cmyk_to_rgb(px, 2, false, out);
  EXPECT_EQ(std::vector<uint8_t>(out, out + 6),
            (std::vector<uint8_t>{127 * 55 / 255, 127 * 155 / 255, 127 * 255 / 255, 0, 0, 0}));
}

TEST(HostileImages, JpegDctDefaultIsTensorFlowsFastAndAccurateDiffers) {
  EXPECT_EQ(default_decode_options().jpeg_dct, JpegDct::kFast);
  EXPECT_EQ(parse_enum<JpegDct>("accurate"), JpegDct::kAccurate);
  EXPECT_EQ(parse_enum<JpegDct>("INTEGER_FAST"), JpegDct::kFast);
  EXPECT_THROW(parse_enum<JpegDct>("float"), Error);
  Image img;
  img.height = img.width = 64;
  img.channels = 3;
  for (int i = 0; i < 64 * 64 * 3; ++i) img.pixels.push_back(static_cast<uint8_t>((i * 7919 + (i / 192) * 31) % 256));
  const std::string j = encode_jpeg(img, 98);
  DecodeOptions fast, accurate;
  accurate.jpeg_dct = JpegDct::kAccurate;
  const Image f = decode_jpeg(j, 3, "dct", fast), a = decode_jpeg(j, 3, "dct", accurate);
  EXPECT_EQ(decode_jpeg(j, 3, "dct").pixels, f.pixels);  // the default is fast
  EXPECT_NE(f.pixels, a.pixels);                         // the flag reaches libjpeg
  EXPECT_LE(max_diff(f.pixels, a.pixels), 40);
}

TEST(HostileImages, MaxImagePixelsIsCheckedFromTheHeader) {
  // tests/data/jpeg_bomb.tfrecord: a JPEG header of 32000 x 32000 x 3 (3.07 GB decoded).
  const auto recs = read_all_tfrecords(fixture("jpeg_bomb.tfrecord").string());
  ASSERT_EQ(recs.size(), 1u);
  ImageExample ex = parse_image_example(recs[0], "bomb");
  std::string e = what_of([&] { decode_image(ex.encoded, ex.format, ex.height, ex.width, ex.channels, 3, "bomb:0"); });
  EXPECT_EQ(e, "bomb:0: JPEG of 32000x32000 = 1024000000 pixels is larger than --max_image_pixels 67108864");
  // PNG: the IHDR says 20000 x 20000.
  e = what_of([&] { decode_image(png_header_only(20000, 20000), "png", 0, 0, 0, 3, "p"); });
  EXPECT_NE(e.find("p: PNG of 20000x20000 = 400000000 pixels is larger than --max_image_pixels"), std::string::npos)
      << e;
  // RAW: the dims.
  DecodeOptions small;
  small.max_image_pixels = 10;
  e = what_of([&] { decode_raw(std::string(12, '\0'), 3, 4, 1, 0, "r", small); });
  EXPECT_NE(e.find("r: RAW image of 3x4 = 12 pixels is larger than --max_image_pixels 10"), std::string::npos) << e;
  EXPECT_NO_THROW(decode_raw(std::string(12, '\0'), 3, 4, 1, 0, "r"));
  EXPECT_THROW(decode_png(encode_png(solid_blocks(4, 4, 1)), 0, "p", small), Error);
  EXPECT_THROW(decode_jpeg(encode_jpeg(solid_blocks(4, 4, 3), 90), 0, "j", small), Error);
}

TEST(HostileImages, RawSizesThatOverflowAreRefusedNamingTheRecord) {
  // tests/data/raw_overflow.tfrecord (175 bytes): 2 bytes claimed as 2 x 3074457345618258603 x 3, a product
  // that wraps to 2 in uint64.
  const auto recs = read_all_tfrecords(fixture("raw_overflow.tfrecord").string());
  ASSERT_EQ(recs.size(), 1u);
  ImageExample ex = parse_image_example(recs[0], "raw");
  ASSERT_EQ(ex.encoded.size(), 2u);
  const std::string e =
      what_of([&] { decode_image(ex.encoded, ex.format, ex.height, ex.width, ex.channels, 3, "f: record at 0"); });
  EXPECT_EQ(e.rfind("f: record at 0: RAW image of 2x3074457345618258603", 0), 0u) << e;
  EXPECT_THROW(decode_raw("ab", INT64_MAX, INT64_MAX, 3, 0, "r"), Error);
  EXPECT_THROW(decode_raw("ab", int64_t{1} << 32, 1, 1, 0, "r"), Error);
  // An Image whose buffer does not hold H*W*C bytes never reaches a crop.
  Image lie;
  lie.height = 6;
  lie.width = 1 << 20;
  lie.channels = 3;
  lie.pixels = {1, 2};
  PreprocessSpec spec{PreprocessKind::kCifar10, 24, 3, false};
  AugmentRng rng(1, 0, 0, 0);
  std::vector<float> out(24 * 24 * 3);
  EXPECT_NE(
      what_of([&] { preprocess_image(lie, spec, rng, out.data(), "w"); }).find("w: image of 6x1048576x3 has 2 bytes"),
      std::string::npos);
}

TEST(HostileImages, ChannelsMustMatchTheDataset) {
  AugmentRng rng(1, 0, 0, 0);
  std::vector<float> out(32 * 32 * 3);
  // A grayscale source decoded to 3 channels (as the pipeline asks) is still refused by cifar10.
  Image gray_as_rgb = decode_png(encode_png(solid_blocks(32, 32, 1)), 3, "g");
  EXPECT_EQ(gray_as_rgb.source_channels, 1);
  PreprocessSpec cifar{PreprocessKind::kCifar10, 24, 3, true};
  try {
    preprocess_image(gray_as_rgb, cifar, rng, out.data(), "fmnist-00000: record at byte offset 0");
    FAIL();
  } catch (const DatasetMismatchError& e) {
    EXPECT_EQ(std::string(e.what()),
              "fmnist-00000: record at byte offset 0: the image has 1 channel (grayscale) but --dataset cifar10 needs "
              "3 (colour): the shards do not hold this dataset");
  }
  PreprocessSpec mnist{PreprocessKind::kMnist, 28, 1, true};
  Image rgb_as_gray = decode_png(encode_png(solid_blocks(28, 28, 3)), 1, "c");
  EXPECT_THROW(preprocess_image(rgb_as_gray, mnist, rng, out.data(), "c"), DatasetMismatchError);
  // ImageNet takes grayscale (and CMYK) JPEGs as RGB, as the reference did.
  PreprocessSpec inception{PreprocessKind::kInception, 32, 3, false};
  EXPECT_NO_THROW(preprocess_image(gray_as_rgb, inception, rng, out.data(), "i"));
  // Hand-built images (no source) are judged by their channels.
  EXPECT_NO_THROW(preprocess_image(solid_blocks(32, 32, 3), cifar, rng, out.data(), "h"));
}

namespace {

std::string gray_png_example(int label) {
  ImageExample ex;
  ex.encoded = encode_png(solid_blocks(28, 28, 1));
  ex.format = "png";
  ex.label = label;
  ex.height = ex.width = 28;
  ex.channels = 1;
  return build_image_example(ex);
}

// Runs an eval pipeline to the end; returns the error, or "" and the examples seen.
std::string run_eval(const fs::path& dir, const std::string& dataset, bool skip, int64_t* seen, int64_t* skipped) {
  PipelineOptions o;
  o.data_dir = dir.string();
  o.subset = "test";
  o.dataset = dataset;
  o.batch_size = 4;
  o.train = false;
  o.data.skip_corrupt_records = skip;
  o.data.max_corrupt_fraction = 0.5;  // one crafted record among a few good ones
  *seen = 0;
  try {
    InputPipeline p(o);
    Batch b;
    while (p.next(&b)) *seen += b.count;
    *skipped = p.skipped_records();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(HostileImages, CraftedRecordsThroughThePipelineEndAsOneLine) {
  for (const char* bad : {"raw_overflow.tfrecord", "jpeg_bomb.tfrecord"}) {
    fs::path dir = temp_dir("pipeline");
    {
      TfRecordWriter w((dir / "test-00000-of-00001").string());
      w.write(gray_png_example(1));
      for (const auto& r : read_all_tfrecords(fixture(bad).string())) w.write(r);
      w.write(gray_png_example(2));
      w.close();
    }
    // Without skipping: one error naming the file and the crafted record's offset; with it: counted, skipped.
    int64_t seen = 0, skipped = 0;
    std::string e = run_eval(dir, "mnist", false, &seen, &skipped);
    EXPECT_NE(e.find("test-00000-of-00001: record at byte offset"), std::string::npos) << bad << ": " << e;
    EXPECT_TRUE(e.find("--max_image_pixels") != std::string::npos ||
                e.find("RAW image of 2x3074457345618258603") != std::string::npos)
        << bad << ": " << e;
    e = run_eval(dir, "mnist", true, &seen, &skipped);
    EXPECT_EQ(e, "") << bad;
    EXPECT_EQ(seen, 2) << bad;
    EXPECT_EQ(skipped, 1) << bad;
    fs::remove_all(dir);
  }
}

TEST(HostileImages, FashionMnistShardsWithCifar10AreRefused) {
  fs::path dir = temp_dir("mismatch");
  {
    // One record: with several, the preprocessing threads race and any of them may be the one reported.
    TfRecordWriter w((dir / "test-00000-of-00001").string());
    w.write(gray_png_example(0));
    w.close();
  }
  int64_t seen = 0, skipped = 0;
  const std::string e = run_eval(dir, "cifar10", false, &seen, &skipped);
  EXPECT_NE(e.find("test-00000-of-00001: record at byte offset 0: a 1-channel image where cifar10 has 3-channel "
                   "images"),
            std::string::npos)
      << e;
  fs::remove_all(dir);
}

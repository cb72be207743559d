// CRC-32C vectors, TFRecord framing round trips and corruption handling, tf.Example build/parse.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "common/files.h"
#include "example.pb.h"
#include "terngrad/core/error.h"
#include "terngrad/data/crc32c.h"
#include "terngrad/data/example.h"
#include "terngrad/data/tfrecord.h"

namespace fs = std::filesystem;
using namespace tg;
using tg::testing::dump;
using tg::testing::slurp;
using tg::testing::temp_dir;

namespace {

// Bit-by-bit CRC-32C: the definition, independent of both fast versions.
uint32_t crc32c_bitwise(const std::string& s) {
  uint32_t c = 0xffffffffu;
  for (unsigned char b : s) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
  }
  return ~c;
}

}  // namespace

TEST(Crc32c, StandardVectors) {
  // RFC 3720 (iSCSI) B.4 vectors and the classic check value.
  std::string zeros(32, '\0'), ones(32, '\xff'), inc(32, 0), dec(32, 0);
  for (int i = 0; i < 32; ++i) {
    inc[i] = static_cast<char>(i);
    dec[i] = static_cast<char>(31 - i);
  }
  for (int hw = 0; hw < 2; ++hw) {
    auto f = [&](const std::string& s) {
      return hw ? crc32c(s.data(), s.size()) : crc32c_portable_extend(0, s.data(), s.size());
    };
    EXPECT_EQ(f("123456789"), 0xE3069283u);
    EXPECT_EQ(f(zeros), 0x8A9136AAu);
    EXPECT_EQ(f(ones), 0x62A8AB43u);
    EXPECT_EQ(f(inc), 0x46DD794Eu);
    EXPECT_EQ(f(dec), 0x113FDB5Cu);
    EXPECT_EQ(f(""), 0u);
  }
}

TEST(Crc32c, FastPathsMatchBitwiseDefinitionAtEveryLengthAndAlignment) {
  std::mt19937 rng(7);
  std::string buf(1100, 0);
  for (auto& c : buf) c = static_cast<char>(rng());
  for (size_t off = 0; off < 9; ++off)
    for (size_t n : {0, 1, 3, 7, 8, 9, 15, 31, 32, 33, 63, 100, 1000}) {
      std::string s = buf.substr(off, n);
      uint32_t want = crc32c_bitwise(s);
      ASSERT_EQ(crc32c(buf.data() + off, n), want) << "off " << off << " n " << n;
      ASSERT_EQ(crc32c_portable_extend(0, buf.data() + off, n), want) << "off " << off << " n " << n;
    }
  // extend() composes.
  EXPECT_EQ(crc32c_extend(crc32c("hello ", 6), "world", 5), crc32c("hello world", 11));
}

TEST(Crc32c, MaskRoundTripsAndDiffersFromCrc) {
  uint32_t c = crc32c("foo", 3);
  EXPECT_NE(crc32c_mask(c), c);
  EXPECT_NE(crc32c_mask(crc32c_mask(c)), c);
  EXPECT_EQ(crc32c_unmask(crc32c_mask(c)), c);
  EXPECT_EQ(crc32c_unmask(crc32c_unmask(crc32c_mask(crc32c_mask(c)))), c);
}

TEST(TfRecord, KnownFramingBytes) {
  // The framing of an empty record and of "a", derived from the format definition.
  std::string out;
  append_tfrecord(&out, "a", 1);
  ASSERT_EQ(out.size(), 12u + 1 + 4);
  EXPECT_EQ(out.substr(0, 8), std::string("\x01\0\0\0\0\0\0\0", 8));
  uint32_t len_crc = crc32c_mask(crc32c(out.data(), 8));
  uint32_t got = 0;
  for (int i = 3; i >= 0; --i) got = (got << 8) | static_cast<uint8_t>(out[8 + i]);
  EXPECT_EQ(got, len_crc);
  EXPECT_EQ(out[12], 'a');
  uint32_t data_crc = 0;
  for (int i = 3; i >= 0; --i) data_crc = (data_crc << 8) | static_cast<uint8_t>(out[13 + i]);
  EXPECT_EQ(data_crc, crc32c_mask(crc32c("a", 1)));
}

TEST(TfRecord, WriteReadRoundTripWithOffsets) {
  fs::path dir = temp_dir("roundtrip");
  fs::path file = dir / "train-00000-of-00001";
  std::vector<std::string> recs = {"", "x", std::string(100000, 'q'), std::string("\0\1\2", 3)};
  {
    TfRecordWriter w(file.string());
    EXPECT_FALSE(fs::exists(file)) << "final name must not exist before close()";
    for (auto& r : recs) w.write(r);
    w.close();
  }
  ASSERT_TRUE(fs::exists(file));
  // No temporary left behind.
  int n_files = 0;
  for (auto& e : fs::directory_iterator(dir)) ++n_files, (void)e;
  EXPECT_EQ(n_files, 1);
  // Bytes equal to the in-memory framing.
  std::string expect;
  for (auto& r : recs) append_tfrecord(&expect, r.data(), r.size());
  EXPECT_EQ(slurp(file), expect);

  TfRecordReader reader(file.string());
  std::string rec;
  uint64_t off = 0, want_off = 0;
  for (auto& r : recs) {
    ASSERT_TRUE(reader.next(&rec, &off));
    EXPECT_EQ(rec, r);
    EXPECT_EQ(off, want_off);
    want_off += 16 + r.size();
  }
  EXPECT_FALSE(reader.next(&rec));
  fs::remove_all(dir);
}

TEST(TfRecord, UnclosedWriterLeavesNothing) {
  fs::path dir = temp_dir("unclosed");
  {
    TfRecordWriter w((dir / "test-00000-of-00001").string());
    w.write("abc");
  }
  EXPECT_TRUE(fs::is_empty(dir));
  fs::remove_all(dir);
}

TEST(TfRecord, CorruptionIsReportedWithFileAndOffset) {
  fs::path dir = temp_dir("corrupt");
  std::string good;
  append_tfrecord(&good, "first", 5);
  append_tfrecord(&good, "second", 6);
  append_tfrecord(&good, "third", 5);
  const uint64_t second_off = 16 + 5;

  // Bad data CRC in the second record: read() skips it and continues; next() throws.
  {
    std::string bad = good;
    bad[second_off + 12] ^= 0x20;
    fs::path f = dir / "baddata";
    dump(f, bad);
    TfRecordReader r(f.string());
    std::string rec, err;
    uint64_t off;
    EXPECT_EQ(r.read(&rec, &off, &err), RecordStatus::kOk);
    EXPECT_EQ(r.read(&rec, &off, &err), RecordStatus::kCorruptRecord);
    EXPECT_EQ(off, second_off);
    EXPECT_NE(err.find("bad data CRC"), std::string::npos) << err;
    EXPECT_NE(err.find("offset 21"), std::string::npos) << err;
    EXPECT_NE(err.find(f.string()), std::string::npos) << err;
    EXPECT_EQ(r.read(&rec, &off, &err), RecordStatus::kOk);
    EXPECT_EQ(rec, "third");
    EXPECT_EQ(r.read(&rec, &off, &err), RecordStatus::kEnd);

    TfRecordReader r2(f.string());
    EXPECT_TRUE(r2.next(&rec));
    try {
      r2.next(&rec);
      FAIL() << "expected an error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("offset 21"), std::string::npos) << e.what();
    }
  }
  // Bad length CRC: the rest of the file is lost.
  {
    std::string bad = good;
    bad[second_off + 9] ^= 0x01;
    fs::path f = dir / "badlen";
    dump(f, bad);
    TfRecordReader r(f.string());
    std::string rec, err;
    uint64_t off;
    EXPECT_EQ(r.read(&rec, &off, &err), RecordStatus::kOk);
    EXPECT_EQ(r.read(&rec, &off, &err), RecordStatus::kCorruptFile);
    EXPECT_NE(err.find("bad length CRC at byte offset 21"), std::string::npos) << err;
    EXPECT_EQ(r.read(&rec, &off, &err), RecordStatus::kEnd);
  }
  // Truncated in the middle of the last record, and in the middle of a header.
  for (size_t cut : {good.size() - 2, second_off + 5}) {
    fs::path f = dir / "trunc";
    dump(f, good.substr(0, cut));
    TfRecordReader r(f.string());
    std::string rec, err;
    uint64_t off;
    RecordStatus st;
    while ((st = r.read(&rec, &off, &err)) == RecordStatus::kOk) {
    }
    EXPECT_EQ(st, RecordStatus::kCorruptFile);
    EXPECT_NE(err.find("truncated"), std::string::npos) << err;
  }
  // A huge bogus length with a valid length CRC is reported as truncation, not an allocation.
  {
    std::string bad;
    append_tfrecord(&bad, "x", 1);
    uint64_t huge = 1ull << 60;
    for (int i = 0; i < 8; ++i) bad[i] = static_cast<char>((huge >> (8 * i)) & 0xff);
    uint32_t lc = crc32c_mask(crc32c(bad.data(), 8));
    for (int i = 0; i < 4; ++i) bad[8 + i] = static_cast<char>((lc >> (8 * i)) & 0xff);
    fs::path f = dir / "huge";
    dump(f, bad);
    TfRecordReader r(f.string());
    std::string rec, err;
    uint64_t off;
    EXPECT_EQ(r.read(&rec, &off, &err), RecordStatus::kCorruptFile);
    EXPECT_NE(err.find("truncated"), std::string::npos) << err;
  }
  EXPECT_THROW(TfRecordReader((dir / "missing").string()), Error);
  fs::remove_all(dir);
}

TEST(TfRecord, SkipMovesPastRecords) {
  fs::path dir = temp_dir("skip");
  fs::path f = dir / "f";
  std::string s;
  append_tfrecord(&s, "one", 3);
  append_tfrecord(&s, "two", 3);
  dump(f, s);
  TfRecordReader r(f.string());
  std::string rec, err;
  uint64_t off;
  EXPECT_EQ(r.skip(&off, &err), RecordStatus::kOk);
  EXPECT_EQ(r.read(&rec, &off, &err), RecordStatus::kOk);
  EXPECT_EQ(rec, "two");
  EXPECT_EQ(off, 19u);
  EXPECT_EQ(r.skip(&off, &err), RecordStatus::kEnd);
  fs::remove_all(dir);
}

TEST(Example, BuildParseRoundTripAndUnknownKeysIgnored) {
  ImageExample ex;
  ex.encoded = std::string("\x89PNG\0\1", 6);
  ex.format = "png";
  ex.label = 7;
  ex.height = 28;
  ex.width = 28;
  ex.channels = 1;
  ex.filename = "a.png";
  std::string bytes = build_image_example(ex);

  // Parse with the protobuf message directly: the TF schema.
  tensorflow::Example proto;
  ASSERT_TRUE(proto.ParseFromString(bytes));
  EXPECT_EQ(proto.features().feature().at("image/class/label").int64_list().value(0), 7);
  EXPECT_EQ(proto.features().feature().at("image/encoded").bytes_list().value(0), ex.encoded);

  // Extra keys of any kind are ignored.
  (*proto.mutable_features()->mutable_feature())["image/object/bbox/xmin"].mutable_float_list()->add_value(0.5f);
  (*proto.mutable_features()->mutable_feature())["image/class/synset"].mutable_bytes_list()->add_value("n01");
  std::string more;
  proto.SerializeToString(&more);
  for (const std::string& b : {bytes, more}) {
    ImageExample back = parse_image_example(b, "here");
    EXPECT_EQ(back.encoded, ex.encoded);
    EXPECT_EQ(back.format, "png");
    EXPECT_EQ(back.label, 7);
    EXPECT_EQ(back.height, 28);
    EXPECT_EQ(back.width, 28);
    EXPECT_EQ(back.channels, 1);
    EXPECT_EQ(back.filename, "a.png");
  }
  auto keys = example_feature_keys(more, "here");
  EXPECT_EQ(keys.size(), 9u);  // 7 written + 2 added
}

TEST(Example, WireBytesMatchTensorFlowFieldNumbers) {
  // Example{features(1){feature(1) map entry{key(1)="k", value(2)=Feature{int64_list(3){value(1) packed [5]}}}}}
  const std::string wire("\x0a\x0c\x0a\x0a\x0a\x01k\x12\x05\x1a\x03\x0a\x01\x05", 14);
  tensorflow::Example proto;
  ASSERT_TRUE(proto.ParseFromString(wire));
  ASSERT_EQ(proto.features().feature().count("k"), 1u);
  EXPECT_EQ(proto.features().feature().at("k").int64_list().value(0), 5);
  std::string back;
  proto.SerializeToString(&back);
  EXPECT_EQ(back, wire);
}

TEST(Example, BadRecordsGiveClearErrors) {
  try {
    parse_image_example(std::string("\xff\xff\xff", 3), "f:12");
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "f:12: record is not a tf.Example");
  }
  tensorflow::Example proto;
  (*proto.mutable_features()->mutable_feature())["image/encoded"].mutable_bytes_list()->add_value("x");
  std::string no_label;
  proto.SerializeToString(&no_label);
  try {
    parse_image_example(no_label, "f:0");
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "f:0: example has no image/class/label");
  }
  tensorflow::Example p2;
  (*p2.mutable_features()->mutable_feature())["image/class/label"].mutable_int64_list()->add_value(1);
  std::string no_img;
  p2.SerializeToString(&no_img);
  EXPECT_THROW(parse_image_example(no_img, "f:0"), Error);
}

// Compressed TFRecords (TF's TFRecordOptions GZIP / ZLIB): detection from the first bytes, streaming reads
// with both CRCs checked, uncompressed offsets in messages, our compressed writer, converters writing
// compressed shards, and fixtures made by Python's gzip/zlib modules (tests/data/make_fixtures.py).
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/files.h"
#include "terngrad/core/error.h"
#include "terngrad/data/converters.h"
#include "terngrad/data/crc32c.h"
#include "terngrad/data/example.h"
#include "terngrad/data/tfrecord.h"

namespace fs = std::filesystem;
using namespace tg;
using tg::testing::dump;
using tg::testing::fixture;
using tg::testing::slurp;
using tg::testing::temp_dir;

namespace {

// deflate with zlib directly (window_bits 15 + 16: gzip, 15: zlib), as TF's ZlibOutputBuffer does.
std::string compress(const std::string& plain, bool gzip) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, 6, Z_DEFLATED, gzip ? 31 : 15, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&zs, plain.size()) + 64, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(plain.data()));
  zs.avail_in = static_cast<uInt>(plain.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

const std::vector<std::string> kFixtureRecords = {"first", "", std::string(1000, 'x'), [] {
                                                    std::string s(256, '\0');
                                                    for (int i = 0; i < 256; ++i) s[i] = static_cast<char>(i);
                                                    return s;
                                                  }()};

}  // namespace

TEST(TfRecordCompression, PythonGzipAndZlibFixturesReadAsPlain) {
  EXPECT_EQ(read_all_tfrecords(fixture("records.tfrecord").string()), kFixtureRecords);
  for (const char* name : {"records.tfrecord.gz", "records.tfrecord.zlib"}) {
    TfRecordReader r(fixture(name).string());  // auto
    EXPECT_EQ(r.compression(), std::string(name).find(".gz") != std::string::npos ? TfRecordCompression::kGzip
                                                                                  : TfRecordCompression::kZlib);
    std::vector<std::string> got;
    std::string rec;
    uint64_t off = 0, want = 0;
    while (r.next(&rec, &off)) {
      EXPECT_EQ(off, want) << name;  // offsets in the uncompressed stream
      want += 16 + rec.size();
      got.push_back(rec);
    }
    EXPECT_EQ(got, kFixtureRecords) << name;
  }
  // Forcing the right type works; forcing a wrong one fails with a message, never a crash.
  EXPECT_EQ(read_all_tfrecords(fixture("records.tfrecord.gz").string(), TfRecordCompression::kGzip), kFixtureRecords);
  EXPECT_THROW(read_all_tfrecords(fixture("records.tfrecord.gz").string(), TfRecordCompression::kZlib), Error);
  try {
    read_all_tfrecords(fixture("records.tfrecord.gz").string(), TfRecordCompression::kNone);
    FAIL() << "a gzip file read as plain must fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("looks gzip-compressed"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--tfrecord_compression"), std::string::npos) << e.what();
  }
}

TEST(TfRecordCompression, DetectionPrefersAValidPlainHeader) {
  // A plain record of length 376 starts with 78 01: a valid zlib header. Its length CRC says plain.
  std::string plain;
  const std::string big(376, 'z');
  append_tfrecord(&plain, big.data(), big.size());
  ASSERT_EQ(static_cast<uint8_t>(plain[0]), 0x78);
  EXPECT_EQ(detect_tfrecord_compression(plain.data(), plain.size()), TfRecordCompression::kNone);
  // Length 0x8b1f starts with the gzip magic 1f 8b; still plain.
  std::string plain2;
  const std::string big2(0x8b1f, 'g');
  append_tfrecord(&plain2, big2.data(), big2.size());
  EXPECT_EQ(detect_tfrecord_compression(plain2.data(), plain2.size()), TfRecordCompression::kNone);
  const std::string gz = compress(plain, true), zl = compress(plain, false);
  EXPECT_EQ(detect_tfrecord_compression(gz.data(), gz.size()), TfRecordCompression::kGzip);
  EXPECT_EQ(detect_tfrecord_compression(zl.data(), zl.size()), TfRecordCompression::kZlib);
  EXPECT_EQ(detect_tfrecord_compression("", 0), TfRecordCompression::kNone);  // empty file: no records
  EXPECT_EQ(parse_enum<TfRecordCompression>("GZIP", "--f"), TfRecordCompression::kGzip);
  EXPECT_EQ(parse_enum<TfRecordCompression>("", "--f"), TfRecordCompression::kNone);
  EXPECT_THROW(parse_enum<TfRecordCompression>("bz2", "--tfrecord_compression"), Error);
}

TEST(TfRecordCompression, WriterRoundTripAndConcatenatedGzipMembers) {
  fs::path dir = temp_dir("writer");
  std::vector<std::string> recs = {"a", std::string(300000, 'q'), "", "last"};
  std::string plain;
  for (auto& r : recs) append_tfrecord(&plain, r.data(), r.size());
  for (TfRecordCompression c : {TfRecordCompression::kGzip, TfRecordCompression::kZlib}) {
    fs::path f = dir / (std::string("train-") + enum_name(c));
    TfRecordWriter w(f.string(), c);
    for (auto& r : recs) w.write(r);
    w.close();
    const std::string bytes = slurp(f);
    EXPECT_LT(bytes.size(), plain.size() / 10);
    EXPECT_EQ(detect_tfrecord_compression(bytes.data(), bytes.size()), c);
    // The stream inflates to exactly the plain framing (what TF's reader expects).
    z_stream zs{};
    ASSERT_EQ(inflateInit2(&zs, c == TfRecordCompression::kGzip ? 31 : 15), Z_OK);
    std::string out(plain.size() + 10, '\0');
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
    zs.avail_in = static_cast<uInt>(bytes.size());
    zs.next_out = reinterpret_cast<Bytef*>(out.data());
    zs.avail_out = static_cast<uInt>(out.size());
    EXPECT_EQ(inflate(&zs, Z_FINISH), Z_STREAM_END);
    out.resize(zs.total_out);
    inflateEnd(&zs);
    EXPECT_EQ(out, plain);
    EXPECT_EQ(read_all_tfrecords(f.string()), recs);
    // skip() moves through compressed data too.
    TfRecordReader r(f.string());
    std::string rec, err;
    uint64_t off;
    EXPECT_EQ(r.skip(&off, &err), RecordStatus::kOk);
    EXPECT_EQ(r.skip(&off, &err), RecordStatus::kOk);
    EXPECT_EQ(r.read(&rec, &off, &err), RecordStatus::kOk);
    EXPECT_EQ(off, 16u + 1 + 16 + 300000);
    EXPECT_EQ(r.read(&rec, &off, &err), RecordStatus::kOk);
    EXPECT_EQ(rec, "last");
    EXPECT_EQ(r.read(&rec, &off, &err), RecordStatus::kEnd);
  }
  // gzip -c a b > c: two members read as one stream.
  fs::path cat = dir / "cat";
  std::string p1, p2;
  append_tfrecord(&p1, "one", 3);
  append_tfrecord(&p2, "two", 3);
  dump(cat, compress(p1, true) + compress(p2, true));
  EXPECT_EQ(read_all_tfrecords(cat.string()), (std::vector<std::string>{"one", "two"}));
  fs::remove_all(dir);
}

TEST(TfRecordCompression, CorruptionNamesTheUncompressedOffset) {
  fs::path dir = temp_dir("corrupt");
  std::string plain;
  append_tfrecord(&plain, "first", 5);
  append_tfrecord(&plain, "second", 6);
  // A flipped data byte inside the compressed payload: the data CRC of record 2 (uncompressed offset 21).
  std::string bad = plain;
  bad[21 + 12 + 2] ^= 0x01;
  fs::path f = dir / "f";
  dump(f, compress(bad, true));
  {
    TfRecordReader r(f.string());
    std::string rec, err;
    uint64_t off;
    EXPECT_EQ(r.read(&rec, &off, &err), RecordStatus::kOk);
    EXPECT_EQ(r.read(&rec, &off, &err), RecordStatus::kCorruptRecord);
    EXPECT_EQ(off, 21u);
    EXPECT_NE(err.find("bad data CRC in record at uncompressed offset 21 (gzip stream)"), std::string::npos) << err;
    EXPECT_NE(err.find(f.string()), std::string::npos) << err;
    EXPECT_EQ(r.read(&rec, &off, &err), RecordStatus::kEnd);
  }
  // A truncated gzip file: the stream ends inside record 2.
  const std::string gz = compress(plain, true);
  dump(f, gz.substr(0, gz.size() - 12));
  {
    TfRecordReader r(f.string());
    std::string rec, err;
    uint64_t off;
    RecordStatus st = RecordStatus::kOk;
    while (st == RecordStatus::kOk) st = r.read(&rec, &off, &err);
    EXPECT_EQ(st, RecordStatus::kCorruptFile);
    EXPECT_NE(err.find("uncompressed offset"), std::string::npos) << err;
    EXPECT_NE(err.find(f.string()), std::string::npos) << err;
  }
  // Garbage compressed bytes after a valid header: a zlib error, one line, no crash.
  std::string junk = gz.substr(0, 10) + std::string(200, '\x55');
  dump(f, junk);
  try {
    read_all_tfrecords(f.string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gzip stream"), std::string::npos) << e.what();
  }
  // A crafted huge length (valid length CRC) costs no huge allocation: the stream ends first.
  std::string header(12, '\0');
  const uint64_t len = uint64_t{1} << 40;
  for (int i = 0; i < 8; ++i) header[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  const uint32_t crc = crc32c_mask(crc32c(header.data(), 8));
  for (int i = 0; i < 4; ++i) header[8 + i] = static_cast<char>((crc >> (8 * i)) & 0xff);
  dump(f, compress(header + "only a few bytes", false));
  try {
    read_all_tfrecords(f.string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("truncated record at uncompressed offset 0 (zlib stream)"), std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
}

TEST(TfRecordCompression, ConvertersWriteCompressedShards) {
  fs::path dir = temp_dir("convert");
  std::vector<std::string> examples;
  for (int i = 0; i < 5; ++i) {
    ImageExample ex;
    ex.encoded = std::string(10, static_cast<char>(i));
    ex.format = "RAW";
    ex.label = i;
    ex.height = 2;
    ex.width = 5;
    ex.channels = 1;
    examples.push_back(build_image_example(ex));
  }
  for (TfRecordCompression c : {TfRecordCompression::kGzip, TfRecordCompression::kZlib}) {
    fs::path out = dir / enum_name(c);
    auto paths = write_sharded(
        examples.size(), 2, "--train_shards", out.string(), "train", 2, [&](size_t i) { return examples[i]; }, c);
    ASSERT_EQ(paths.size(), 2u);
    std::vector<std::string> back;
    for (auto& p : paths) {
      const std::string head = slurp(p).substr(0, 12);
      EXPECT_EQ(detect_tfrecord_compression(head.data(), head.size()), c);
      for (auto& r : read_all_tfrecords(p)) back.push_back(r);
    }
    EXPECT_EQ(back, examples);
    InspectReport rep = inspect_files(paths, true);
    EXPECT_EQ(rep.records, 5);
    EXPECT_EQ(rep.corrupt, 0);
    EXPECT_EQ(rep.undecodable, 0);
  }
  fs::remove_all(dir);
}

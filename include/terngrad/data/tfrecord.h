// TFRecord files: a sequence of records, each framed as
//   uint64 length (little-endian) | uint32 masked crc32c(length bytes) | data[length] | uint32 masked crc32c(data)
// (mask = ((crc >> 15) | (crc << 17)) + 0xa282ead8, see crc32c.h). Both CRCs are verified on read.
//
// TfRecordReader reads one file sequentially through a large buffer and reports the byte offset of every
// record's header. Corruption comes in two kinds: a bad data CRC spoils one record (the reader can move
// past it), while a truncated file or a bad length CRC leaves nothing trustworthy after it (the rest of the
// file is lost). read() reports which; next() throws tg::Error naming the file and the byte offset.
//
// Compression: TensorFlow's TFRecordOptions(compression_type='GZIP' | 'ZLIB') files are one gzip (RFC 1952)
// or zlib (RFC 1950) stream of exactly those framed records. The reader decompresses them as a stream (never
// the whole file in memory), still checks both CRCs, and counts offsets in the uncompressed stream (messages
// say "uncompressed offset"). kAuto decides from the first bytes: a valid length CRC in the first 12 bytes
// means a plain file (whatever the bytes look like); otherwise the gzip magic 1f 8b 08 means gzip and a
// valid zlib header (CM 8, CINFO <= 7, (CMF * 256 + FLG) % 31 == 0, no preset dictionary) means zlib.
//
// TfRecordWriter never leaves a half-written file under its final name: it writes through an AtomicFile
// (core/atomic_file.h) with a hidden temporary name (".<name>.tmp-<pid>-<n>", which no "<subset>-*" glob
// matches), and close() flushes, fsyncs and renames it, then fsyncs the folder. Destroying a writer that was
// not closed removes the temporary file.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "terngrad/core/enum_names.h"

namespace tg {

class AtomicFile;

enum class TfRecordCompression { kAuto, kNone, kGzip, kZlib };

// "auto" | "none" | "gzip" | "zlib", any case (TF writes "GZIP", "ZLIB"), and "" for none.
template <>
struct EnumNames<TfRecordCompression> : EnumNamesBase {
  static constexpr const char* kFlag = "--tfrecord_compression";
  static constexpr bool kIgnoreCase = true;
  static constexpr EnumName<TfRecordCompression> kList[] = {{TfRecordCompression::kAuto, "auto"},
                                                            {TfRecordCompression::kNone, "none"},
                                                            {TfRecordCompression::kGzip, "gzip"},
                                                            {TfRecordCompression::kZlib, "zlib"},
                                                            {TfRecordCompression::kNone, "", true}};
};
// What kAuto picks for a file starting with head[0 .. n) (n may be short for a tiny file): kNone, kGzip or kZlib.
TfRecordCompression detect_tfrecord_compression(const char* head, size_t n);
// The compression readers use when constructed without one (kAuto unless the apps set --tfrecord_compression).
// Set it before readers start; it is read atomically.
void set_default_tfrecord_compression(TfRecordCompression c);
TfRecordCompression default_tfrecord_compression();

enum class RecordStatus {
  kOk,             // a record was read
  kEnd,            // clean end of file
  kCorruptRecord,  // data CRC mismatch; the reader is positioned after this record
  kCorruptFile,    // truncated file or bad length CRC; nothing more can be read
};

// The 12-byte header (length, masked crc of the length) and 4-byte footer (masked crc of the data) that frame
// one record: header + data + footer is what a TFRecord file holds (TfRecordWriter and append_tfrecord frame
// with it; the event-file writer appends append_tfrecord's bytes).
struct RecordFraming {
  char header[12];
  char footer[4];
};
RecordFraming frame_record(const void* data, size_t n);

class TfRecordReader {
 public:
  // Throws tg::Error when the file cannot be opened; a forced compression that does not fit the bytes shows at
  // the first read (kCorruptFile naming the zlib error).
  explicit TfRecordReader(const std::string& path, TfRecordCompression compression = default_tfrecord_compression());
  ~TfRecordReader();
  TfRecordReader(const TfRecordReader&) = delete;
  TfRecordReader& operator=(const TfRecordReader&) = delete;

  // Reads the next record into *record; *offset receives the byte offset of its header (for every status but
  // kEnd). On corruption *error receives one line naming the file, offset and fault.
  RecordStatus read(std::string* record, uint64_t* offset, std::string* error);
  // Like read(), but moves past the record's data without reading or checking it (its length CRC is
  // checked). For records another worker owns.
  RecordStatus skip(uint64_t* offset, std::string* error);
  // Convenience: true with a record, false at a clean end, throws tg::Error on any corruption.
  bool next(std::string* record, uint64_t* offset = nullptr);

  const std::string& path() const { return path_; }
  uint64_t file_size() const { return file_size_; }  // on disk (compressed size for gzip/zlib files)
  uint64_t position() const { return pos_; }         // offset of the next record's header (uncompressed stream)
  TfRecordCompression compression() const { return compression_; }  // kNone, kGzip or kZlib (never kAuto)

 private:
  struct Inflater;
  RecordStatus read_header(uint64_t* length, uint64_t* offset, std::string* error);
  // Up to n bytes of the (uncompressed) stream; fewer at its end or on an error (then *error is set).
  size_t fill(char* dst, size_t n, std::string* error);
  bool discard(uint64_t n, std::string* error);
  std::string at(uint64_t offset) const;  // "byte offset N" or "uncompressed offset N"

  std::string path_;
  std::FILE* file_ = nullptr;
  uint64_t file_size_ = 0;
  uint64_t pos_ = 0;
  bool dead_ = false;  // after kCorruptFile
  TfRecordCompression compression_ = TfRecordCompression::kNone;
  std::unique_ptr<Inflater> inflater_;  // gzip/zlib only
  std::vector<char> io_buffer_;
};

class TfRecordWriter {
 public:
  // Throws tg::Error when the folder is not writable. kGzip/kZlib write what TF's compressed writer writes
  // (kAuto means kNone here).
  explicit TfRecordWriter(const std::string& final_path, TfRecordCompression compression = TfRecordCompression::kNone);
  ~TfRecordWriter();  // removes the temporary file unless closed
  TfRecordWriter(const TfRecordWriter&) = delete;
  TfRecordWriter& operator=(const TfRecordWriter&) = delete;

  // A failed write throws tg::Error naming the file and removes the temporary file (the writer is closed).
  void write(const void* data, size_t n);
  void write(const std::string& data) { write(data.data(), data.size()); }
  // Flush, fsync, rename to the final path. Throws tg::Error on any I/O failure (the temporary is removed).
  void close();

 private:
  struct Deflater;
  void put(const void* data, size_t n);  // through the compressor when there is one; put(nullptr, 0) ends it

  std::string final_path_;
  std::unique_ptr<Deflater> deflater_;
  std::unique_ptr<AtomicFile> file_;  // null once closed
};

// "<path>: record at byte offset N", or "... at uncompressed offset N" for a gzip/zlib file: how messages
// about a record name it.
std::string describe_record(const std::string& path, uint64_t offset, TfRecordCompression compression);

// Appends one framed record (header, data, footer) to *out: the exact bytes a TfRecordWriter puts in a file.
void append_tfrecord(std::string* out, const void* data, size_t n);

// Every record of a file, in order (throws on corruption). For tests and small files.
std::vector<std::string> read_all_tfrecords(const std::string& path,
                                            TfRecordCompression compression = default_tfrecord_compression());

}  // namespace tg

// TFRecord files: a sequence of records, each framed as
//   uint64 length (little-endian) | uint32 masked crc32c(length bytes) | data[length] | uint32 masked crc32c(data)
// (mask = ((crc >> 15) | (crc << 17)) + 0xa282ead8, see crc32c.h). Both CRCs are verified on read.
//
// TfRecordReader reads one file sequentially through a large buffer and reports the byte offset of every
// record's header. Corruption comes in two kinds: a bad data CRC spoils one record (the reader can move
// past it), while a truncated file or a bad length CRC leaves nothing trustworthy after it (the rest of the
// file is lost). read() reports which; next() throws tg::Error naming the file and the byte offset.
//
// TfRecordWriter never leaves a half-written file under its final name: it writes to a hidden temporary
// file in the same folder (".<name>.tmp-<pid>-<n>", which no "<subset>-*" glob matches), and close() flushes,
// fsyncs and renames it. Destroying a writer that was not closed removes the temporary file.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace tg {

enum class RecordStatus {
  kOk,             // a record was read
  kEnd,            // clean end of file
  kCorruptRecord,  // data CRC mismatch; the reader is positioned after this record
  kCorruptFile,    // truncated file or bad length CRC; nothing more can be read
};

// The 12-byte header (length, masked crc of the length) and 4-byte footer (masked crc of the data) that frame
// one record: header + data + footer is what a TFRecord file holds (also used by the event-file writer).
struct RecordFraming {
  char header[12];
  char footer[4];
};
RecordFraming frame_record(const void* data, size_t n);

class TfRecordReader {
 public:
  explicit TfRecordReader(const std::string& path);  // throws tg::Error when the file cannot be opened
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
  uint64_t file_size() const { return file_size_; }
  uint64_t position() const { return pos_; }  // offset of the next record's header

 private:
  RecordStatus read_header(uint64_t* length, uint64_t* offset, std::string* error);

  std::string path_;
  std::FILE* file_ = nullptr;
  uint64_t file_size_ = 0;
  uint64_t pos_ = 0;
  bool dead_ = false;  // after kCorruptFile
  std::vector<char> io_buffer_;
};

class TfRecordWriter {
 public:
  explicit TfRecordWriter(const std::string& final_path);  // throws tg::Error when the folder is not writable
  ~TfRecordWriter();                                         // removes the temporary file unless closed
  TfRecordWriter(const TfRecordWriter&) = delete;
  TfRecordWriter& operator=(const TfRecordWriter&) = delete;

  void write(const void* data, size_t n);
  void write(const std::string& data) { write(data.data(), data.size()); }
  // Flush, fsync, rename to the final path. Throws tg::Error on any I/O failure (the temporary is removed).
  void close();

  uint64_t records_written() const { return records_; }
  const std::string& final_path() const { return final_path_; }
  const std::string& temp_path() const { return temp_path_; }

 private:
  void abandon() noexcept;

  std::string final_path_, temp_path_;
  std::FILE* file_ = nullptr;
  uint64_t records_ = 0;
  std::vector<char> io_buffer_;
};

// Appends one framed record (header, data, footer) to *out: the exact bytes a writer puts in a file.
void append_tfrecord(std::string* out, const void* data, size_t n);

// Every record of a file, in order (throws on corruption). For tests and small files.
std::vector<std::string> read_all_tfrecords(const std::string& path);

}  // namespace tg

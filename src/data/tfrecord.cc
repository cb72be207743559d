// TFRecord reader and writer (framing and error rules in tfrecord.h).
#include "terngrad/data/tfrecord.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "terngrad/core/atomic_file.h"
#include "terngrad/core/error.h"
#include "terngrad/data/crc32c.h"

namespace tg {
namespace {

constexpr size_t kIoBufferBytes = 1 << 20;
constexpr size_t kInflateInBytes = 1 << 18;      // compressed bytes per read
constexpr size_t kDeflateOutBytes = 1 << 18;     // compressed bytes per write
constexpr uint64_t kRecordGrowBytes = 16 << 20;  // a compressed file's record grows by at most this per step

void put_u32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
void put_u64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}
uint64_t get_u64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

}  // namespace

// ---- compression ----------------------------------------------------------------------------------------

namespace {

std::atomic<int> g_default_compression{static_cast<int>(TfRecordCompression::kAuto)};

bool plain_header_valid(const char* head, size_t n) {
  return n >= 12 && crc32c_mask(crc32c(head, 8)) == get_u32(head + 8);
}
bool gzip_magic(const char* head, size_t n) {
  return n >= 3 && static_cast<uint8_t>(head[0]) == 0x1f && static_cast<uint8_t>(head[1]) == 0x8b &&
         static_cast<uint8_t>(head[2]) == 8;
}
bool zlib_header(const char* head, size_t n) {
  if (n < 2) return false;
  const unsigned cmf = static_cast<uint8_t>(head[0]), flg = static_cast<uint8_t>(head[1]);
  return (cmf & 0x0f) == 8 && (cmf >> 4) <= 7 && (cmf * 256 + flg) % 31 == 0 && (flg & 0x20) == 0;
}

}  // namespace

TfRecordCompression detect_tfrecord_compression(const char* head, size_t n) {
  if (plain_header_valid(head, n)) return TfRecordCompression::kNone;
  if (gzip_magic(head, n)) return TfRecordCompression::kGzip;
  if (zlib_header(head, n)) return TfRecordCompression::kZlib;
  return TfRecordCompression::kNone;
}

void set_default_tfrecord_compression(TfRecordCompression c) { g_default_compression = static_cast<int>(c); }
TfRecordCompression default_tfrecord_compression() {
  return static_cast<TfRecordCompression>(g_default_compression.load());
}

// ---- reader ---------------------------------------------------------------------------------------------

// A zlib inflate stream over the file: gzip (several concatenated members allowed, as gzip -d reads them) or
// zlib (one stream; bytes after it are an error).
struct TfRecordReader::Inflater {
  z_stream zs{};
  bool gzip = false, ended = false, input_done = false;
  uint64_t produced = 0;  // uncompressed bytes so far: the offsets of messages
  std::vector<unsigned char> in;
  explicit Inflater(bool gz) : gzip(gz), in(kInflateInBytes) {}
  ~Inflater() { inflateEnd(&zs); }
};

TfRecordReader::TfRecordReader(const std::string& path, TfRecordCompression compression) : path_(path) {
  file_ = std::fopen(path.c_str(), "rb");
  if (!file_) TG_THROW("cannot open TFRecord file {}: {}", path, std::strerror(errno));
  io_buffer_.resize(kIoBufferBytes);
  std::setvbuf(file_, io_buffer_.data(), _IOFBF, io_buffer_.size());
  struct stat st;
  if (fstat(fileno(file_), &st) != 0) {
    std::fclose(file_);
    file_ = nullptr;
    TG_THROW("cannot stat {}: {}", path, std::strerror(errno));
  }
  file_size_ = static_cast<uint64_t>(st.st_size);
  char head[12];
  const size_t got = std::fread(head, 1, sizeof(head), file_);
  std::rewind(file_);
  compression_ = compression == TfRecordCompression::kAuto ? detect_tfrecord_compression(head, got) : compression;
  if (compression_ == TfRecordCompression::kNone) return;
  inflater_ = std::make_unique<Inflater>(compression_ == TfRecordCompression::kGzip);
  // 15 + 16: gzip wrapper only; 15: zlib wrapper only (what TF's ZlibInputStream expects for each type).
  if (inflateInit2(&inflater_->zs, inflater_->gzip ? 15 + 16 : 15) != Z_OK) {
    std::fclose(file_);
    file_ = nullptr;
    TG_THROW("{}: cannot start a zlib inflate stream", path);
  }
}

TfRecordReader::~TfRecordReader() {
  if (file_) std::fclose(file_);
}

std::string TfRecordReader::at(uint64_t offset) const {
  if (compression_ == TfRecordCompression::kNone) return fmt::format("byte offset {}", offset);
  return fmt::format("uncompressed offset {} ({} stream)", offset, enum_name(compression_));
}

size_t TfRecordReader::fill(char* dst, size_t n, std::string* error) {
  if (!inflater_) {
    size_t got = std::fread(dst, 1, n, file_);
    if (got < n && std::ferror(file_)) *error = fmt::format("{}: read error: {}", path_, std::strerror(errno));
    return got;
  }
  Inflater& z = *inflater_;
  size_t done = 0;
  while (done < n && !z.ended) {
    if (z.zs.avail_in == 0 && !z.input_done) {
      size_t got = std::fread(z.in.data(), 1, z.in.size(), file_);
      if (got < z.in.size()) {
        if (std::ferror(file_)) {
          *error = fmt::format("{}: read error: {}", path_, std::strerror(errno));
          return done;
        }
        z.input_done = true;
      }
      z.zs.next_in = z.in.data();
      z.zs.avail_in = static_cast<uInt>(got);
    }
    z.zs.next_out = reinterpret_cast<Bytef*>(dst + done);
    const size_t want = std::min<size_t>(n - done, 1u << 30);
    z.zs.avail_out = static_cast<uInt>(want);
    const int rc = inflate(&z.zs, Z_NO_FLUSH);
    done += want - z.zs.avail_out;
    z.produced += want - z.zs.avail_out;
    const uint64_t out_pos = z.produced;
    if (rc == Z_STREAM_END) {
      // gzip: another member may follow (concatenated files); zlib: the stream must end the file.
      if (z.zs.avail_in == 0 && !z.input_done) {
        size_t got = std::fread(z.in.data(), 1, z.in.size(), file_);
        if (got < z.in.size()) z.input_done = true;
        z.zs.next_in = z.in.data();
        z.zs.avail_in = static_cast<uInt>(got);
      }
      if (z.zs.avail_in == 0) {
        z.ended = true;
      } else if (z.gzip && gzip_magic(reinterpret_cast<const char*>(z.zs.next_in), z.zs.avail_in)) {
        inflateReset(&z.zs);
      } else {
        *error = fmt::format("{}: unexpected bytes after the end of the {} stream (at uncompressed offset {})", path_,
                             enum_name(compression_), out_pos);
        z.ended = true;
        return done;
      }
    } else if (rc == Z_BUF_ERROR && z.zs.avail_in == 0 && z.input_done) {
      *error = fmt::format("{}: truncated {} stream: the file ends at uncompressed offset {} before the stream does",
                           path_, enum_name(compression_), out_pos);
      z.ended = true;
      return done;
    } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
      *error = fmt::format("{}: corrupt {} stream near uncompressed offset {} (zlib: {})", path_,
                           enum_name(compression_), out_pos, z.zs.msg ? z.zs.msg : zError(rc));
      z.ended = true;
      return done;
    }
  }
  return done;
}

bool TfRecordReader::discard(uint64_t n, std::string* error) {
  if (!inflater_) {
    if (std::fseek(file_, static_cast<long>(n), SEEK_CUR) == 0) return true;
    *error = fmt::format("{}: seek error: {}", path_, std::strerror(errno));
    return false;
  }
  char scratch[1 << 16];
  while (n > 0) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(n, sizeof(scratch)));
    if (fill(scratch, want, error) != want) return false;
    n -= want;
  }
  return true;
}

RecordStatus TfRecordReader::read_header(uint64_t* length, uint64_t* offset, std::string* error) {
  if (dead_) return RecordStatus::kEnd;
  *offset = pos_;
  char header[12];
  std::string io_error;
  size_t got = fill(header, sizeof(header), &io_error);
  const bool plain = compression_ == TfRecordCompression::kNone;
  if (got == 0 && io_error.empty() && (!plain || pos_ == file_size_)) return RecordStatus::kEnd;
  dead_ = true;  // until proven otherwise
  if (!io_error.empty()) {
    *error = fmt::format("{} (reading the record header at {})", io_error, at(pos_));
    return RecordStatus::kCorruptFile;
  }
  if (got < sizeof(header)) {
    *error = fmt::format("{}: truncated record header at {} ({} of 12 bytes)", path_, at(pos_), got);
    return RecordStatus::kCorruptFile;
  }
  const uint64_t len = get_u64(header);
  const uint32_t masked = get_u32(header + 8);
  if (crc32c_mask(crc32c(header, 8)) != masked) {
    std::string hint;
    if (pos_ == 0 && plain) {
      const TfRecordCompression looks = gzip_magic(header, 12)    ? TfRecordCompression::kGzip
                                        : zlib_header(header, 12) ? TfRecordCompression::kZlib
                                                                  : TfRecordCompression::kNone;
      hint = looks != TfRecordCompression::kNone
                 ? fmt::format(": the file looks {}-compressed but was read as plain (--tfrecord_compression)",
                               enum_name(looks))
                 : ": not a TFRecord file (nor a gzip or zlib compressed one; --tfrecord_compression forces one)";
    }
    *error = fmt::format("{}: bad length CRC at {}{}", path_, at(pos_), hint);
    return RecordStatus::kCorruptFile;
  }
  if (plain) {
    const uint64_t remaining = file_size_ - pos_ - 12;
    if (len > remaining || remaining - len < 4) {
      *error = fmt::format("{}: truncated record at byte offset {} (length {}, {} bytes left in the file)", path_, pos_,
                           len, remaining);
      return RecordStatus::kCorruptFile;
    }
  }
  pos_ += 12;
  dead_ = false;
  *length = len;
  return RecordStatus::kOk;
}

RecordStatus TfRecordReader::read(std::string* record, uint64_t* offset, std::string* error) {
  uint64_t len = 0;
  RecordStatus st = read_header(&len, offset, error);
  if (st != RecordStatus::kOk) return st;
  char footer[4];
  std::string io_error;
  bool ok;
  if (!inflater_) {
    record->resize(len);
    ok = fill(record->data(), len, &io_error) == len && fill(footer, 4, &io_error) == 4;
  } else {
    // The length is not bounded by a file size here: grow with the data actually decompressed, so a crafted
    // length costs no more memory than the stream really holds.
    record->clear();
    uint64_t have = 0;
    ok = true;
    while (ok && have < len) {
      const uint64_t step = std::min<uint64_t>(len - have, kRecordGrowBytes);
      record->resize(have + step);
      ok = fill(record->data() + have, step, &io_error) == step;
      have += step;
    }
    ok = ok && fill(footer, 4, &io_error) == 4;
  }
  if (!ok) {
    dead_ = true;
    *error = io_error.empty() ? fmt::format("{}: truncated record at {} (length {}): the {} ends inside it", path_,
                                            at(*offset), len, inflater_ ? "stream" : "file")
                              : fmt::format("{} (in the record at {}, length {})", io_error, at(*offset), len);
    return RecordStatus::kCorruptFile;
  }
  pos_ += len + 4;
  if (crc32c_mask(crc32c(record->data(), len)) != get_u32(footer)) {
    *error = fmt::format("{}: bad data CRC in record at {} (length {})", path_, at(*offset), len);
    return RecordStatus::kCorruptRecord;
  }
  return RecordStatus::kOk;
}

RecordStatus TfRecordReader::skip(uint64_t* offset, std::string* error) {
  uint64_t len = 0;
  RecordStatus st = read_header(&len, offset, error);
  if (st != RecordStatus::kOk) return st;
  std::string io_error;
  if (!discard(len + 4, &io_error)) {
    dead_ = true;
    *error = io_error.empty() ? fmt::format("{}: truncated record at {} (length {}): the stream ends inside it", path_,
                                            at(*offset), len)
                              : fmt::format("{} (in the record at {}, length {})", io_error, at(*offset), len);
    return RecordStatus::kCorruptFile;
  }
  pos_ += len + 4;
  return RecordStatus::kOk;
}

bool TfRecordReader::next(std::string* record, uint64_t* offset) {
  uint64_t off = 0;
  std::string error;
  RecordStatus st = read(record, &off, &error);
  if (offset) *offset = off;
  if (st == RecordStatus::kOk) return true;
  if (st == RecordStatus::kEnd) return false;
  throw Error(error);
}

std::string describe_record(const std::string& path, uint64_t offset, TfRecordCompression compression) {
  return compression == TfRecordCompression::kGzip || compression == TfRecordCompression::kZlib
             ? fmt::format("{}: record at uncompressed offset {}", path, offset)
             : fmt::format("{}: record at byte offset {}", path, offset);
}

std::vector<std::string> read_all_tfrecords(const std::string& path, TfRecordCompression compression) {
  TfRecordReader reader(path, compression);
  std::vector<std::string> out;
  std::string rec;
  while (reader.next(&rec)) out.push_back(rec);
  return out;
}

// ---- writer ---------------------------------------------------------------------------------------------

RecordFraming frame_record(const void* data, size_t n) {
  RecordFraming f;
  put_u64(f.header, n);
  put_u32(f.header + 8, crc32c_mask(crc32c(f.header, 8)));
  put_u32(f.footer, crc32c_mask(crc32c(data, n)));
  return f;
}

void append_tfrecord(std::string* out, const void* data, size_t n) {
  const RecordFraming f = frame_record(data, n);
  out->append(f.header, sizeof f.header);
  out->append(static_cast<const char*>(data), n);
  out->append(f.footer, sizeof f.footer);
}

struct TfRecordWriter::Deflater {
  z_stream zs{};
  std::vector<unsigned char> out = std::vector<unsigned char>(kDeflateOutBytes);
  ~Deflater() { deflateEnd(&zs); }
};

TfRecordWriter::TfRecordWriter(const std::string& final_path, TfRecordCompression compression)
    : final_path_(final_path) {
  if (compression == TfRecordCompression::kGzip || compression == TfRecordCompression::kZlib) {
    deflater_ = std::make_unique<Deflater>();
    // TF's ZlibOutputBuffer defaults: Z_DEFAULT_COMPRESSION, window 15 (+16 for the gzip wrapper), memLevel 9.
    if (deflateInit2(&deflater_->zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED,
                     compression == TfRecordCompression::kGzip ? 15 + 16 : 15, 9, Z_DEFAULT_STRATEGY) != Z_OK)
      TG_THROW("cannot start a zlib deflate stream for {}", final_path);
  }
  file_ = std::make_unique<AtomicFile>(final_path, AtomicFile::TempName::kHidden, kIoBufferBytes);
}

TfRecordWriter::~TfRecordWriter() = default;  // an unclosed file's temporary is removed by AtomicFile

void TfRecordWriter::write(const void* data, size_t n) {
  TG_CHECK(file_ != nullptr, "write to closed TFRecord writer for {}", final_path_);
  const RecordFraming f = frame_record(data, n);
  try {
    put(f.header, sizeof f.header);
    put(data, n);
    put(f.footer, sizeof f.footer);
  } catch (...) {
    file_.reset();  // the temporary file goes now
    throw;
  }
}

void TfRecordWriter::put(const void* data, size_t n) {
  if (!deflater_) return file_->write(data, n);
  z_stream& zs = deflater_->zs;
  const unsigned char* p = static_cast<const unsigned char*>(data);
  const bool finish = data == nullptr;  // put(nullptr, 0): end the stream
  do {
    const size_t chunk = std::min<size_t>(n, 1u << 30);
    zs.next_in = const_cast<unsigned char*>(p);
    zs.avail_in = static_cast<uInt>(chunk);
    int rc;
    do {
      zs.next_out = deflater_->out.data();
      zs.avail_out = static_cast<uInt>(deflater_->out.size());
      rc = deflate(&zs, finish ? Z_FINISH : Z_NO_FLUSH);
      TG_CHECK(rc != Z_STREAM_ERROR, "{}: zlib deflate stream error", final_path_);
      file_->write(deflater_->out.data(), deflater_->out.size() - zs.avail_out);
    } while (zs.avail_out == 0 || (finish && rc != Z_STREAM_END));
    p += chunk;
    n -= chunk;
  } while (n > 0);
}

void TfRecordWriter::close() {
  TG_CHECK(file_ != nullptr, "TFRecord writer for {} closed twice", final_path_);
  try {
    if (deflater_) put(nullptr, 0);
    file_->commit();
  } catch (...) {
    file_.reset();  // the temporary file goes now
    throw;
  }
  file_.reset();
}

}  // namespace tg

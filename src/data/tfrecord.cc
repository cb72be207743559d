// TFRecord reader and writer (framing and error rules in tfrecord.h).
#include "terngrad/data/tfrecord.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "terngrad/core/error.h"
#include "terngrad/data/crc32c.h"

namespace tg {
namespace {

constexpr size_t kIoBufferBytes = 1 << 20;

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

std::string dirname_of(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}
std::string basename_of(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

// ---- reader ---------------------------------------------------------------------------------------------

TfRecordReader::TfRecordReader(const std::string& path) : path_(path) {
  file_ = std::fopen(path.c_str(), "rb");
  if (!file_) TG_THROW("cannot open TFRecord file {}: {}", path, std::strerror(errno));
  io_buffer_.resize(kIoBufferBytes);
  std::setvbuf(file_, io_buffer_.data(), _IOFBF, io_buffer_.size());
  struct stat st;
  if (fstat(fileno(file_), &st) != 0) TG_THROW("cannot stat {}: {}", path, std::strerror(errno));
  file_size_ = static_cast<uint64_t>(st.st_size);
}

TfRecordReader::~TfRecordReader() {
  if (file_) std::fclose(file_);
}

RecordStatus TfRecordReader::read_header(uint64_t* length, uint64_t* offset, std::string* error) {
  if (dead_) return RecordStatus::kEnd;
  *offset = pos_;
  char header[12];
  size_t got = std::fread(header, 1, sizeof(header), file_);
  if (got == 0 && pos_ == file_size_) return RecordStatus::kEnd;
  dead_ = true;  // until proven otherwise
  if (got < sizeof(header)) {
    *error = fmt::format("{}: truncated record header at byte offset {} ({} of 12 bytes)", path_, pos_, got);
    return RecordStatus::kCorruptFile;
  }
  const uint64_t len = get_u64(header);
  const uint32_t masked = get_u32(header + 8);
  if (crc32c_mask(crc32c(header, 8)) != masked) {
    *error = fmt::format("{}: bad length CRC at byte offset {}", path_, pos_);
    return RecordStatus::kCorruptFile;
  }
  const uint64_t remaining = file_size_ - pos_ - 12;
  if (len > remaining || remaining - len < 4) {
    *error = fmt::format("{}: truncated record at byte offset {} (length {}, {} bytes left in the file)", path_,
                         pos_, len, remaining);
    return RecordStatus::kCorruptFile;
  }
  dead_ = false;
  *length = len;
  return RecordStatus::kOk;
}

RecordStatus TfRecordReader::read(std::string* record, uint64_t* offset, std::string* error) {
  uint64_t len = 0;
  RecordStatus st = read_header(&len, offset, error);
  if (st != RecordStatus::kOk) return st;
  record->resize(len);
  char footer[4];
  if (std::fread(record->data(), 1, len, file_) != len || std::fread(footer, 1, 4, file_) != 4) {
    dead_ = true;
    *error = fmt::format("{}: read error in record at byte offset {}: {}", path_, *offset, std::strerror(errno));
    return RecordStatus::kCorruptFile;
  }
  pos_ += 12 + len + 4;
  if (crc32c_mask(crc32c(record->data(), len)) != get_u32(footer)) {
    *error = fmt::format("{}: bad data CRC in record at byte offset {} (length {})", path_, *offset, len);
    return RecordStatus::kCorruptRecord;
  }
  return RecordStatus::kOk;
}

RecordStatus TfRecordReader::skip(uint64_t* offset, std::string* error) {
  uint64_t len = 0;
  RecordStatus st = read_header(&len, offset, error);
  if (st != RecordStatus::kOk) return st;
  if (std::fseek(file_, static_cast<long>(len + 4), SEEK_CUR) != 0) {
    dead_ = true;
    *error = fmt::format("{}: seek error in record at byte offset {}: {}", path_, *offset, std::strerror(errno));
    return RecordStatus::kCorruptFile;
  }
  pos_ += 12 + len + 4;
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

std::vector<std::string> read_all_tfrecords(const std::string& path) {
  TfRecordReader reader(path);
  std::vector<std::string> out;
  std::string rec;
  while (reader.next(&rec)) out.push_back(rec);
  return out;
}

// ---- writer ---------------------------------------------------------------------------------------------

void append_tfrecord(std::string* out, const void* data, size_t n) {
  char header[12], footer[4];
  put_u64(header, n);
  put_u32(header + 8, crc32c_mask(crc32c(header, 8)));
  put_u32(footer, crc32c_mask(crc32c(data, n)));
  out->append(header, 12);
  out->append(static_cast<const char*>(data), n);
  out->append(footer, 4);
}

TfRecordWriter::TfRecordWriter(const std::string& final_path) : final_path_(final_path) {
  static std::atomic<uint64_t> counter{0};
  temp_path_ = fmt::format("{}/.{}.tmp-{}-{}", dirname_of(final_path), basename_of(final_path),
                           static_cast<long>(getpid()), counter.fetch_add(1));
  file_ = std::fopen(temp_path_.c_str(), "wb");
  if (!file_) TG_THROW("cannot create {} (for {}): {}", temp_path_, final_path, std::strerror(errno));
  io_buffer_.resize(kIoBufferBytes);
  std::setvbuf(file_, io_buffer_.data(), _IOFBF, io_buffer_.size());
}

TfRecordWriter::~TfRecordWriter() { abandon(); }

void TfRecordWriter::abandon() noexcept {
  if (file_) {
    std::fclose(file_);
    file_ = nullptr;
    std::remove(temp_path_.c_str());
  }
}

RecordFraming frame_record(const void* data, size_t n) {
  RecordFraming f;
  put_u64(f.header, n);
  put_u32(f.header + 8, crc32c_mask(crc32c(f.header, 8)));
  put_u32(f.footer, crc32c_mask(crc32c(data, n)));
  return f;
}

void TfRecordWriter::write(const void* data, size_t n) {
  TG_CHECK(file_ != nullptr, "write to closed TFRecord writer for {}", final_path_);
  const RecordFraming f = frame_record(data, n);
  if (std::fwrite(f.header, 1, 12, file_) != 12 || std::fwrite(data, 1, n, file_) != n ||
      std::fwrite(f.footer, 1, 4, file_) != 4) {
    std::string why = std::strerror(errno);
    abandon();
    TG_THROW("write error on {}: {}", temp_path_, why);
  }
  ++records_;
}

void TfRecordWriter::close() {
  TG_CHECK(file_ != nullptr, "TFRecord writer for {} closed twice", final_path_);
  bool ok = std::fflush(file_) == 0 && fsync(fileno(file_)) == 0;
  std::string why = ok ? "" : std::strerror(errno);
  if (std::fclose(file_) != 0 && ok) {
    ok = false;
    why = std::strerror(errno);
  }
  file_ = nullptr;
  if (ok && std::rename(temp_path_.c_str(), final_path_.c_str()) != 0) {
    ok = false;
    why = std::strerror(errno);
  }
  if (!ok) {
    std::remove(temp_path_.c_str());
    TG_THROW("cannot finish {}: {}", final_path_, why);
  }
}

}  // namespace tg

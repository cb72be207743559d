// libFuzzer target: the TFRecord reader on arbitrary file bytes. Reads every record with read(), or with
// skip() (the path of records another worker owns), or with next()/read_all_tfrecords (which throw tg::Error
// on corruption), chosen by the input's size. Written against the reader's public API only, so it covers whatever
// framing the reader accepts (plain files; compressed ones once the reader detects them from the bytes). Seeds:
// tests/fuzz/corpus/tfrecord/ (shards written by terngrad-data's converters).
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "terngrad/core/error.h"
#include "terngrad/data/tfrecord.h"

namespace {
constexpr int kMaxRecords = 1 << 16;  // a file of empty records cannot loop forever on a small input anyway

void read_all(const std::string& path, bool skip) {
  tg::TfRecordReader reader(path);
  std::string record, error;
  uint64_t offset = 0;
  for (int i = 0; i < kMaxRecords; ++i) {
    const tg::RecordStatus st = skip ? reader.skip(&offset, &error) : reader.read(&record, &offset, &error);
    if (st == tg::RecordStatus::kEnd || st == tg::RecordStatus::kCorruptFile) break;
    if (offset > reader.file_size() || reader.position() > reader.file_size()) __builtin_trap();
  }
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tg::fuzz::quiet_logging();
  tg::fuzz::remove_scratch_at_exit(".tfrecord");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = tg::fuzz::write_scratch(data, size, ".tfrecord");
  // One reader per input (each allocates a 1 MiB I/O buffer, the bulk of an execution's time under ASan);
  // the size picks the way through the file.
  switch (size % 3) {
    case 0:
      read_all(path, false);
      break;
    case 1:
      read_all(path, true);
      break;
    default:
      try {
        tg::read_all_tfrecords(path);
      } catch (const tg::Error&) {
      }
  }
  return 0;
}

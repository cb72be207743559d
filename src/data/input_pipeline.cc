// InputPipeline: threads, queues and ordering (the contract is in input_pipeline.h).
#include "terngrad/data/input_pipeline.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "terngrad/core/error.h"
#include "terngrad/core/philox.h"
#include "terngrad/data/bounded_queue.h"
#include "terngrad/data/dataset_info.h"
#include "terngrad/data/example.h"
#include "terngrad/data/image_codec.h"
#include "terngrad/data/preprocess.h"
#include "terngrad/data/tfrecord.h"

namespace fs = std::filesystem;

namespace tg {

std::vector<std::string> list_data_files(const std::string& data_dir, const std::string& subset) {
  if (data_dir.empty()) TG_THROW("--data_dir is empty");
  if (subset.empty()) TG_THROW("--subset is empty");
  std::error_code ec;
  if (!fs::is_directory(data_dir, ec)) TG_THROW("--data_dir '{}' is not a directory", data_dir);
  std::vector<std::string> files;
  const std::string prefix = subset + "-";
  for (const auto& e : fs::directory_iterator(data_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && e.is_regular_file()) files.push_back(e.path().string());
  }
  if (ec) TG_THROW("cannot list --data_dir '{}': {}", data_dir, ec.message());
  if (files.empty()) TG_THROW("no files '{}-*' in --data_dir '{}' (check --data_dir and --subset)", subset, data_dir);
  std::sort(files.begin(), files.end());
  return files;
}

ShardAssignment assign_shards(int num_files, int worker_index, int num_workers) {
  TG_CHECK(num_workers >= 1 && worker_index >= 0 && worker_index < num_workers, "worker index {} outside [0, {})",
           worker_index, num_workers);
  ShardAssignment a;
  if (num_files >= num_workers) {
    for (int f = worker_index; f < num_files; f += num_workers) a.files.push_back(f);
  } else {
    for (int f = 0; f < num_files; ++f) a.files.push_back(f);
    a.strided = num_workers > 1;
  }
  return a;
}

namespace {

// A serialized record travelling from a reader to the sequencer.
struct RawRecord {
  enum Kind { kRecord, kEndOfFile } kind = kRecord;
  int64_t epoch = 0;
  int file = 0;         // index in the sorted file list
  uint32_t index = 0;   // record number within the file
  uint64_t offset = 0;  // in the uncompressed stream for a gzip/zlib file
  TfRecordCompression compression = TfRecordCompression::kNone;
  std::string bytes;
};

// A record in sequence order, handed to a preprocess thread. kEnd closes an eval pass.
struct WorkItem {
  uint64_t seq = 0;
  bool end = false;
  RawRecord rec;
};

// One pass (epoch) over the worker's files, audited once its last record has been processed.
struct PassCount {
  uint64_t records = 0;   // this worker's records read (a corrupt file counts one)
  uint64_t bad = 0;       // of them, corrupt
  uint64_t dropped = 0;   // dropped before decoding (resume)
  uint64_t finished = 0;  // processed, found bad, or dropped
  size_t files_done = 0;
  std::string first_bad;  // the first bad record's message
};

constexpr int kLoggedCorruptRecords = 10;

// A preprocessed example waiting in the reorder window.
struct Example {
  bool ready = false, skipped = false, end = false;
  int32_t label = 0;
  int64_t epoch = 0;
  std::vector<float> image;  // (S, S, C)
};

constexpr uint32_t kStreamFiles = 0x46494c45u;    // "FILE"
constexpr uint32_t kStreamShuffle = 0x53485546u;  // "SHUF"

}  // namespace

struct InputPipeline::State {
  PipelineOptions opt;
  PreprocessSpec spec;
  bool has_gray_images = false;  // the dataset's (dataset_info.h)
  std::vector<std::string> files;
  ShardAssignment assignment;
  int num_readers = 1;
  size_t example_floats = 0;

  std::vector<std::unique_ptr<BoundedQueue<RawRecord>>> reader_queues;
  std::unique_ptr<BoundedQueue<WorkItem>> work;
  std::unique_ptr<BoundedQueue<Batch>> prefetch;

  // Reorder window: slot seq % window holds the example of sequence number seq.
  std::mutex window_mu;
  std::condition_variable window_cv;
  std::vector<Example> window;
  uint64_t next_consume = 0;

  std::mutex free_mu;
  std::vector<Batch> free_batches;

  std::atomic<bool> stop{false};
  std::atomic<const std::atomic<bool>*> stop_flag{nullptr};  // the caller's (set_stop_flag)
  std::mutex error_mu;
  std::string error;
  std::atomic<int64_t> skipped{0}, delivered{0}, last_epoch{0};

  // Pass audit and the distinct bad records (file, offset).
  std::mutex pass_mu;
  std::map<int64_t, PassCount> passes;
  std::set<std::pair<int, uint64_t>> bad_records;

  std::vector<std::thread> threads;

  void fail(const std::string& msg) {
    {
      std::lock_guard<std::mutex> lock(error_mu);
      if (error.empty()) error = msg;
    }
    shutdown();
  }

  void shutdown() {
    stop = true;
    for (auto& q : reader_queues) q->close();
    if (work) work->close();
    if (prefetch) prefetch->close();
    std::lock_guard<std::mutex> lock(window_mu);
    window_cv.notify_all();
  }

  // A corrupt record of pass `epoch` at (file, offset): stops the pipeline with the message, or, when skipping
  // is on, is counted (once per record, whatever the pass) and logged (the first few) and the pass audited.
  void corrupt(int64_t epoch, int file, uint64_t offset, const std::string& msg) {
    if (!opt.data.skip_corrupt_records) {
      fail(msg +
           " (--skip_corrupt_records skips and counts such records; `terngrad-data inspect FILE` checks a "
           "file's every record)");
      return;
    }
    bool first_time;
    {
      std::lock_guard<std::mutex> lock(pass_mu);
      first_time = bad_records.insert({file, offset}).second;
    }
    if (first_time) {
      const int64_t n = ++skipped;
      if (n <= kLoggedCorruptRecords) spdlog::warn("skipping corrupt record: {}", msg);
      if (n == kLoggedCorruptRecords)
        spdlog::warn("--skip_corrupt_records: {} corrupt records so far; the others are counted, not logged",
                     kLoggedCorruptRecords);
    }
    finished(epoch, true, false, msg);
  }

  // Pass book-keeping: a record of `epoch` was read (before it is handed on), processed (bad or not) or
  // dropped, or a file of it was read to its end. The pass is audited when its files are all read and its
  // records all finished.
  void record_read(int64_t epoch) {
    std::lock_guard<std::mutex> lock(pass_mu);
    ++passes[epoch].records;
  }
  void finished(int64_t epoch, bool bad, bool dropped, const std::string& msg = "") {
    std::string verdict;
    {
      std::lock_guard<std::mutex> lock(pass_mu);
      PassCount& c = passes[epoch];
      ++c.finished;
      if (dropped) ++c.dropped;
      if (bad && ++c.bad == 1) c.first_bad = msg;
      verdict = audit(epoch);
    }
    if (!verdict.empty()) fail(verdict);
  }
  void file_done(int64_t epoch) {
    std::string verdict;
    {
      std::lock_guard<std::mutex> lock(pass_mu);
      ++passes[epoch].files_done;
      verdict = audit(epoch);
    }
    if (!verdict.empty()) fail(verdict);
  }
  // Under pass_mu: the error a complete pass gives ("" when it is fine or not complete yet).
  std::string audit(int64_t epoch) {
    auto it = passes.find(epoch);
    const PassCount c = it->second;
    if (c.files_done < assignment.files.size() || c.finished < c.records) return "";
    passes.erase(it);
    const std::string what =
        fmt::format("--data_dir '{}': a whole pass over the {} file{} '{}-*'{}", opt.data_dir, assignment.files.size(),
                    assignment.files.size() == 1 ? "" : "s", opt.subset,
                    opt.num_workers > 1 ? fmt::format(" of worker {} of {}", opt.worker_index, opt.num_workers) : "");
    if (c.records == 0) return what + " found no record (empty files?)";
    const uint64_t judged = c.records - c.dropped;
    if (judged == 0) return "";
    if (c.bad == judged)
      return fmt::format("{} found no usable record ({} bad, the first: {})", what, c.bad, c.first_bad);
    if (static_cast<double>(c.bad) > opt.data.max_corrupt_fraction * static_cast<double>(judged))
      return fmt::format("{} found {} bad records of {} ({:.2f}%), more than --max_corrupt_fraction {} (the first: {})",
                         what, c.bad, judged, 100.0 * static_cast<double>(c.bad) / static_cast<double>(judged),
                         opt.data.max_corrupt_fraction, c.first_bad);
    return "";
  }

  // File order of an epoch: train shuffles this worker's files with Philox(seed, epoch); eval keeps them sorted.
  std::vector<int> epoch_order(int64_t epoch) const {
    std::vector<int> order = assignment.files;
    if (!opt.train) return order;
    PhiloxKey key = philox_key(opt.seed, kStreamFiles);
    for (size_t i = order.size(); i > 1; --i) {
      float u = philox_uniform(key, i, static_cast<uint32_t>(epoch), static_cast<uint32_t>(epoch >> 32), 0);
      size_t j = std::min(i - 1, static_cast<size_t>(u * static_cast<float>(i)));
      std::swap(order[i - 1], order[j]);
    }
    return order;
  }

  bool owns_record(int file, uint32_t index) const {
    if (!assignment.strided) return true;
    return (static_cast<uint64_t>(index) + file) % opt.num_workers == static_cast<uint64_t>(opt.worker_index);
  }

  // Reader r reads positions r, r + R, ... of each epoch's file order into its own queue, ending every file
  // with a kEndOfFile marker so the sequencer can move to the next position.
  void reader_loop(int r) {
    try {
      for (int64_t epoch = opt.start_epoch; !stop; ++epoch) {
        std::vector<int> order = epoch_order(epoch);
        for (size_t p = r; p < order.size() && !stop; p += num_readers) read_file(r, epoch, order[p]);
        if (!opt.train) break;
      }
    } catch (const std::exception& e) {
      fail(e.what());
    }
  }

  void read_file(int r, int64_t epoch, int file) {
    TfRecordReader reader(files[file]);
    BoundedQueue<RawRecord>& q = *reader_queues[r];
    std::string error;
    for (uint32_t index = 0; !stop; ++index) {
      RawRecord rec;
      rec.epoch = epoch;
      rec.file = file;
      rec.index = index;
      rec.compression = reader.compression();
      const bool mine = owns_record(file, index);
      RecordStatus st = mine ? reader.read(&rec.bytes, &rec.offset, &error) : reader.skip(&rec.offset, &error);
      if (st == RecordStatus::kEnd) break;
      if (st == RecordStatus::kCorruptFile) {  // the rest of the file is lost: one bad record
        record_read(epoch);
        corrupt(epoch, file, rec.offset, error);
        break;
      }
      if (st == RecordStatus::kCorruptRecord) {
        if (mine) {
          record_read(epoch);
          corrupt(epoch, file, rec.offset, error);
        }
        continue;
      }
      if (!mine) continue;
      record_read(epoch);
      if (!q.push(std::move(rec))) return;
    }
    if (stop) return;
    file_done(epoch);
    RawRecord eof;
    eof.kind = RawRecord::kEndOfFile;
    q.push(std::move(eof));
  }

  // Merges the readers' queues in file-order position, runs the shuffle buffer, numbers the records.
  void sequencer_loop() {
    try {
      uint64_t seq = 0, draws = 0, dropped = 0;
      std::vector<RawRecord> buffer;
      const size_t cap = opt.train ? static_cast<size_t>(std::max<int64_t>(1, opt.data.shuffle_buffer)) : 1;
      if (cap > 1) buffer.reserve(cap);
      const PhiloxKey key = philox_key(opt.seed ^ (static_cast<uint64_t>(opt.worker_index) << 32), kStreamShuffle);
      auto emit = [&](RawRecord&& rec) {
        if (dropped < opt.skip_records) {  // resume: already trained on; the shuffle draws above still ran
          ++dropped;
          finished(rec.epoch, false, true);
          return true;
        }
        WorkItem item;
        item.seq = seq++;
        item.rec = std::move(rec);
        return work->push(std::move(item));
      };
      const size_t files_per_epoch = assignment.files.size();
      for (int64_t epoch = opt.start_epoch; !stop; ++epoch) {
        for (size_t p = 0; p < files_per_epoch && !stop; ++p) {
          BoundedQueue<RawRecord>& q = *reader_queues[p % num_readers];
          RawRecord rec;
          while (q.pop(&rec) && rec.kind == RawRecord::kRecord) {
            if (cap <= 1) {
              if (!emit(std::move(rec))) return;
              continue;
            }
            buffer.push_back(std::move(rec));
            if (buffer.size() < cap) continue;
            const uint64_t d = draws++;
            float u = philox_uniform(key, d, 0, 0, 0);
            size_t j = std::min(buffer.size() - 1, static_cast<size_t>(u * static_cast<float>(buffer.size())));
            std::swap(buffer[j], buffer.back());
            RawRecord out = std::move(buffer.back());
            buffer.pop_back();
            if (!emit(std::move(out))) return;
          }
          if (stop) return;
        }
        if (!opt.train) break;
      }
      // Eval only (train never leaves the loop but through stop): everything is emitted, then the end marker.
      WorkItem end;
      end.seq = seq;
      end.end = true;
      work->push(std::move(end));
    } catch (const std::exception& e) {
      fail(e.what());
    }
  }

  void preprocess_loop() {
    try {
      WorkItem item;
      while (work->pop(&item)) {
        Example ex;
        ex.end = item.end;
        if (!item.end) {
          process(item.rec, &ex);
          if (!ex.skipped) finished(item.rec.epoch, false, false);  // a skipped one was counted by corrupt()
        }
        ex.ready = true;
        std::unique_lock<std::mutex> lock(window_mu);
        window_cv.wait(lock, [&] { return stop || item.seq < next_consume + window.size(); });
        if (stop) return;
        window[item.seq % window.size()] = std::move(ex);
        window_cv.notify_all();
      }
    } catch (const std::exception& e) {
      fail(e.what());
    }
  }

  void process(const RawRecord& rec, Example* ex) {
    const std::string where = describe_record(files[rec.file], rec.offset, rec.compression);
    ex->epoch = rec.epoch;
    try {
      ImageExample parsed = parse_image_example(rec.bytes, where);
      if (parsed.label < 0 || parsed.label >= opt.num_classes)
        TG_THROW("{}: label {} outside [0, {}) (--num_classes)", where, parsed.label, opt.num_classes);
      // The image's own channel count, checked against the dataset's: a gray image where the dataset is in
      // color is the wrong data (Fashion-MNIST read as CIFAR-10) unless the dataset has gray images among its
      // color ones (ImageNet's few grayscale JPEGs are converted); color images are converted to gray for MNIST.
      Image img = decode_image(parsed.encoded, parsed.format, parsed.height, parsed.width, parsed.channels, 0, where);
      if (img.channels < spec.channels && !has_gray_images)
        throw DatasetMismatchError(
            fmt::format("{}: a {}-channel image where {} has {}-channel images: --data_dir '{}' does not "
                        "hold {} data (check --dataset and --data_dir)",
                        where, img.channels, opt.dataset, spec.channels, opt.data_dir, opt.dataset));
      img = convert_channels(std::move(img), spec.channels);
      AugmentRng rng(opt.seed, static_cast<uint32_t>(rec.epoch), static_cast<uint32_t>(rec.file), rec.index);
      ex->image.resize(example_floats);
      preprocess_image(img, spec, rng, ex->image.data(), where);
      ex->label = static_cast<int32_t>(parsed.label);
    } catch (const DatasetMismatchError&) {  // the wrong data (channel count), never skipped as corrupt
      throw;
    } catch (const Error& e) {
      corrupt(rec.epoch, rec.file, rec.offset, e.what());  // stops the pipeline unless --skip_corrupt_records
      ex->skipped = true;
      ex->image.clear();
    }
  }

  Batch fresh_batch() {
    Batch b;
    {
      std::lock_guard<std::mutex> lock(free_mu);
      if (!free_batches.empty()) {
        b = std::move(free_batches.back());
        free_batches.pop_back();
      }
    }
    b.batch_size = opt.batch_size;
    b.image_size = opt.image_size;
    b.channels = spec.channels;
    b.count = 0;
    b.images.resize(static_cast<size_t>(opt.batch_size) * example_floats);
    b.labels.assign(opt.batch_size, -1);
    return b;
  }

  void batcher_loop() {
    try {
      Batch batch = fresh_batch();
      for (;;) {
        Example ex;
        uint64_t consumed = 0;  // sequence records consumed once this example is taken
        {
          std::unique_lock<std::mutex> lock(window_mu);
          Example* slot = &window[next_consume % window.size()];
          window_cv.wait(lock, [&] { return stop || slot->ready; });
          if (stop) return;
          ex = std::move(*slot);
          *slot = Example();
          consumed = ++next_consume;
          window_cv.notify_all();
        }
        if (ex.end) {
          if (batch.count > 0) {
            std::fill(batch.images.begin() + static_cast<size_t>(batch.count) * example_floats, batch.images.end(),
                      0.0f);
            prefetch->push(std::move(batch));
          }
          prefetch->close();
          return;
        }
        if (ex.skipped) continue;
        batch.records_end = opt.skip_records + consumed;
        std::copy(ex.image.begin(), ex.image.end(),
                  batch.images.begin() + static_cast<size_t>(batch.count) * example_floats);
        batch.labels[batch.count] = ex.label;
        batch.epoch = ex.epoch;
        if (++batch.count == opt.batch_size) {
          if (!prefetch->push(std::move(batch))) return;
          batch = fresh_batch();
        }
      }
    } catch (const std::exception& e) {
      fail(e.what());
    }
  }
};

InputPipeline::InputPipeline(const PipelineOptions& options) : s_(std::make_unique<State>()) {
  State& s = *s_;
  s.opt = options;
  PipelineOptions& o = s.opt;
  const DatasetInfo data = dataset_info(o.dataset, o.data_dir);  // validates --dataset
  PreprocessKind kind = preprocess_kind_for(o.dataset, o.imagenet_preprocessing);
  if (o.image_size == 0) o.image_size = static_cast<int>(data.default_image_size);
  if (o.num_classes == 0) o.num_classes = static_cast<int>(data.num_classes);
  if (o.image_size < 1) TG_THROW("--image_size {} must be positive", o.image_size);
  if (o.batch_size < 1) TG_THROW("--batch_size {} must be positive", o.batch_size);
  if (o.num_classes < 1) TG_THROW("--num_classes {} must be positive", o.num_classes);
  check_flags(data_flags(), o.data);  // the input flags' own checks (data_config.h)
  if (o.num_workers < 1 || o.worker_index < 0 || o.worker_index >= o.num_workers)
    TG_THROW("worker index {} outside [0, {})", o.worker_index, o.num_workers);
  if (o.prefetch_batches < 1) o.prefetch_batches = 1;
  s.spec = PreprocessSpec{kind, o.image_size, static_cast<int>(data.channels), o.train};
  s.has_gray_images = data.has_gray_images;
  s.example_floats = static_cast<size_t>(o.image_size) * o.image_size * s.spec.channels;
  s.files = list_data_files(o.data_dir, o.subset);
  {
    uint64_t bytes = 0;
    for (const auto& f : s.files) {
      std::error_code ec;
      const uintmax_t n = fs::file_size(f, ec);
      bytes += ec ? 1 : n;  // unreadable sizes are the reader's to report
    }
    if (bytes == 0)
      TG_THROW("--data_dir '{}': the {} file{} '{}-*' {} empty: no record to read", o.data_dir, s.files.size(),
               s.files.size() == 1 ? "" : "s", o.subset, s.files.size() == 1 ? "is" : "are all");
  }
  s.assignment = assign_shards(static_cast<int>(s.files.size()), o.worker_index, o.num_workers);
  s.num_readers = std::min<int>(o.data.num_readers, static_cast<int>(s.assignment.files.size()));

  for (int r = 0; r < s.num_readers; ++r) s.reader_queues.push_back(std::make_unique<BoundedQueue<RawRecord>>(64));
  s.work = std::make_unique<BoundedQueue<WorkItem>>(2 * o.data.num_preprocess_threads + 2);
  s.prefetch = std::make_unique<BoundedQueue<Batch>>(o.prefetch_batches);
  s.window.resize(std::max<size_t>(16, 4 * static_cast<size_t>(o.data.num_preprocess_threads)));

  try {
    for (int r = 0; r < s.num_readers; ++r) s.threads.emplace_back([&s, r] { s.reader_loop(r); });
    s.threads.emplace_back([&s] { s.sequencer_loop(); });
    for (int t = 0; t < o.data.num_preprocess_threads; ++t) s.threads.emplace_back([&s] { s.preprocess_loop(); });
    s.threads.emplace_back([&s] { s.batcher_loop(); });
  } catch (...) {
    s.shutdown();
    for (auto& t : s.threads) t.join();
    throw;
  }
}

// The total of skipped records is reported once, by the owner (trainer, evaluator): skipped_records().
InputPipeline::~InputPipeline() {
  s_->shutdown();
  for (auto& t : s_->threads) t.join();
}

void InputPipeline::set_stop_flag(const std::atomic<bool>* stop) { s_->stop_flag = stop; }

bool InputPipeline::next(Batch* out) {
  State& s = *s_;
  Batch b;
  bool got = false;
  for (;;) {
    const std::atomic<bool>* stop = s.stop_flag.load();
    if (!stop) {
      got = s.prefetch->pop(&b);
      break;
    }
    using Pop = BoundedQueue<Batch>::PopResult;
    const Pop r = s.prefetch->pop_for(&b, std::chrono::milliseconds(100));
    if (r != Pop::kTimeout) {
      got = r == Pop::kItem;
      break;
    }
    if (stop->load()) throw InputInterrupted("stopped on request while waiting for the input pipeline");
  }
  {
    std::lock_guard<std::mutex> lock(s.error_mu);
    if (!s.error.empty()) throw Error(s.error);
  }
  if (!got) return false;
  std::swap(*out, b);
  if (b.images.size() == out->images.size()) {  // recycle the caller's previous buffers
    std::lock_guard<std::mutex> lock(s.free_mu);
    if (s.free_batches.size() < 2) s.free_batches.push_back(std::move(b));
  }
  s.delivered += out->count;
  s.last_epoch = out->epoch;
  return true;
}

int64_t InputPipeline::epoch() const { return s_->last_epoch; }
int64_t InputPipeline::skipped_records() const { return s_->skipped; }
int64_t InputPipeline::records_delivered() const { return s_->delivered; }
const PipelineOptions& InputPipeline::options() const { return s_->opt; }
const std::vector<std::string>& InputPipeline::files() const { return s_->files; }
const ShardAssignment& InputPipeline::assignment() const { return s_->assignment; }

}  // namespace tg

// Checkpoints: `train_dir/model.ckpt-<step>` files (format in proto/checkpoint.proto: magic, protobuf header
// with a tensor table, raw data, crc32c per tensor) and the text index `train_dir/checkpoint` naming the
// latest, in TensorFlow's format (model_checkpoint_path: "model.ckpt-<step>"). Files are written to a
// temporary name, fsynced and renamed, so a crash never leaves a torn checkpoint under its final name.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "terngrad/core/slab.h"
#include "terngrad/core/tensor.h"

namespace tg {

constexpr uint32_t kCheckpointFormatVersion = 1;

// The tensor names of a training checkpoint: each part's tensors under the part's prefix, e.g.
// "params/conv1/weights", "ema/conv1/weights/ExponentialMovingAverage". Trainer, checkpoint digest and
// evaluator name tensors only through it.
struct CheckpointLayout {
  enum Part { kParams, kState, kEma, kSlots };  // parameters, BN statistics, their moving averages, optimizer slots
  static constexpr Part kParts[] = {kParams, kState, kEma, kSlots};  // in the order a checkpoint holds them

  static const char* prefix(Part part);  // "params/", "state/", "ema/", "slots/"
  static std::string name(Part part, const std::string& tensor) { return prefix(part) + tensor; }
  static bool is_in(Part part, const std::string& name);  // name starts with part's prefix
};

struct CheckpointMeta {
  std::string model, dataset;
  int64_t image_size = 0, channels = 0, num_classes = 0;
  int64_t step = 0;
  uint64_t data_cursor = 0;
  std::map<std::string, std::string> flags;
  std::string parameter_digest;  // filled by the writer from the tensors of CheckpointLayout::kParams
  // Per-rank state: in a checkpoint, the number of rank files beside it (0: none); in a rank file, its rank.
  int64_t rank_files = 0;
  std::string topology;  // the job's shape when written (Topology::describe)
};

// A named host tensor to save (the caller copies device tensors to the host first).
struct NamedTensor {
  std::string name;
  Tensor tensor;  // host
};

// Writes path atomically; returns the parameter digest it recorded.
std::string write_checkpoint(const std::string& path, CheckpointMeta meta, const std::vector<NamedTensor>& tensors);

class CheckpointReader {
 public:
  explicit CheckpointReader(const std::string& path);  // reads and verifies the header; errors name the file
  const CheckpointMeta& meta() const { return meta_; }
  const std::string& path() const { return path_; }
  std::vector<std::string> names() const;
  Shape shape(const std::string& name) const;
  // Reads tensor `name` into a host tensor of the same shape and dtype, verifying its crc32c.
  void read(const std::string& name, const Tensor& dst) const;

 private:
  struct Entry {
    Shape shape;
    DType dtype;
    uint64_t offset, bytes;
    uint32_t crc;
  };
  std::string path_;
  CheckpointMeta meta_;
  uint64_t data_offset_ = 0;
  std::map<std::string, Entry> table_;
};

class Backend;
// Fills every tensor of `slab` (on backend's device) from the checkpoint tensor named name_of(entry name),
// staged through one host buffer; shapes, dtypes and checksums are checked by read().
void read_slab(const CheckpointReader& reader, Backend& backend, const Slab& slab,
               const std::function<std::string(const std::string&)>& name_of);

std::string checkpoint_path(const std::string& train_dir, int64_t step);  // train_dir/model.ckpt-<step>
// The per-rank state file of `rank` beside checkpoint `step`: train_dir/model.ckpt-<step>.rank-<rank> (written by
// the process holding that rank, same format and atomic protocol, before the checkpoint itself).
std::string checkpoint_rank_path(const std::string& train_dir, int64_t step, int rank);
// Rank files whose checkpoint does not exist (a run killed after its ranks wrote them, before the chief wrote the
// checkpoint), sorted.
std::vector<std::string> orphan_rank_files(const std::string& train_dir);
// Updates train_dir/checkpoint to name `step` as the latest (and lists the kept ones), atomically.
void write_checkpoint_index(const std::string& train_dir, const std::vector<int64_t>& kept_steps);
// The latest checkpoint's path from train_dir/checkpoint, or nullopt when there is none.
std::optional<std::string> latest_checkpoint(const std::string& train_dir);
// Steps of the model.ckpt-* files present in train_dir, ascending.
std::vector<int64_t> list_checkpoint_steps(const std::string& train_dir);

// crc32c of bytes as 8 hex digits (the digest logged at every save).
std::string digest_hex(uint32_t crc);

}  // namespace tg

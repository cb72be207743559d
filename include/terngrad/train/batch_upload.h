// BatchUpload: a step's input batch on its way to the devices without stalling them (the trainer's input path).
//   - Two host batches (images f32 (B, S, S, C), labels i32 (B); B the process batch) in staging memory
//     (Backend::staging_allocator: page-locked on a GPU): the batch source fills one while the devices may still
//     be copying the other.
//   - Per replica, two device batches of its workers' rows: step t's rows go into one of them on the copy engine
//     (Backend::upload_async) while the device may still compute step t-1 on the other; a fence recorded when the
//     previous step began keeps the copy from overwriting rows that step t-2 still reads. The workers' forward then
//     reads its slice on the device.
//   - Constant images (--benchmark_mode's synthetic input): uploaded once, kept on each device; only the labels
//     travel each step.
// host_batch(t) first waits, where it must, for the uploads of step t-2 that read the same host batch: the one
// host synchronisation a steady step needs (none when an earlier one, e.g. a log step's loss read, covered it).
// Worker w of the process reads rows [w * worker_batch, (w + 1) * worker_batch) of the batch.
#pragma once

#include <cstdint>
#include <vector>

#include "terngrad/backend/backend.h"
#include "terngrad/core/buffer.h"

namespace tg {

class BatchUpload {
 public:
  // backends[d]: replica d's backend; replica_workers[d]: the process's workers it computes (their indices, in the
  // order it runs them); image_shape: one image (S, S, C).
  BatchUpload(std::vector<Backend*> backends, std::vector<std::vector<int>> replica_workers, int64_t worker_batch,
              const Shape& image_shape, bool constant_images);
  BatchUpload(const BatchUpload&) = delete;
  BatchUpload& operator=(const BatchUpload&) = delete;

  struct Batch {
    Tensor images, labels;
  };
  // The host batch the source fills for step t (main thread).
  Batch host_batch(int64_t t);
  // On replica d's thread, before its workers run step t: enqueues the upload of its rows of step t's batch.
  void upload(int d, int64_t t);
  // Replica d's k-th worker's rows of step t's batch on its device (valid after upload(d, t)).
  Batch worker_batch(int d, int k, int64_t t) const;

 private:
  struct Replica {
    Backend* backend;
    std::vector<int> workers;
    Buffer images[2], labels[2];    // device: the replica's rows of two steps
    uint64_t fence[2] = {0, 0};     // ops that read images/labels[k] were enqueued before this fence
    uint64_t uploaded[2] = {0, 0};  // the last upload ticket that read host batch k
    bool images_resident = false;   // constant images: uploaded once
  };
  int64_t worker_batch_;
  Shape image_shape_;
  int64_t image_elems_;  // per image
  bool constant_images_;
  Buffer host_images_[2], host_labels_[2];
  std::vector<Replica> replicas_;
};

}  // namespace tg

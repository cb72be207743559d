// BatchUpload: two staging host batches, two device batches per replica, uploads fenced behind the step that last
// read their rows (include/terngrad/train/batch_upload.h).
#include "terngrad/train/batch_upload.h"

#include <cstring>
#include <utility>

#include "terngrad/core/error.h"

namespace tg {

BatchUpload::BatchUpload(std::vector<Backend*> backends, std::vector<std::vector<int>> replica_workers,
                         int64_t worker_batch, const Shape& image_shape, bool constant_images)
    : worker_batch_(worker_batch),
      image_shape_(image_shape),
      image_elems_(image_shape.numel()),
      constant_images_(constant_images) {
  TG_CHECK(!backends.empty() && backends.size() == replica_workers.size() && worker_batch > 0,
           "batch upload: {} backends for {} replicas, worker batch {}", backends.size(), replica_workers.size(),
           worker_batch);
  int workers = 0;
  for (const auto& w : replica_workers) workers += static_cast<int>(w.size());
  const int64_t rows = worker_batch * workers;
  Allocator& staging = backends[0]->staging_allocator();  // page-locked memory is every device's
  for (int k = 0; k < 2; ++k) {
    host_images_[k] = Buffer(staging, static_cast<size_t>(rows * image_elems_) * sizeof(float));
    host_labels_[k] = Buffer(staging, static_cast<size_t>(rows) * sizeof(int32_t));
    std::memset(host_images_[k].data(), 0, host_images_[k].bytes());  // first touch at setup, not in a step
    std::memset(host_labels_[k].data(), 0, host_labels_[k].bytes());
  }
  replicas_.resize(backends.size());
  for (size_t d = 0; d < backends.size(); ++d) {
    Replica& r = replicas_[d];
    r.backend = backends[d];
    r.workers = std::move(replica_workers[d]);
    const int64_t own = worker_batch * static_cast<int64_t>(r.workers.size());
    for (int k = 0; k < 2; ++k) {
      if (k == 0 || !constant_images_)
        r.images[k] = Buffer(r.backend->allocator(), static_cast<size_t>(own * image_elems_) * sizeof(float));
      r.labels[k] = Buffer(r.backend->allocator(), static_cast<size_t>(own) * sizeof(int32_t));
      // Zeroed (a warm-up step may read them before the first upload): not a step's work.
      for (Buffer* b : {&r.images[k], &r.labels[k]})
        if (!b->empty())
          r.backend->zero(Tensor(b->data(), Shape{static_cast<int64_t>(b->bytes())}, DType::kU8, r.backend->device()));
    }
  }
}

BatchUpload::Batch BatchUpload::host_batch(int64_t t) {
  const int k = static_cast<int>(t % 2);
  for (Replica& r : replicas_)  // the uploads of step t - 2 read this host batch
    if (r.uploaded[k] != 0) r.backend->wait_transfer(r.uploaded[k]);
  const int64_t rows = static_cast<int64_t>(host_labels_[k].bytes() / sizeof(int32_t));
  Shape images{rows, image_shape_[0], image_shape_[1], image_shape_[2]};
  return {Tensor(host_images_[k].data(), images, DType::kF32, Device::cpu()),
          Tensor(host_labels_[k].data(), Shape{rows}, DType::kI32, Device::cpu())};
}

void BatchUpload::upload(int d, int64_t t) {
  Replica& r = replicas_[d];
  Backend& be = *r.backend;
  const int k = static_cast<int>(t % 2);
  const uint64_t now = be.record_fence();  // the ops of the steps before t
  const uint64_t after = r.fence[k];       // the ops of steps up to t - 2: the last readers of device batch k
  const bool images = !(constant_images_ && r.images_resident);
  const int ik = constant_images_ ? 0 : k;
  const int64_t image_bytes = worker_batch_ * image_elems_ * static_cast<int64_t>(sizeof(float));
  const int64_t label_bytes = worker_batch_ * static_cast<int64_t>(sizeof(int32_t));
  auto* host_images = static_cast<char*>(host_images_[k].data());
  auto* host_labels = static_cast<char*>(host_labels_[k].data());
  for (size_t j = 0; j < r.workers.size(); ++j) {
    const int64_t w = r.workers[j];
    auto bytes = [](void* p, int64_t n, Device dev) { return Tensor(p, Shape{n}, DType::kU8, dev); };
    if (images)
      r.uploaded[k] =
          be.upload_async(bytes(static_cast<char*>(r.images[ik].data()) + j * image_bytes, image_bytes, be.device()),
                          bytes(host_images + w * image_bytes, image_bytes, Device::cpu()), after);
    r.uploaded[k] =
        be.upload_async(bytes(static_cast<char*>(r.labels[k].data()) + j * label_bytes, label_bytes, be.device()),
                        bytes(host_labels + w * label_bytes, label_bytes, Device::cpu()), after);
  }
  r.images_resident = true;
  r.fence[1 - k] = now;  // device batch 1 - k was last read by step t - 1
}

BatchUpload::Batch BatchUpload::worker_batch(int d, int k, int64_t t) const {
  const Replica& r = replicas_[d];
  const int b = static_cast<int>(t % 2);
  const int ib = constant_images_ ? 0 : b;
  Shape images{worker_batch_, image_shape_[0], image_shape_[1], image_shape_[2]};
  const Device dev = r.backend->device();
  return {Tensor(static_cast<char*>(r.images[ib].data()) +
                     static_cast<size_t>(k * worker_batch_ * image_elems_) * sizeof(float),
                 images, DType::kF32, dev),
          Tensor(static_cast<char*>(r.labels[b].data()) + static_cast<size_t>(k * worker_batch_) * sizeof(int32_t),
                 Shape{worker_batch_}, DType::kI32, dev)};
}

}  // namespace tg

// Synthetic input for --benchmark_mode (the reference's: images of 0.5, random labels).
#include <algorithm>

#include "terngrad/core/philox.h"
#include "terngrad/train/batch_source.h"

namespace tg {

void SyntheticBatchSource::next(const Tensor& images, const Tensor& labels) {
  float* x = images.data<float>();
  std::fill(x, x + images.numel(), 0.5f);
  int32_t* y = labels.data<int32_t>();
  const PhiloxKey key = philox_key(seed_, 0x53594eu /* "SYN" */);
  for (int64_t i = 0; i < labels.numel(); ++i) {
    float u = philox_uniform(key, first_row_ + static_cast<uint64_t>(i), static_cast<uint32_t>(batches_),
                             static_cast<uint32_t>(batches_ >> 32), 0);
    y[i] = std::min<int32_t>(static_cast<int32_t>(num_classes_ - 1), static_cast<int32_t>(u * num_classes_));
  }
  ++batches_;
}

}  // namespace tg

// The fixed order in which batch norm adds up its statistics, written once for the CPU loops
// (src/backend/cpu/cpu_batch_norm.cc) and the CUDA kernels (kernels/batch_norm_kernels.cu), so both give the same
// bits at any thread count: the rows are cut into chunks of kBnChunkRows; each chunk's per-channel sums are
// accumulated in double in row order; the chunks' sums are added in groups of kBnGroupChunks consecutive chunks, in
// chunk order, starting from 0; the groups' sums are added in group order, starting from 0. The two levels let the
// GPU add each group in a thread of its own instead of one thread walking every chunk of a channel (12.5 thousand at
// ResNet-50's batch 256).
#pragma once

#include <cstdint>

#include "terngrad/core/host_device.h"

namespace tg {

constexpr int64_t kBnChunkRows = 256;
constexpr int64_t kBnGroupChunks = 64;

TG_HOST_DEVICE int64_t bn_num_chunks(int64_t rows) { return (rows + kBnChunkRows - 1) / kBnChunkRows; }
TG_HOST_DEVICE int64_t bn_num_groups(int64_t chunks) { return (chunks + kBnGroupChunks - 1) / kBnGroupChunks; }

// A moving statistic after one training step: decay * moving + (1 - decay) * batch, rounded as scale() then axpy()
// round it (the product with decay, the product with 1 - decay, their sum; built without contraction).
TG_HOST_DEVICE float bn_moving_update(float moving, float batch, float decay) {
  const float kept = moving * decay;
  return kept + (1.f - decay) * batch;
}

}  // namespace tg

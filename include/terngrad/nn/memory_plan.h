// Memory planning of a training step: where in one arena each of a Net's per-step buffers lives (activations,
// their gradients, the gradient parts of a tensor read by several layers, the tensors a layer saves for its
// backward). A step is a sequence of time slots, forward then backward (Net: node i's forward at slot i, its
// backward at slot 2N-1-i); a buffer is live over one or more inclusive ranges of slots, and two buffers live in a
// common slot never share a byte. The plan only assigns offsets: it is the same on every backend, and the CPU and
// CUDA arenas carry it out.
//
//   MemoryPlan::kLiveness  buffers placed by liveness (greedy by size, best-fitting gap; TFLite's and MXNet's
//                          planners do the same), so a buffer's bytes are reused once its last reader is done;
//   MemoryPlan::kNone      every buffer its own bytes for the whole step (for debugging: the same arithmetic, so
//                          the same bits, as the liveness plan).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "terngrad/core/enum_names.h"

namespace tg {

// --memory_plan
enum class MemoryPlan { kLiveness, kNone };
template <>
struct EnumNames<MemoryPlan> : EnumNamesBase {
  static constexpr const char* kFlag = "--memory_plan";
  static constexpr EnumName<MemoryPlan> kList[] = {{MemoryPlan::kLiveness, "liveness"}, {MemoryPlan::kNone, "none"}};
};

// --recompute: which activations are dropped after the forward and computed again in the backward, from the
// inputs kept for it (Chen et al. 2016, "Training deep nets with sublinear memory cost"; PyTorch's checkpoint).
//   kNone    keep everything a backward reads;
//   kBnRelu  batch norm outputs and the ReLUs over them: recomputed from the kept convolution output and the
//            batch statistics the forward saved (one affine pass and one max per element: a few percent of a
//            step), never the moving statistics;
//   kBlocks  every output read by one layer only: only the tensors several layers read are kept (a residual
//            block's or an Inception block's input and output), and each block is computed again, from its
//            input, when the backward reaches it (Chen et al.'s checkpoints at the network's own boundaries: about
//            one more forward per step). A chain (LeNet) has no such tensor and gains nothing.
enum class Recompute { kNone, kBnRelu, kBlocks };
template <>
struct EnumNames<Recompute> : EnumNamesBase {
  static constexpr const char* kFlag = "--recompute";
  static constexpr EnumName<Recompute> kList[] = {
      {Recompute::kNone, "none"}, {Recompute::kBnRelu, "bn_relu"}, {Recompute::kBlocks, "blocks"}};
};

// Offsets inside the arena are aligned to this many bytes (a cache line; what oneDNN and vector loads like).
constexpr size_t kArenaAlignment = 64;

struct LiveRange {
  int begin = 0, end = 0;  // inclusive time slots
};

// One buffer to place: its size, when it is live, and (the result) its offset.
struct PlannedBuffer {
  size_t bytes = 0;
  std::vector<LiveRange> live;  // disjoint, in time order
  size_t offset = 0;            // set by place_buffers
};

bool live_at_once(const PlannedBuffer& a, const PlannedBuffer& b);

// Sets every buffer's offset (kArenaAlignment-aligned) and returns the arena's bytes: with kLiveness no two
// buffers that are live at once overlap; with kNone no two buffers overlap at all.
size_t place_buffers(std::vector<PlannedBuffer>& buffers, MemoryPlan plan);

// The most bytes live in any one slot (each buffer rounded up to kArenaAlignment): no placement can use less.
size_t peak_live_bytes(const std::vector<PlannedBuffer>& buffers, int* at_slot = nullptr);

inline size_t align_up(size_t bytes, size_t alignment = kArenaAlignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

}  // namespace tg

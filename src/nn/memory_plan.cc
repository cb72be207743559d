// Placement of a step's buffers in one arena (memory_plan.h): greedy by size into the best-fitting gap.
//
// Buffers are placed largest first (ties: the earlier-born first, then the earlier declared, so a plan is the same
// on every run); each goes into the smallest gap between the already placed buffers it is live with that holds
// it, or above them all when none does. The largest-first order keeps big activations from being split around by
// small ones; on the five networks here the arena comes within a few percent of peak_live_bytes, the bound no
// placement can beat (the memory report prints both).
#include "terngrad/nn/memory_plan.h"

#include <algorithm>
#include <numeric>

#include "terngrad/core/error.h"

namespace tg {

bool live_at_once(const PlannedBuffer& a, const PlannedBuffer& b) {
  for (const LiveRange& x : a.live)
    for (const LiveRange& y : b.live)
      if (x.begin <= y.end && y.begin <= x.end) return true;
  return false;
}

size_t place_buffers(std::vector<PlannedBuffer>& buffers, MemoryPlan plan) {
  for (const PlannedBuffer& b : buffers)
    for (const LiveRange& r : b.live) TG_CHECK(r.begin <= r.end, "memory plan: live range [{}, {}]", r.begin, r.end);
  if (plan == MemoryPlan::kNone) {
    size_t end = 0;
    for (PlannedBuffer& b : buffers) {
      b.offset = end;
      end += align_up(b.bytes);
    }
    return end;
  }
  std::vector<size_t> order(buffers.size());
  std::iota(order.begin(), order.end(), size_t{0});
  auto born = [&](size_t i) { return buffers[i].live.empty() ? 0 : buffers[i].live.front().begin; };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (buffers[a].bytes != buffers[b].bytes) return buffers[a].bytes > buffers[b].bytes;
    return born(a) < born(b);
  });
  std::vector<size_t> placed;  // indices, in placement order
  size_t arena = 0;
  std::vector<std::pair<size_t, size_t>> taken;  // [offset, end) of placed buffers live with the current one
  for (size_t i : order) {
    PlannedBuffer& b = buffers[i];
    const size_t need = align_up(b.bytes);
    taken.clear();
    for (size_t j : placed)
      if (live_at_once(b, buffers[j]))
        taken.push_back({buffers[j].offset, buffers[j].offset + align_up(buffers[j].bytes)});
    std::sort(taken.begin(), taken.end());
    size_t best = SIZE_MAX, best_gap = SIZE_MAX, at = 0;
    for (const auto& [begin, end] : taken) {
      if (begin > at && begin - at >= need && begin - at < best_gap) best = at, best_gap = begin - at;
      at = std::max(at, end);
    }
    b.offset = best != SIZE_MAX ? best : at;
    arena = std::max(arena, b.offset + need);
    placed.push_back(i);
  }
  return arena;
}

size_t peak_live_bytes(const std::vector<PlannedBuffer>& buffers, int* at_slot) {
  int last = -1;
  for (const PlannedBuffer& b : buffers)
    for (const LiveRange& r : b.live) last = std::max(last, r.end);
  std::vector<int64_t> delta(static_cast<size_t>(last + 2), 0);  // a difference array over the slots
  for (const PlannedBuffer& b : buffers)
    for (const LiveRange& r : b.live) {
      delta[static_cast<size_t>(r.begin)] += static_cast<int64_t>(align_up(b.bytes));
      delta[static_cast<size_t>(r.end) + 1] -= static_cast<int64_t>(align_up(b.bytes));
    }
  size_t peak = 0;
  int64_t running = 0;
  if (at_slot) *at_slot = 0;
  for (size_t s = 0; s + 1 < delta.size(); ++s) {
    running += delta[s];
    if (static_cast<size_t>(running) > peak) {
      peak = static_cast<size_t>(running);
      if (at_slot) *at_slot = static_cast<int>(s);
    }
  }
  return peak;
}

}  // namespace tg

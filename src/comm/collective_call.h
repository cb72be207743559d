// CollectiveCall: one rank's posted call in the in-process communicators (ThreadCommunicator, LoopbackCommunicator):
// what it asked for and where its memory is; whether two ranks' calls agree, a call in words for errors, and how a
// split's colors and keys form the new groups. Internal to src/comm (not a public header).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "terngrad/comm/communicator.h"
#include "terngrad/core/dtype.h"

namespace tg::comm_detail {

enum class CollectiveKind : uint8_t { kAllreduce, kReduceScatter, kAllgather, kBroadcast, kBarrier, kSplit };

struct CollectiveCall {
  CollectiveKind kind = CollectiveKind::kBarrier;
  const void* src = nullptr;  // allgather, reduce_scatter: the send buffer; allreduce, broadcast: the buffer
  int64_t count = 0;          // allreduce: elements; reduce_scatter: elements per rank
  DType dtype = DType::kU8;
  ReduceOp op = ReduceOp::kSum;
  size_t bytes = 0;  // allgather: the send block; broadcast: the buffer
  int root = 0;      // broadcast
  int color = 0;     // split
  int key = 0;       // split
};

// Whether two ranks posted the same collective (a split's colors and keys may differ).
bool same_call(const CollectiveCall& a, const CollectiveCall& b);
// "all-reduce sum of 10 f32", "broadcast of 8 bytes from rank 0", ...
std::string describe(const CollectiveCall& c);
// The error when rank 0's and rank k's calls differ.
std::string disagreement(const std::vector<CollectiveCall>& calls, int k);

// A split of ranks 0..n-1 (each with its color and key): for each rank its new group (an index into the groups, in
// the order of their colors; -1 for a color < 0) and its rank there (ranked by (key, old rank)); `sizes` gets each
// new group's size.
struct SplitPlace {
  int group = -1;
  int rank = 0;
};
std::vector<SplitPlace> plan_split(const std::vector<int>& colors, const std::vector<int>& keys,
                                   std::vector<int>& sizes);

// The split of ranks 0..n-1 by `colors` and `keys`: each rank's new group (nullptr for a color < 0) and its rank
// there; make(n) makes a group of n ranks, once per new group, in the order of the colors.
template <typename Group, typename Make>
std::vector<std::pair<std::shared_ptr<Group>, int>> split_groups(const std::vector<int>& colors,
                                                                 const std::vector<int>& keys, Make make) {
  std::vector<int> sizes;
  const std::vector<SplitPlace> places = plan_split(colors, keys, sizes);
  std::vector<std::shared_ptr<Group>> made;
  for (int n : sizes) made.push_back(make(n));
  std::vector<std::pair<std::shared_ptr<Group>, int>> out(colors.size(), {nullptr, 0});
  for (size_t k = 0; k < places.size(); ++k)
    if (places[k].group >= 0) out[k] = {made[static_cast<size_t>(places[k].group)], places[k].rank};
  return out;
}
// The same for the split posted as `calls` (one per rank).
template <typename Group, typename Make>
std::vector<std::pair<std::shared_ptr<Group>, int>> split_groups(const std::vector<CollectiveCall>& calls, Make make) {
  std::vector<int> colors, keys;
  for (const CollectiveCall& c : calls) {
    colors.push_back(c.color);
    keys.push_back(c.key);
  }
  return split_groups<Group>(colors, keys, make);
}

}  // namespace tg::comm_detail

// The in-process communicators' posted calls and splits (see the header).
#include "src/comm/collective_call.h"

#include <fmt/format.h>

#include <algorithm>

namespace tg::comm_detail {

bool same_call(const CollectiveCall& a, const CollectiveCall& b) {
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case CollectiveKind::kAllreduce:
    case CollectiveKind::kReduceScatter:
      return a.count == b.count && a.dtype == b.dtype && a.op == b.op;
    case CollectiveKind::kAllgather:
      return a.bytes == b.bytes;
    case CollectiveKind::kBroadcast:
      return a.bytes == b.bytes && a.root == b.root;
    case CollectiveKind::kBarrier:
    case CollectiveKind::kSplit:  // colors and keys differ between ranks
      return true;
  }
  return false;
}

std::string describe(const CollectiveCall& c) {
  switch (c.kind) {
    case CollectiveKind::kAllreduce:
      return fmt::format("all-reduce {} of {} {}", enum_name(c.op), c.count, dtype_name(c.dtype));
    case CollectiveKind::kReduceScatter:
      return fmt::format("reduce-scatter {} of {} {} per rank", enum_name(c.op), c.count, dtype_name(c.dtype));
    case CollectiveKind::kAllgather:
      return fmt::format("all-gather of {} bytes", c.bytes);
    case CollectiveKind::kBroadcast:
      return fmt::format("broadcast of {} bytes from rank {}", c.bytes, c.root);
    case CollectiveKind::kSplit:
      return fmt::format("split (color {}, key {})", c.color, c.key);
    case CollectiveKind::kBarrier:
      break;
  }
  return "barrier";
}

std::string disagreement(const std::vector<CollectiveCall>& calls, int k) {
  return fmt::format(
      "ranks disagree on the collective: rank 0 called {}, rank {} called {} (every rank must post the same "
      "collectives in the same order)",
      describe(calls[0]), k, describe(calls[static_cast<size_t>(k)]));
}

std::vector<SplitPlace> plan_split(const std::vector<int>& colors, const std::vector<int>& keys,
                                   std::vector<int>& sizes) {
  const int n = static_cast<int>(colors.size());
  std::vector<int> order(static_cast<size_t>(n));
  for (int k = 0; k < n; ++k) order[static_cast<size_t>(k)] = k;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    const size_t x = static_cast<size_t>(a), y = static_cast<size_t>(b);
    return colors[x] != colors[y] ? colors[x] < colors[y] : keys[x] < keys[y];
  });
  std::vector<SplitPlace> places(static_cast<size_t>(n));
  sizes.clear();
  for (size_t i = 0; i < order.size();) {
    const int color = colors[static_cast<size_t>(order[i])];
    size_t j = i;
    while (j < order.size() && colors[static_cast<size_t>(order[j])] == color) ++j;
    if (color >= 0) {
      for (size_t k = i; k < j; ++k)
        places[static_cast<size_t>(order[k])] = {static_cast<int>(sizes.size()), static_cast<int>(k - i)};
      sizes.push_back(static_cast<int>(j - i));
    }
    i = j;
  }
  return places;
}

}  // namespace tg::comm_detail

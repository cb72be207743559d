// DeferredAverages: what a scheme left coded for the optimizer (GradientScheme::defer_decode): every policy
// tensor's coded average, fixed once (views of the scheme's buffers), which are still coded this step, and which
// buckets still have something to decode (decode_deferred). Shared by the schemes that can defer their decode.
#pragma once

#include <vector>

#include "terngrad/backend/backend.h"
#include "terngrad/compress/compression_policy.h"

namespace tg {

class DeferredAverages {
 public:
  // From now on: `all` per policy tensor (defined for those left coded), over the scheme's `buckets`.
  void start(std::vector<CodedAverage> all, std::vector<TensorRange> buckets) {
    all_ = std::move(all);
    current_ = all_;
    buckets_ = std::move(buckets);
    pending_.assign(buckets_.size(), 0);
  }
  bool active() const { return !all_.empty(); }
  // A new step: every coded tensor is coded again (the same size: no allocation).
  void begin_step() {
    if (!active()) return;
    current_ = all_;
    for (size_t b = 0; b < buckets_.size(); ++b) {
      pending_[b] = 0;
      for (int i = buckets_[b].begin; i < buckets_[b].end; ++i) pending_[b] |= all_[i].defined() ? 1 : 0;
    }
  }
  // Whether bucket b still has coded tensors this step; if so they count as decoded from now on (the caller
  // decodes them) and their entries of current() become undefined.
  bool take(int b) {
    if (!active() || !pending_[b]) return false;
    pending_[b] = 0;
    for (int i = buckets_[b].begin; i < buckets_[b].end; ++i) current_[i] = CodedAverage();
    return true;
  }
  const std::vector<CodedAverage>& current() const { return current_; }

 private:
  std::vector<CodedAverage> all_, current_;
  std::vector<TensorRange> buckets_;
  std::vector<char> pending_;
};

}  // namespace tg

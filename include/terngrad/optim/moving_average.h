// ExponentialMovingAverage: shadow copies of tracked tensors (trainable parameters and BN moving statistics)
// averaged as TensorFlow's tf.train.ExponentialMovingAverage(decay, num_updates=t) does (reference 2.4):
//   d_t = min(decay, (1 + t) / (10 + t)),   shadow = d_t * shadow + (1 - d_t) * value
// Shadows start as copies of the tracked values at construction (TF initialises them the same way) and
// live in ONE slab on the backend's device, named "<tensor>/ExponentialMovingAverage" like TF's, which is
// what checkpoints store and what evaluation loads.
//
// Tracked slabs are averaged with one ema_update call per slab (flat view; padding included, never read);
// individually tracked tensors with one call each. For evaluation during training, swap() exchanges the
// averages and the live values (call it again to swap back); assign_averages() overwrites the live values.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "terngrad/backend/backend.h"
#include "terngrad/core/buffer.h"
#include "terngrad/core/slab.h"

namespace tg {

class ExponentialMovingAverage {
 public:
  static constexpr float kDefaultDecay = 0.9999f;  // the reference's MOVING_AVERAGE_DECAY

  // Tracks every tensor of each (allocated, f32) slab, e.g. {&store.params(), &store.state()}.
  ExponentialMovingAverage(Backend& backend, const std::vector<const Slab*>& sources, float decay = kDefaultDecay);
  // The same from a braced list, `{&params, &state}` (which would otherwise be ambiguous with the
  // named-tensor overload: two pointers also look like an iterator range).
  ExponentialMovingAverage(Backend& backend, std::initializer_list<const Slab*> sources, float decay = kDefaultDecay)
      : ExponentialMovingAverage(backend, std::vector<const Slab*>(sources), decay) {}
  // Tracks the given tensors (f32, on the backend's device), one shadow per name.
  ExponentialMovingAverage(Backend& backend, const std::vector<std::pair<std::string, Tensor>>& tracked,
                           float decay = kDefaultDecay);
  ExponentialMovingAverage(const ExponentialMovingAverage&) = delete;
  ExponentialMovingAverage& operator=(const ExponentialMovingAverage&) = delete;

  // min(decay, (1 + t) / (10 + t)) in double.
  static double decay_at(double decay, int64_t step);
  double decay_at(int64_t step) const { return decay_at(decay_, step); }

  // Folds the current values in with t = step: the trainer passes the 0-based index of the iteration
  // whose update it has just applied. `except`: a tracked slab whose average the optimizer already updated
  // in its own pass (Optimizer::apply with this EMA), skipped here.
  void update(Backend& backend, int64_t step, const Slab* except = nullptr);
  // The averages of a slab tracked as a whole, as one flat f32 tensor laid out like the slab (undefined when
  // the slab is not tracked as a whole).
  Tensor flat_average(const Slab& tracked) const;

  // Exchanges averages and live values (evaluate with averaged weights, then swap back).
  void swap(Backend& backend);
  // Overwrites the live values with the averages (the shadows are unchanged).
  void assign_averages(Backend& backend);

  static std::string shadow_name(const std::string& tracked) { return tracked + "/ExponentialMovingAverage"; }
  // The average of a tracked tensor, by the tracked tensor's name.
  Tensor average(const std::string& tracked_name) const { return shadow_.view(shadow_name(tracked_name)); }
  float decay() const { return decay_; }

  // Every shadow (name -> tensor), for checkpoints; restoring means overwriting these tensors.
  Slab& shadow() { return shadow_; }
  const Slab& shadow() const { return shadow_; }

 private:
  // A live range and its shadow range of identical size: a whole slab, or one tensor.
  struct Pair {
    Tensor live;
    Tensor shadow;
  };
  void initialise(Backend& backend);  // shadows := live values

  float decay_;
  Slab shadow_;
  std::vector<Pair> pairs_;
  Buffer scratch_;  // for swap(), allocated on first use (largest pair)
};

}  // namespace tg

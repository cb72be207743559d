// Optimizer: the update rule of a replica (TensorFlow 1.x semantics, reference section 2.2) and its state.
//
// Kinds: gd, momentum (non-Nesterov), adam, rmsprop. The state ("slots") lives in ONE slab on the backend's
// device, with TensorFlow's slot names so checkpoints read like TF's:
//   momentum: "<param>/Momentum"                       (accumulator, starts at 0)
//   adam:     "<param>/Adam", "<param>/Adam_1"          (m and v, start at 0)
//   rmsprop:  "<param>/RMSProp", "<param>/RMSProp_1"    (ms starts at 1 as in TF 1.x, mom at 0)
// The slab is laid out slot by slot: every parameter's first slot, then every parameter's second slot. Each
// group therefore has exactly the parameter slab's layout, so when the parameter and gradient slabs share
// one layout (the usual case: ParameterStore::params() and Net::grads()) a step is one optimizer_update
// call over the whole slab (one kernel launch on a GPU) instead of one per tensor. Padding bytes between
// tensors are updated too; nothing reads them.
//
// Step counter: `step` counts iterations (0 for the first update). Adam's bias correction uses t = step + 1,
// once per step, computed in double on the host (the reference advanced it per tower).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "terngrad/backend/backend.h"
#include "terngrad/backend/op_desc.h"
#include "terngrad/core/enum_names.h"
#include "terngrad/core/flag_table.h"
#include "terngrad/core/slab.h"
#include "terngrad/optim/moving_average.h"

namespace tg {

template <>
struct EnumNames<OptimizerKind> : EnumNamesBase {
  static constexpr const char* kFlag = "--optimizer";
  static constexpr EnumName<OptimizerKind> kList[] = {{OptimizerKind::kGd, "gd"},
                                                      {OptimizerKind::kMomentum, "momentum"},
                                                      {OptimizerKind::kAdam, "adam"},
                                                      {OptimizerKind::kRmsprop, "rmsprop"}};
};

// The optimizer's flags, their defaults written once here, with their flag sub-table (optimizer_flags());
// TrainConfig derives from this struct and embeds the table.
struct OptimizerFlags {
  std::string optimizer = "momentum";  // OptimizerKind's names
  float momentum = 0.9f;               // momentum, and RMSProp's momentum
};
const std::vector<Flag<OptimizerFlags>>& optimizer_flags();

struct OptimizerOptions : OptimizerFlags {
  OptimizerKind kind() const { return parse_enum<OptimizerKind>(optimizer); }  // an unknown name: its error
  float adam_beta1 = 0.9f, adam_beta2 = 0.999f, adam_epsilon = 1e-8f;          // TF defaults
  float rmsprop_decay = 0.9f, rmsprop_epsilon = 1.0f;  // the reference's RMSPROP_DECAY / RMSPROP_EPSILON
};

class Optimizer {
 public:
  // One slot tensor per parameter entry of `params` (names and shapes are taken from its entries; it need
  // not be allocated yet), allocated on backend.allocator() and initialised. Invalid hyper-parameters are
  // errors naming the option.
  Optimizer(const OptimizerOptions& options, const Slab& params, Backend& backend);
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Updates every parameter in `params` with the gradient of the same name in `grads` (same shapes; the
  // entries must be the ones the optimizer was built for). `lr` is this step's learning rate (from the
  // schedule); `step` is the 0-based iteration index. With `ema` (an average that tracks `params`), the same
  // pass over the parameters also folds the new values into their averages (decay of `step`); the caller
  // then updates the rest of the EMA with ema->update(backend, step, &params). With `coded` (one entry per
  // parameter, in the order the optimizer was built for), a parameter whose entry is defined is updated from that
  // coded average instead (Backend::optimizer_update_coded: decoded inside the update's pass, the same bits as
  // decoding it into `grads` first); its tensor in `grads` is not read.
  void apply(Backend& backend, Slab& params, Slab& grads, int64_t step, float lr,
             const ExponentialMovingAverage* ema = nullptr, const std::vector<CodedAverage>* coded = nullptr);

  // The per-call descriptor apply() hands to Backend::optimizer_update (adam: lr already bias-corrected).
  OptimizerStep step_descriptor(int64_t step, float lr) const;
  // Adam's lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t) with t = step + 1, in double.
  static double adam_corrected_lr(double lr, double beta1, double beta2, int64_t step);

  OptimizerKind kind() const { return kind_; }
  const OptimizerOptions& options() const { return options_; }
  int slots_per_param() const { return static_cast<int>(slot_suffixes_.size()); }
  // TF slot name suffixes of this kind: {}, {"Momentum"}, {"Adam", "Adam_1"}, {"RMSProp", "RMSProp_1"}.
  const std::vector<std::string>& slot_suffixes() const { return slot_suffixes_; }
  static std::vector<std::string> slot_suffixes_of(OptimizerKind kind);
  static std::string slot_name(const std::string& param, const std::string& suffix) { return param + "/" + suffix; }

  // All optimizer state (name -> tensor), for checkpoints. Restoring means overwriting these tensors.
  Slab& slots() { return slots_; }
  const Slab& slots() const { return slots_; }
  // Re-initialises every slot (0, and 1 for RMSProp's ms).
  void reset(Backend& backend);

 private:
  struct ParamEntry {
    std::string name;
    Shape shape;
  };
  void check_slab(const Slab& slab, const char* what) const;
  bool same_layout(const Slab& slab) const;
  Tensor slot_group(int group) const;  // flat f32 view of every parameter's slot `group`

  OptimizerOptions options_;
  OptimizerKind kind_;  // --optimizer parsed
  std::vector<std::string> slot_suffixes_;
  std::vector<ParamEntry> params_;            // what the optimizer was built for, in order
  std::vector<size_t> param_offsets_;         // byte offsets of those entries in a slab built the same way
  std::vector<CodedUpdateItem> coded_items_;  // apply()'s coded updates (reused: no allocation a step)
  size_t param_slab_bytes_ = 0;               // that slab's allocated size (64-byte multiple)
  Slab slots_;
};

}  // namespace tg

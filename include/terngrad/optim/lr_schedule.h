// LearningRateSchedule: the learning rate of iteration t (0-based; reference section 2.3, with t the
// iteration index rather than global_step/num_nodes, which is the same number).
//
//   fixed        lr0
//   exponential  lr0 * factor^floor(t / decay_steps)                       (TF staircase exponential_decay)
//                decay_steps = int(examples_per_epoch / batch_size * num_epochs_per_decay), with float
//                division and the total batch size, as the reference's formula is written. (The reference
//                ran on Python 2.7, where int / int floors: 50000 / 128 * 20 gave 7800 there, 7812 here.)
//   polynomial   lr0 * (1 - min(t, max_steps) / max_steps)^0.5              (end lr 0, power 0.5)
//   cosine       lr0 * (t + 1) / warmup_steps                               for t < warmup_steps
//                0.5 * lr0 * (1 + cos(pi * (min(t, max_steps) - warmup) / (max_steps - warmup)))   after
//                The warm-up starts at lr0 / warmup_steps (not 0, which would waste the first step) and
//                reaches lr0 at t = warmup_steps - 1; the cosine then starts at lr0 at t = warmup_steps
//                and reaches 0 at t = max_steps. warmup_steps = 0 gives a plain cosine decay.
//
// With the adam optimizer the learning rate is constant lr0 whatever the decay type (the reference:
// "if fixed or adam: lr = initial"); the type's name is still checked, its other values are not used.
// Every rate is computed in double and returned as float.
#pragma once

#include <cstdint>
#include <string>

#include "terngrad/backend/op_desc.h"
#include "terngrad/core/enum_names.h"
#include "terngrad/core/flag_table.h"

namespace tg {

enum class LearningRateDecay { kFixed, kExponential, kPolynomial, kCosine };
template <>
struct EnumNames<LearningRateDecay> : EnumNamesBase {
  static constexpr const char* kFlag = "--learning_rate_decay_type";
  static constexpr EnumName<LearningRateDecay> kList[] = {{LearningRateDecay::kFixed, "fixed"},
                                                          {LearningRateDecay::kExponential, "exponential"},
                                                          {LearningRateDecay::kPolynomial, "polynomial"},
                                                          {LearningRateDecay::kCosine, "cosine"}};
};

// The schedule's flags, their defaults written once here, with their flag sub-table (learning_rate_flags());
// TrainConfig derives from this struct and embeds the table.
struct LearningRateFlags {
  double initial_learning_rate = 0.01;
  std::string learning_rate_decay_type = "exponential";  // LearningRateDecay's names
  double num_epochs_per_decay = 20.0;
  double learning_rate_decay_factor = 0.1;
  int64_t warmup_steps = 0;    // cosine only
  int64_t schedule_steps = 0;  // polynomial, cosine: the steps the decay spans (0: --max_steps)
};
const std::vector<Flag<LearningRateFlags>>& learning_rate_flags();

// The flags and what the schedule takes from the rest of the run; errors name the flags.
struct LearningRateOptions : LearningRateFlags {
  int64_t examples_per_epoch = 0;                      // of the training subset (dataset property)
  int64_t batch_size = 0;                              // --batch_size: the total batch over all workers
  int64_t max_steps = 0;                               // --max_steps (--schedule_steps when it is set)
  OptimizerKind optimizer = OptimizerKind::kMomentum;  // --optimizer (adam: constant rate)
};

class LearningRateSchedule {
 public:
  // Checks the values the effective schedule uses; errors name the flag.
  explicit LearningRateSchedule(const LearningRateOptions& options);

  double rate(int64_t step) const;  // in double (tests, logs)
  float operator()(int64_t step) const { return static_cast<float>(rate(step)); }

  // The schedule actually followed: FIXED for adam whatever was asked.
  LearningRateDecay effective_decay() const { return effective_; }
  const LearningRateOptions& options() const { return options_; }
  int64_t decay_steps() const { return decay_steps_; }  // exponential only (0 otherwise)
  // One line for the start-up log, e.g. "exponential: 0.01 * 0.1^floor(t / 7812)".
  std::string describe() const;

 private:
  LearningRateOptions options_;
  LearningRateDecay decay_type_;  // --learning_rate_decay_type parsed
  LearningRateDecay effective_;
  int64_t decay_steps_ = 0;
};

}  // namespace tg

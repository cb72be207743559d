// Learning-rate schedules (fixed, staircase exponential, polynomial, cosine with linear warm-up) and the
// checks of their flags.
#include "terngrad/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "terngrad/core/error.h"

namespace tg {

namespace {
constexpr double kPi = 3.14159265358979323846;
}

const std::vector<Flag<LearningRateFlags>>& learning_rate_flags() {
  using C = LearningRateFlags;
  static const std::vector<Flag<C>> table = {
      {"initial_learning_rate", &C::initial_learning_rate, "", positive(), kFlagRun},
      {"learning_rate_decay_type", &C::learning_rate_decay_type,
       "exponential is staircase; polynomial has power 0.5 to 0; cosine uses `--warmup_steps`",
       one_of<LearningRateDecay>(), kFlagRun},
      {"num_epochs_per_decay", &C::num_epochs_per_decay,
       "exponential: decay_steps = examples_per_epoch / batch_size · this", no_check(), kFlagRun},
      {"learning_rate_decay_factor", &C::learning_rate_decay_factor, "exponential factor", no_check(), kFlagRun},
      {"warmup_steps", &C::warmup_steps, "cosine: linear warm-up", at_least(0), kFlagRun},
      {"schedule_steps", &C::schedule_steps,
       "polynomial, cosine: the steps the decay spans; 0: `--max_steps` (a resume with another `--max_steps` then "
       "stretches or shortens the rest of the schedule; this flag with the old value keeps it)",
       at_least(0).note("0: --max_steps"), kFlagContinue},
  };
  return table;
}

LearningRateSchedule::LearningRateSchedule(const LearningRateOptions& options)
    : options_(options), decay_type_(parse_enum<LearningRateDecay>(options.learning_rate_decay_type)) {
  const LearningRateOptions& o = options_;
  TG_CHECK(std::isfinite(o.initial_learning_rate) && o.initial_learning_rate >= 0,
           "--initial_learning_rate must be finite and >= 0, got {}", o.initial_learning_rate);
  TG_CHECK(o.warmup_steps >= 0, "--warmup_steps must be >= 0, got {}", o.warmup_steps);
  TG_CHECK(o.warmup_steps == 0 || decay_type_ == LearningRateDecay::kCosine,
           "--warmup_steps {} is only used by --learning_rate_decay_type cosine, not {}", o.warmup_steps,
           enum_name(decay_type_));
  effective_ = o.optimizer == OptimizerKind::kAdam ? LearningRateDecay::kFixed : decay_type_;

  switch (effective_) {
    case LearningRateDecay::kFixed:
      break;
    case LearningRateDecay::kExponential: {
      TG_CHECK(o.examples_per_epoch > 0,
               "exponential learning-rate decay needs the dataset's examples per epoch "
               "(> 0), got {}",
               o.examples_per_epoch);
      TG_CHECK(o.batch_size > 0, "--batch_size must be > 0, got {}", o.batch_size);
      TG_CHECK(std::isfinite(o.num_epochs_per_decay) && o.num_epochs_per_decay > 0,
               "--num_epochs_per_decay must be finite and > 0, got {}", o.num_epochs_per_decay);
      TG_CHECK(std::isfinite(o.learning_rate_decay_factor) && o.learning_rate_decay_factor > 0,
               "--learning_rate_decay_factor must be finite and > 0, got {}", o.learning_rate_decay_factor);
      const double steps =
          static_cast<double>(o.examples_per_epoch) / static_cast<double>(o.batch_size) * o.num_epochs_per_decay;
      TG_CHECK(steps >= 1 && steps < 9.2e18,
               "--num_epochs_per_decay {}: decay_steps = int({} / {} * {}) = {:.0f}, must be >= 1; raise "
               "--num_epochs_per_decay",
               o.num_epochs_per_decay, o.examples_per_epoch, o.batch_size, o.num_epochs_per_decay, std::floor(steps));
      decay_steps_ = static_cast<int64_t>(steps);  // truncation, as Python's int()
      break;
    }
    case LearningRateDecay::kPolynomial:
      TG_CHECK(o.max_steps > 0, "--max_steps must be > 0 for polynomial learning-rate decay, got {}", o.max_steps);
      break;
    case LearningRateDecay::kCosine:
      TG_CHECK(o.max_steps > 0, "--max_steps must be > 0 for cosine learning-rate decay, got {}", o.max_steps);
      TG_CHECK(o.warmup_steps < o.max_steps, "--warmup_steps ({}) must be less than --max_steps ({})", o.warmup_steps,
               o.max_steps);
      break;
  }
}

double LearningRateSchedule::rate(int64_t step) const {
  TG_CHECK(step >= 0, "learning-rate schedule: step must be >= 0, got {}", step);
  const LearningRateOptions& o = options_;
  const double lr0 = o.initial_learning_rate;
  switch (effective_) {
    case LearningRateDecay::kFixed:
      return lr0;
    case LearningRateDecay::kExponential:
      return lr0 * std::pow(o.learning_rate_decay_factor, static_cast<double>(step / decay_steps_));
    case LearningRateDecay::kPolynomial: {
      const double t = static_cast<double>(std::min(step, o.max_steps));
      return lr0 * std::sqrt(1.0 - t / static_cast<double>(o.max_steps));
    }
    case LearningRateDecay::kCosine: {
      if (step < o.warmup_steps) return lr0 * static_cast<double>(step + 1) / static_cast<double>(o.warmup_steps);
      const double progress = static_cast<double>(std::min(step, o.max_steps) - o.warmup_steps) /
                              static_cast<double>(o.max_steps - o.warmup_steps);
      return 0.5 * lr0 * (1.0 + std::cos(kPi * progress));
    }
  }
  return lr0;
}

std::string LearningRateSchedule::describe() const {
  const LearningRateOptions& o = options_;
  switch (effective_) {
    case LearningRateDecay::kFixed:
      if (o.optimizer == OptimizerKind::kAdam && decay_type_ != LearningRateDecay::kFixed)
        return fmt::format(
            "fixed: {} (adam keeps the learning rate constant; --learning_rate_decay_type {} "
            "is not used)",
            o.initial_learning_rate, enum_name(decay_type_));
      return fmt::format("fixed: {}", o.initial_learning_rate);
    case LearningRateDecay::kExponential:
      return fmt::format("exponential: {} * {}^floor(t / {})", o.initial_learning_rate, o.learning_rate_decay_factor,
                         decay_steps_);
    case LearningRateDecay::kPolynomial:
      return fmt::format("polynomial: {} * (1 - min(t, {}) / {})^0.5", o.initial_learning_rate, o.max_steps,
                         o.max_steps);
    case LearningRateDecay::kCosine:
      return fmt::format("cosine: {} with {} linear warm-up steps, reaching 0 at step {}", o.initial_learning_rate,
                         o.warmup_steps, o.max_steps);
  }
  return "?";
}

}  // namespace tg

// Initializers drawn from Philox: truncated normal (TF: redraw beyond 2 stddev), Xavier uniform, He.
#include "terngrad/nn/initializer.h"

#include <fmt/format.h>

#include <cmath>

#include "terngrad/core/philox.h"

namespace tg {

std::string Initializer::str() const {
  switch (kind) {
    case Kind::kConstant:
      return fmt::format("constant({})", value);
    case Kind::kTruncatedNormal:
      return fmt::format("truncated_normal({}, seed+{})", stddev, seed_offset);
    case Kind::kXavier:
      return fmt::format("xavier(seed+{})", seed_offset);
    case Kind::kHe:
      return fmt::format("he(seed+{})", seed_offset);
  }
  return "?";
}

namespace {
// Sequential stream of uniforms (0, 1] from one Philox key.
class UniformStream {
 public:
  explicit UniformStream(PhiloxKey key) : key_(key) {}
  float next() {
    if (used_ == 4) {
      block_ = philox_block(key_, counter_++, 0x1417u, 0, 0);
      used_ = 0;
    }
    // (0, 1]: never 0, so log() is finite
    return 1.f - uniform_from_bits(block_.v[used_++]);
  }

 private:
  PhiloxKey key_;
  uint32_t counter_ = 0;
  Philox4x32 block_{};
  int used_ = 4;
};

float standard_normal(UniformStream& u) {
  // Box-Muller; one value per pair keeps the stream simple and deterministic.
  float u1 = u.next(), u2 = u.next();
  return std::sqrt(-2.f * std::log(u1)) * std::cos(6.2831853071795864f * u2);
}

void fans(const Shape& s, double* fan_in, double* fan_out) {
  if (s.rank() == 4) {  // (KH, KW, Cin, Cout)
    double rf = static_cast<double>(s[0] * s[1]);
    *fan_in = rf * s[2];
    *fan_out = rf * s[3];
  } else if (s.rank() == 2) {
    *fan_in = static_cast<double>(s[0]);
    *fan_out = static_cast<double>(s[1]);
  } else {
    *fan_in = *fan_out = static_cast<double>(s.numel());
  }
}
}  // namespace

void initialize_host(const Initializer& init, const Tensor& t, uint64_t seed, uint32_t salt) {
  TG_CHECK(t.device().is_cpu(), "initialize_host on a {} tensor", t.device().str());
  float* p = t.data<float>();
  const int64_t n = t.numel();
  if (init.kind == Initializer::Kind::kConstant) {
    for (int64_t i = 0; i < n; ++i) p[i] = init.value;
    return;
  }
  UniformStream u(philox_key(seed + init.seed_offset, salt));
  double fan_in, fan_out;
  fans(t.shape(), &fan_in, &fan_out);
  switch (init.kind) {
    case Initializer::Kind::kTruncatedNormal:
    case Initializer::Kind::kHe: {
      float stddev = init.kind == Initializer::Kind::kHe ? static_cast<float>(std::sqrt(2.0 / fan_in)) : init.stddev;
      for (int64_t i = 0; i < n; ++i) {
        float z;
        do z = standard_normal(u);
        while (std::fabs(z) > 2.f);
        p[i] = z * stddev;
      }
      break;
    }
    case Initializer::Kind::kXavier: {
      float a = static_cast<float>(std::sqrt(6.0 / (fan_in + fan_out)));
      for (int64_t i = 0; i < n; ++i) p[i] = (2.f * u.next() - 1.f) * a;
      break;
    }
    case Initializer::Kind::kConstant:
      break;
  }
}

}  // namespace tg

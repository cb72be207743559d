// Seeded parameter initializers. Every draw comes from Philox keyed by (seed, salt) so a replica built with
// the same seed gets the same bits on any machine; TF's truncated normal redraws values beyond 2 stddev.
#pragma once

#include <cstdint>
#include <string>

#include "terngrad/core/tensor.h"

namespace tg {

struct Initializer {
  enum class Kind { kConstant, kTruncatedNormal, kXavier, kHe } kind = Kind::kConstant;
  float value = 0.f;         // kConstant
  float stddev = 0.f;        // kTruncatedNormal
  uint32_t seed_offset = 0;  // the reference's per-layer `seed + k`

  static Initializer constant(float v) { return {Kind::kConstant, v, 0.f, 0}; }
  static Initializer truncated_normal(float stddev, uint32_t seed_offset) {
    return {Kind::kTruncatedNormal, 0.f, stddev, seed_offset};
  }
  // Xavier/Glorot uniform: U(-a, a), a = sqrt(6 / (fan_in + fan_out)).
  static Initializer xavier(uint32_t seed_offset) { return {Kind::kXavier, 0.f, 0.f, seed_offset}; }
  // He normal (truncated): stddev = sqrt(2 / fan_in).
  static Initializer he(uint32_t seed_offset) { return {Kind::kHe, 0.f, 0.f, seed_offset}; }

  std::string str() const;
};

// Fills a host f32 tensor. fan_in/fan_out are derived from the shape: (in, out) for FC, (KH, KW, Cin, Cout)
// for convolutions (fan_in = KH*KW*Cin). `seed` is the run's --seed; `salt` distinguishes tensors that
// share a seed_offset.
void initialize_host(const Initializer& init, const Tensor& t, uint64_t seed, uint32_t salt);

}  // namespace tg

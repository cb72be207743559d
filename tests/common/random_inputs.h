// Reproducible random inputs shared by the codec tests: normal gradients and random bytes (packed codes).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace tg::testing {

// n values from normal(0, stddev), seeded.
inline std::vector<float> normal_floats(int64_t n, uint32_t seed, float stddev = 1e-3f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// n uniform bytes, seeded (every 2-bit field value occurs, 11 included).
inline std::vector<uint8_t> random_bytes(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(0, 255);
  std::vector<uint8_t> v(n);
  for (auto& x : v) x = static_cast<uint8_t>(d(rng));
  return v;
}

}  // namespace tg::testing

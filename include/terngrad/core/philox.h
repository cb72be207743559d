// Philox4x32-10 counter-based RNG (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011),
// written once for host and device: the same (key, counter) gives the same bits on the CPU and the GPU, at
// any thread count. Every random choice of the trainer (ternary rounding, dropout, augmentation, init) is
// drawn from a key naming its owner and a counter naming the element.
#pragma once

#include <cstdint>

#include "terngrad/core/host_device.h"

namespace tg {

struct Philox4x32 {
  uint32_t v[4];
};
struct PhiloxKey {
  uint32_t k[2];
};

namespace philox_detail {
constexpr uint32_t kM0 = 0xD2511F53u;
constexpr uint32_t kM1 = 0xCD9E8D57u;
constexpr uint32_t kW0 = 0x9E3779B9u;
constexpr uint32_t kW1 = 0xBB67AE85u;

TG_HOST_DEVICE uint32_t mulhilo(uint32_t a, uint32_t b, uint32_t* hi) {
  uint64_t p = static_cast<uint64_t>(a) * static_cast<uint64_t>(b);
  *hi = static_cast<uint32_t>(p >> 32);
  return static_cast<uint32_t>(p);
}

TG_HOST_DEVICE Philox4x32 round(Philox4x32 c, PhiloxKey k) {
  uint32_t hi0, hi1;
  uint32_t lo0 = mulhilo(kM0, c.v[0], &hi0);
  uint32_t lo1 = mulhilo(kM1, c.v[2], &hi1);
  return Philox4x32{{hi1 ^ c.v[1] ^ k.k[0], lo1, hi0 ^ c.v[3] ^ k.k[1], lo0}};
}
}  // namespace philox_detail

// Ten rounds of Philox4x32 on `counter` under `key`.
TG_HOST_DEVICE Philox4x32 philox4x32_10(Philox4x32 counter, PhiloxKey key) {
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      key.k[0] += philox_detail::kW0;
      key.k[1] += philox_detail::kW1;
    }
    counter = philox_detail::round(counter, key);
  }
  return counter;
}

// uint32 -> float uniform in [0, 1) with 24 random bits: exactly representable, identical on every device.
TG_HOST_DEVICE float uniform_from_bits(uint32_t x) { return static_cast<float>(x >> 8) * 5.9604644775390625e-08f; }

// Key from a 64-bit seed and a 32-bit stream id (e.g. worker index): mixed so nearby seeds differ widely.
TG_HOST_DEVICE PhiloxKey philox_key(uint64_t seed, uint32_t stream) {
  return PhiloxKey{{static_cast<uint32_t>(seed) ^ (stream * 0x9E3779B9u),
                    static_cast<uint32_t>(seed >> 32) ^ (stream + 0x7F4A7C15u)}};
}

// The four uniforms for element group `index` (elements 4*index .. 4*index+3) of a stream named by the
// counter words hi0, hi1, hi2 (e.g. step, tensor, purpose).
TG_HOST_DEVICE Philox4x32 philox_block(PhiloxKey key, uint32_t index, uint32_t hi0, uint32_t hi1, uint32_t hi2) {
  return philox4x32_10(Philox4x32{{index, hi0, hi1, hi2}}, key);
}

// Uniform [0,1) for element i of the stream (hi0, hi1, hi2): word i%4 of block i/4.
TG_HOST_DEVICE float philox_uniform(PhiloxKey key, uint64_t i, uint32_t hi0, uint32_t hi1, uint32_t hi2) {
  Philox4x32 b = philox_block(key, static_cast<uint32_t>(i >> 2), hi0, hi1 ^ static_cast<uint32_t>(i >> 34), hi2);
  return uniform_from_bits(b.v[i & 3]);
}

}  // namespace tg

// Element types of tensors and their sizes; fp16/bf16 conversions usable on host and device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "terngrad/core/host_device.h"

namespace tg {

enum class DType : uint8_t { kF32 = 0, kF16 = 1, kBf16 = 2, kI8 = 3, kU8 = 4, kI32 = 5 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32:
      return 4;
    case DType::kF16:
      return 2;
    case DType::kBf16:
      return 2;
    case DType::kI8:
      return 1;
    case DType::kU8:
      return 1;
    case DType::kI32:
      return 4;
  }
  return 0;
}

const char* dtype_name(DType t);

template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kF32;
};
template <>
struct DTypeOf<int8_t> {
  static constexpr DType value = DType::kI8;
};
template <>
struct DTypeOf<uint8_t> {
  static constexpr DType value = DType::kU8;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::kI32;
};

// Storage types for the 16-bit floats (bit patterns; arithmetic happens in fp32).
struct half_bits {
  uint16_t bits;
};
struct bf16_bits {
  uint16_t bits;
};
template <>
struct DTypeOf<half_bits> {
  static constexpr DType value = DType::kF16;
};
template <>
struct DTypeOf<bf16_bits> {
  static constexpr DType value = DType::kBf16;
};

TG_HOST_DEVICE uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

TG_HOST_DEVICE float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// fp32 -> bf16, round to nearest even; NaN stays NaN.
TG_HOST_DEVICE bf16_bits float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16_bits{static_cast<uint16_t>((u >> 16) | 0x40u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16_bits{static_cast<uint16_t>(u >> 16)};
}
TG_HOST_DEVICE float bf16_to_float(bf16_bits h) { return bits_float(static_cast<uint32_t>(h.bits) << 16); }

// fp32 -> IEEE fp16, round to nearest even, overflow to inf, subnormals kept.
TG_HOST_DEVICE half_bits float_to_half(float f) {
  uint32_t x = float_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return half_bits{static_cast<uint16_t>(sign | 0x7e00u)};   // NaN
  if (ax >= 0x477ff000u) return half_bits{static_cast<uint16_t>(sign | 0x7c00u)};  // overflow -> inf
  if (ax < 0x38800000u) {                                                          // subnormal or zero in fp16
    if (ax < 0x33000000u) return half_bits{static_cast<uint16_t>(sign)};
    uint32_t mant = (ax & 0x007fffffu) | 0x00800000u;
    uint32_t shift = 126u - (ax >> 23);  // 14..24: value / 2^-24 = mant >> shift
    uint32_t r = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) r += 1;
    return half_bits{static_cast<uint16_t>(sign | r)};
  }
  uint32_t h = ((ax - 0x38000000u) >> 13);
  uint32_t rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h += 1;
  return half_bits{static_cast<uint16_t>(sign | h)};
}

TG_HOST_DEVICE float half_to_float(half_bits hb) {
  uint32_t h = hb.bits;
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1fu) return bits_float(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return bits_float(sign);
    // subnormal: value = mant * 2^-24
    float v = static_cast<float>(mant) * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

}  // namespace tg

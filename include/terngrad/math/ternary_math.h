// Ternary gradient math written once for the CPU loops (src/compress) and the CUDA kernels
// (kernels/ternary_kernels.cu): scaler, stochastic ternarization, 2-bit packing, unpacking and decoding.
// Same bits on both devices (no FMA contraction: -ffp-contract=off / -fmad=false).
//
// Scaler (per tensor, per worker; DESIGN.md section 3): sigma = population std of g (mean subtracted),
//   s = min(c * sigma, max|g|)  for c > 0      (the paper's s = max|clip(g)|)
//   s = max|g|                  for c = 0.
// Workers then share s = max over workers (all-reduce MAX) before ternarizing.
//
// Ternarization of element i of tensor t at `step` by a worker whose key is philox_key(seed, worker):
//   u = philox_uniform(key, i, step, t, kTernaryPurpose) in [0, 1)
//   code = sign(g) if u * s < |g| else 0        (strict '<'; s <= 0 gives code 0 everywhere)
// so E[s * code] = clip(g, -s, s): unbiased for |g| <= s.
//
// Packed format ("2-bit codes"): 4 codes per byte; element i of a tensor lives in byte i / 4 at bits
// 2*(i % 4) .. 2*(i % 4)+1 (element 0 in the least significant bits). Field values: 00 -> 0, 01 -> +1,
// 10 -> -1; 11 is never written and reads as 0. A tensor of n elements takes ceil(n / 4) bytes; the unused
// fields of its last byte are 00. In a fused buffer every tensor starts at a byte boundary.
#pragma once

#include <cmath>
#include <cstdint>

#include "terngrad/core/host_device.h"
#include "terngrad/core/philox.h"

namespace tg {

// Third Philox counter word of the ternary rounding stream ("tern"): keeps it apart from dropout etc.
constexpr uint32_t kTernaryPurpose = 0x7465726Eu;

// s from the statistics of one tensor (see the file comment).
TG_HOST_DEVICE float ternary_scaler(float sigma, float max_abs, float clip_factor) {
  if (clip_factor > 0.f) {
    float cs = clip_factor * sigma;
    return cs < max_abs ? cs : max_abs;
  }
  return max_abs;
}

// Code in {-1, 0, +1} for one element, given its uniform u in [0, 1).
TG_HOST_DEVICE int ternarize_with_uniform(float g, float s, float u) {
  if (!(s > 0.f)) return 0;
  float a = fabsf(g);
  if (u * s < a) return g > 0.f ? 1 : -1;
  return 0;
}

// Code for element i of tensor `tensor` at `step` (the reference definition; the packed path below
// draws the same uniforms a block of four at a time).
TG_HOST_DEVICE int ternarize_one(float g, float s, PhiloxKey key, uint64_t i, uint32_t step, uint32_t tensor) {
  return ternarize_with_uniform(g, s, philox_uniform(key, i, step, tensor, kTernaryPurpose));
}

// 2-bit field of a code: 0 -> 00, +1 -> 01, -1 -> 10.
TG_HOST_DEVICE uint32_t ternary_field(int code) { return code > 0 ? 1u : (code < 0 ? 2u : 0u); }

// Code of a 2-bit field: 00 -> 0, 01 -> +1, 10 -> -1, 11 -> 0.
TG_HOST_DEVICE int ternary_code_of_field(uint32_t field) {
  return static_cast<int>(field & 1u) - static_cast<int>((field >> 1) & 1u);
}

// Packs four codes (element 4b+k in bits 2k..2k+1).
TG_HOST_DEVICE uint8_t pack_ternary4(int c0, int c1, int c2, int c3) {
  return static_cast<uint8_t>(ternary_field(c0) | (ternary_field(c1) << 2) | (ternary_field(c2) << 4) |
                              (ternary_field(c3) << 6));
}

// Code of element i from a packed tensor.
TG_HOST_DEVICE int unpack_ternary(const uint8_t* packed, int64_t i) {
  return ternary_code_of_field(static_cast<uint32_t>(packed[i >> 2]) >> (2 * (i & 3)));
}

// Code k (0..3) of one packed byte.
TG_HOST_DEVICE int unpack_ternary_field(uint8_t byte, int k) {
  return ternary_code_of_field(static_cast<uint32_t>(byte) >> (2 * k));
}

// Byte b of the packed codes of a tensor g of n elements: ternarizes elements 4b .. min(4b+3, n-1) with one
// Philox block (the same uniforms philox_uniform gives each element), elements past n are 00.
TG_HOST_DEVICE uint8_t ternarize_pack_byte(const float* g, int64_t n, int64_t b, float s, PhiloxKey key, uint32_t step,
                                           uint32_t tensor) {
  const uint64_t first = static_cast<uint64_t>(b) << 2;
  Philox4x32 r =
      philox_block(key, static_cast<uint32_t>(b), step, tensor ^ static_cast<uint32_t>(first >> 34), kTernaryPurpose);
  int c[4] = {0, 0, 0, 0};
  for (int k = 0; k < 4; ++k) {
    int64_t i = static_cast<int64_t>(first) + k;
    if (i < n) c[k] = ternarize_with_uniform(g[i], s, uniform_from_bits(r.v[k]));
  }
  return pack_ternary4(c[0], c[1], c[2], c[3]);
}

// Averaged gradient from the sum of codes over num_workers: s * sum / N.
TG_HOST_DEVICE float ternary_decode_value(float s, int code_sum, int num_workers) {
  return s * static_cast<float>(code_sum) / static_cast<float>(num_workers);
}

}  // namespace tg

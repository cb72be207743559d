// Ternary gradient math written once for the CPU loops (src/compress) and the CUDA kernels
// (kernels/ternary_kernels.cu): scaler, stochastic ternarization, 2-bit packing, unpacking and decoding.
// Same bits on both devices (no FMA contraction: -ffp-contract=off / -fmad=false).
//
// Scaler (per tensor, per worker; docs/design.md, "One step"), from one pass over g (n elements) accumulating
// sum = sum g, sumsq = sum g^2 (double) and max|g|:
//   mean = sum / n, sigma = sqrt(max(0, sumsq / n - mean^2))   (population std)
//   s = min(c * sigma, max|g|)  for c > 0      (the paper's s = max|clip(g)|)
//   s = max|g|                  for c = 0
//   s = NaN when sigma or max|g| is not finite (NaN or Inf anywhere in g); the codec rejects it naming the
//   tensor and the step. An empty tensor has s = 0.
// The sums have one fixed order on every device (the CPU loops and the CUDA kernels give the same bits, so the
// same scalers and hence the same codes): g is cut into chunks of ternary_stats_chunk(n) elements (at least
// 4096, at most 2048 chunks, a multiple of 32: enough chunks to fill a GPU with one warp each); inside a chunk,
// element i goes to lane i % 32, each lane adds its elements in index order starting from 0.0, then the lanes
// combine pairwise (lane l += lane l + w for w = 16, 8, 4, 2, 1); the chunks' results combine pairwise the same
// way (chunk k += chunk k + w for w = P/2, ..., 2, 1, P the chunk count rounded up to a power of two, missing
// chunks 0.0: adding 0.0 changes no sum here, none is -0.0). max|g| is an integer max over the bits of |g| (any
// order).
// Workers then share s = max over workers (all-reduce MAX) before ternarizing.
//
// Per-bucket scalers (--scaler_bucket B > 0, a multiple of kScalerBucketAlign): a tensor of n elements has
// ternary_num_scalers(n, B) = max(1, ceil(n / B)) scalers, element i using scaler i / B (ternary_scaler_of);
// B = 0 is one scaler per tensor (the paper's rule). Scaler k of bucket k = [k B, min(n, (k + 1) B)):
//   s_k = min(c * sigma, max over the bucket of |g|)   for c > 0   (sigma: the whole tensor's, as above)
//   s_k = max over the bucket of |g|                   for c = 0
//   s_k = NaN for every k when sigma or the tensor's max|g| is not finite.
// Clipping stays per tensor: an element is clipped exactly when it is with one scaler (|g| > c * sigma), so the
// buckets change the codes' variance (s_k |g| - g^2 per element, s_k <= s), never what is clipped; a tensor of
// one bucket has the per-tensor scaler bit for bit. The bucket maxima are integer maxima over the bits of |g|
// (any order), so the scalers keep the same bits on every device and thread count. Workers share every
// bucket's scaler by the same MAX.
//
// Ternarization of element i of tensor t at `step` by a worker whose key is philox_key(seed, worker):
// element i draws a 16-bit h from Philox4x32-10 block b = i / 8 with counter
//   (low 32 bits of b, step, t ^ high 32 bits of b, kTernaryPurpose),
// h = 16-bit half k (k = 0: bits 0..15, k = 1: bits 16..31) of word j of the block, for i = 8b + 2j + k;
//   u = (h + 0.5) * 2^-16 in (0, 1)   (exact in float)
//   code = sign(g) if u * s < |g| else 0        (strict '<'; s <= 0 or NaN gives code 0 everywhere; NaN g: 0)
// One block serves 8 elements: the CPU encode is bound by the Philox rounds, and one 32-bit uniform per element
// (4 per block, as before) made it ~1.5x slower (bench/README.md, "Codec"). The 16-bit uniform takes 65536 equally
// likely values at the midpoints of [k/65536, (k+1)/65536), so for |g| < s, P(code != 0) is |g|/s rounded to a multiple
// of 2^-16 (to nearest): with the float rounding of u * s (it can move the count by at most one h, only when |g|/s is
// within 2^-8 of a rounding midpoint) |P(code != 0) - |g|/s| <= 2^-17 + 2^-24. Hence |E[s * code] - clip(g, -s, s)| <=
// s * (2^-17 + 2^-24) per element, either way (unbiased up to that; |g| >= s gives code sign(g) always). The variance
// is s|gc| - gc^2 (gc = clip(g)) up to the same order.
//
// Packed format ("2-bit codes"): 4 codes per byte; element i of a tensor lives in byte i / 4 at bits
// 2*(i % 4) .. 2*(i % 4)+1 (element 0 in the least significant bits). Field values: 00 -> 0, 01 -> +1,
// 10 -> -1; 11 is never written and reads as 0. A tensor of n elements takes ceil(n / 4) bytes; the unused
// fields of its last byte are 00. In a fused buffer every tensor starts at a byte boundary. A Philox block
// (8 elements) fills bytes 2b and 2b + 1.
//
// Decoding: the average over N workers of element i is ternary_decode_value(s, sum_w code_w[i], N) =
// s * sum / N, in that order of float operations.
#pragma once

#include <cmath>
#include <cstdint>

#include "terngrad/core/host_device.h"
#include "terngrad/core/philox.h"

namespace tg {

// Third Philox counter word of the ternary rounding stream ("tern"): keeps it apart from dropout etc.
constexpr uint32_t kTernaryPurpose = 0x7465726Eu;
// Elements per Philox block (two 16-bit uniforms per 32-bit word).
constexpr int kTernaryBlockElements = 8;

// Chunking of the scaler's sums (see the file comment).
constexpr int64_t kTernaryStatsMinChunk = 4096;
constexpr int kTernaryStatsMaxChunks = 2048;  // a power of two
constexpr int kTernaryStatsLanes = 32;
// Elements per chunk for a tensor of n > 0 elements: a multiple of kTernaryStatsLanes, at least
// kTernaryStatsMinChunk, and at most kTernaryStatsMaxChunks chunks.
TG_HOST_DEVICE int64_t ternary_stats_chunk(int64_t n) {
  const int64_t by_count = (n + kTernaryStatsMaxChunks - 1) / kTernaryStatsMaxChunks;
  const int64_t rounded = (by_count + kTernaryStatsLanes - 1) / kTernaryStatsLanes * kTernaryStatsLanes;
  return rounded > kTernaryStatsMinChunk ? rounded : kTernaryStatsMinChunk;
}

// Chunks of a tensor of n > 0 elements.
TG_HOST_DEVICE int ternary_stats_chunks(int64_t n) {
  const int64_t chunk = ternary_stats_chunk(n);
  return static_cast<int>((n + chunk - 1) / chunk);
}

// The pairwise combination of `count` chunk partials (file comment): partial[0] becomes the total. The caller's
// array holds at least the next power of two of count entries; the ones past count are set to 0 here.
TG_HOST_DEVICE int ternary_stats_span(int count) {
  int p = 1;
  while (p < count) p <<= 1;
  return p;
}

// s from sigma and max|g| (see the file comment); the plain formula, no check for non-finite inputs.
TG_HOST_DEVICE float ternary_scaler(float sigma, float max_abs, float clip_factor) {
  if (clip_factor > 0.f) {
    float cs = clip_factor * sigma;
    return cs < max_abs ? cs : max_abs;
  }
  return max_abs;
}

// Population sigma from the one-pass sums of n > 0 elements; NaN when a sum is not finite (NaN or Inf in g:
// Inf - Inf). Cancellation limit: sumsq / n - mean^2 cancels the digits the two terms share. With e the
// relative rounding error of the double sums (at most (m + 261) * 2^-53 for the CPU's sums, m = max(512,
// n / 8192) additions per accumulator: about 1e-12 at 10^8 elements, typically far less; the CUDA kernel adds
// in the same order), the relative error of sigma is at most about 1.5 e (1 + mean^2 / sigma^2): sigma
// stays float-accurate while |mean| is below a few hundred sigma, and a gradient's mean is a fraction of its
// sigma. A constant tensor can get sigma ~1e-7 |g| instead of exactly 0 (a tiny s: every code is sign(g)).
TG_HOST_DEVICE double ternary_sigma_from_sums(double sum, double sumsq, int64_t n) {
  const double mean = sum / static_cast<double>(n);
  const double var = sumsq / static_cast<double>(n) - mean * mean;
  return var > 0.0 ? sqrt(var) : (var == var ? 0.0 : var);  // negative by rounding -> 0; NaN stays NaN
}

// s from one-pass statistics: ternary_scaler(sigma, max_abs, c), or NaN when sigma or max_abs is not finite.
TG_HOST_DEVICE float ternary_scaler_from_stats(double sigma, float max_abs, float clip_factor) {
  const float sg = static_cast<float>(sigma);
  const float bad = (sg - sg) + (max_abs - max_abs);  // 0 when both are finite, NaN otherwise (Inf - Inf)
  if (bad != 0.f) return bad;
  return ternary_scaler(sg, max_abs, clip_factor);
}

// Bytes of n 2-bit codes: 4 to a byte, the last byte's unused fields 00 (the one definition of the packed size).
TG_HOST_DEVICE constexpr int64_t ternary_packed_bytes(int64_t n) { return (n + 3) / 4; }
// An int8 sum of codes (allreduce8, ternary_sum_codes) is exact for up to this many workers.
constexpr int kMaxCodeSumWorkers = 127;

// Per-bucket scalers (see the file comment). The alignment keeps a bucket a whole number of encode units
// (32 Philox blocks) and of packed bytes, so every vector loop sees one scaler per unit.
constexpr int64_t kScalerBucketAlign = 256;
constexpr int64_t kMaxScalerBucket = int64_t{1} << 30;
// Scalers of a tensor of n elements with buckets of `bucket` elements (0: one for the tensor).
TG_HOST_DEVICE int64_t ternary_num_scalers(int64_t n, int64_t bucket) {
  return bucket > 0 && n > bucket ? (n + bucket - 1) / bucket : 1;
}
// The scaler of element i.
TG_HOST_DEVICE int64_t ternary_scaler_of(int64_t i, int64_t bucket) { return bucket > 0 ? i / bucket : 0; }
// A bucket's scaler from the tensor's sigma and max|g| and the bucket's max|g|: NaN when the tensor's statistics
// are not finite, else ternary_scaler(sigma, bucket_max, c). With bucket_max = tensor_max it is
// ternary_scaler_from_stats(sigma, tensor_max, c).
TG_HOST_DEVICE float ternary_bucket_scaler(double sigma, float tensor_max, float bucket_max, float clip_factor) {
  const float sg = static_cast<float>(sigma);
  const float bad = (sg - sg) + (tensor_max - tensor_max);  // 0 when both are finite, NaN otherwise
  if (bad != 0.f) return bad;
  return ternary_scaler(sg, bucket_max, clip_factor);
}

// Code in {-1, 0, +1} for one element, given its uniform u in (0, 1).
TG_HOST_DEVICE int ternarize_with_uniform(float g, float s, float u) {
  if (!(s > 0.f)) return 0;
  float a = fabsf(g);
  if (u * s < a) return g > 0.f ? 1 : -1;
  return 0;
}

// u = (h + 0.5) * 2^-16 for a 16-bit h: exact in float, strictly inside (0, 1).
TG_HOST_DEVICE float ternary_uniform16(uint32_t h) { return (static_cast<float>(h) + 0.5f) * 1.52587890625e-05f; }

// The Philox block of elements 8b .. 8b+7 of tensor `tensor` at `step`.
TG_HOST_DEVICE Philox4x32 ternary_block(PhiloxKey key, uint64_t b, uint32_t step, uint32_t tensor) {
  return philox_block(key, static_cast<uint32_t>(b), step, tensor ^ static_cast<uint32_t>(b >> 32), kTernaryPurpose);
}

// 16-bit draw of element 8b + e (e = 0..7) from its block: half e % 2 of word e / 2.
TG_HOST_DEVICE uint32_t ternary_half(const Philox4x32& r, int e) { return (r.v[e >> 1] >> (16 * (e & 1))) & 0xFFFFu; }

// Code for element i of tensor `tensor` at `step`: the reference definition, one element at a time (the
// packed paths below and the CPU vector loops draw the same uniforms a block at a time).
TG_HOST_DEVICE int ternarize_one(float g, float s, PhiloxKey key, uint64_t i, uint32_t step, uint32_t tensor) {
  const Philox4x32 r = ternary_block(key, i >> 3, step, tensor);
  return ternarize_with_uniform(g, s, ternary_uniform16(ternary_half(r, static_cast<int>(i & 7))));
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

// The 16 packed bits of one Philox block's elements v[0 .. valid-1] (valid <= 8; fields past valid are 00),
// drawn from its block r: what ternarize_pack_block stores, for values already in registers.
TG_HOST_DEVICE uint32_t ternarize_pack_values(const float* v, int valid, float s, const Philox4x32& r) {
  uint32_t bits = 0;
  for (int e = 0; e < kTernaryBlockElements; ++e)
    if (e < valid)
      bits |= ternary_field(ternarize_with_uniform(v[e], s, ternary_uniform16(ternary_half(r, e)))) << (2 * e);
  return bits;
}

// Packed bytes 2b (low 8 bits) and 2b + 1 (high 8 bits) of a tensor g of n elements: ternarizes elements
// 8b .. min(8b+7, n-1) with one Philox block; elements past n are 00. The caller stores byte 2b + 1 only
// when it exists (ceil(n / 4) > 2b + 1).
TG_HOST_DEVICE uint32_t ternarize_pack_block(const float* g, int64_t n, int64_t b, float s, PhiloxKey key,
                                             uint32_t step, uint32_t tensor) {
  const Philox4x32 r = ternary_block(key, static_cast<uint64_t>(b), step, tensor);
  const int64_t first = b * kTernaryBlockElements, left = n - first;
  const int valid = left < kTernaryBlockElements ? static_cast<int>(left) : kTernaryBlockElements;
  float v[kTernaryBlockElements] = {};
  for (int e = 0; e < valid; ++e) v[e] = g[first + e];
  return ternarize_pack_values(v, valid, s, r);
}

// Averaged gradient from the sum of codes over num_workers: s * sum / N.
TG_HOST_DEVICE float ternary_decode_value(float s, int code_sum, int num_workers) {
  return s * static_cast<float>(code_sum) / static_cast<float>(num_workers);
}

// Error feedback's residual of one element: what its code did not carry, g - s * code (the one worker's decode).
TG_HOST_DEVICE float ternary_residual_value(float g, float s, int code) { return g - ternary_decode_value(s, code, 1); }

}  // namespace tg

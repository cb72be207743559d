// CPU loops of the ternary operations (statistics and scaler, encode, unpack, code sums, decode) over the
// shared host/device math of terngrad/math/ternary_math.h (the fp16/fp32 sums, averages and decodes:
// dense_codec.cc), on the compute team (terngrad/core/parallel.h). Part of the CPU backend (its codec ops,
// cpu_codec.cc, call them); declared in terngrad/backend/ternary_codec.h.
//
// Instruction sets: every hot loop exists for AVX-512 (x86-64-v4), AVX2 (x86-64-v3) and baseline x86-64 / any
// other CPU; the best one the CPU has is picked at run time (the default build keeps running on any x86-64).
//   - statistics: one source over GCC vector extensions, compiled for each target (vectors of its width); 32
//     independent lane accumulators, so the order of the floating-point operations is the same on every path;
//   - encode: Philox4x32-10 with intrinsics, one block per 64-bit lane (vpmuludq), the words packed into element
//     order, two compares per element, and the 2-bit fields made from the comparison masks (pdep);
//   - code sums and decode: intrinsics adding every worker's codes in byte lanes (below), then int8 or
//     s * sum / N per element; decode of int8 sums: a plain loop vectorized for each target;
//   - generic: plain loops (16 Philox blocks side by side in 64-bit lanes; a 256-entry table of byte lanes).
// All paths give the same bits (tested: set_ternary_codec_isa forces each), at any thread count: reductions
// run over fixed chunks whose size depends on n only and are combined in chunk order.
// Over 900 lines on purpose: each operation's three instruction-set paths sit side by side, to be read together.
#include "terngrad/backend/ternary_codec.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "src/backend/cpu/cpu_isa_targets.h"
#include "terngrad/core/error.h"
#include "terngrad/core/parallel.h"
#include "terngrad/math/ternary_math.h"

namespace tg {

namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the lane tricks below read little-endian words as bytes");

// ---- instruction-set choice ----------------------------------------------------------------------------------
std::atomic<int> g_forced_isa{static_cast<int>(CodecIsa::kAuto)};

}  // namespace

CodecIsa onednn_isa_limit(const char* onednn_max_cpu_isa, const char* dnnl_max_cpu_isa) {
  const char* value = onednn_max_cpu_isa != nullptr ? onednn_max_cpu_isa : dnnl_max_cpu_isa;
  if (value == nullptr || *value == '\0') return CodecIsa::kAvx512;
  std::string v(value);
  for (char& ch : v) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  if (v == "ALL" || v.rfind("AVX512", 0) == 0 || v.rfind("AVX10", 0) == 0) return CodecIsa::kAvx512;
  if (v.rfind("AVX2", 0) == 0) return CodecIsa::kAvx2;
  return CodecIsa::kGeneric;
}

namespace {

CodecIsa best_isa() {
#if TG_CPU_X86
  static const CodecIsa best = [] {
    __builtin_cpu_init();
#if defined(__clang__) && __clang_major__ < 15
    // clang 14 (the fuzzing build's compiler) knows no ISA levels here: the levels' defining features it can
    // ask (every CPU with AVX2, BMI1/2 and FMA also has v3's F16C, LZCNT and MOVBE).
    const bool v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2") &&
                    __builtin_cpu_supports("fma");
    const bool v4 = v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                    __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
                    __builtin_cpu_supports("avx512vl");
#else
    const bool v4 = __builtin_cpu_supports("x86-64-v4"), v3 = __builtin_cpu_supports("x86-64-v3");
#endif
    // Lowered as oneDNN's kernels are (onednn_isa_limit), so one variable restricts the whole CPU step to AVX2
    // on an AVX-512 machine.
    const CodecIsa limit = onednn_isa_limit(std::getenv("ONEDNN_MAX_CPU_ISA"), std::getenv("DNNL_MAX_CPU_ISA"));
    if (v4 && limit >= CodecIsa::kAvx512) return CodecIsa::kAvx512;
    if (v3 && limit >= CodecIsa::kAvx2) return CodecIsa::kAvx2;
    return CodecIsa::kGeneric;
  }();
  return best;
#else
  return CodecIsa::kGeneric;
#endif
}

CodecIsa active_isa() {
  const int forced = g_forced_isa.load(std::memory_order_relaxed);
  const CodecIsa best = best_isa();
  if (forced == static_cast<int>(CodecIsa::kAuto)) return best;
  return static_cast<CodecIsa>(std::min(forced, static_cast<int>(best)));
}

// Generic vectors of one register width (GCC vector extensions) for the statistics: doubles, and floats /
// int32 with as many lanes (half the width). Inside a function compiled for a target they become that
// target's vector instructions.
struct Vec64 {  // AVX-512
  typedef double f64 __attribute__((vector_size(64)));
  typedef float f32h __attribute__((vector_size(32)));
  typedef int32_t i32h __attribute__((vector_size(32)));
};
struct Vec32 {  // AVX2
  typedef double f64 __attribute__((vector_size(32)));
  typedef float f32h __attribute__((vector_size(16)));
  typedef int32_t i32h __attribute__((vector_size(16)));
};
struct Vec16 {  // SSE2 and any other target
  typedef double f64 __attribute__((vector_size(16)));
  typedef float f32h __attribute__((vector_size(8)));
  typedef int32_t i32h __attribute__((vector_size(8)));
};

// ---- statistics ---------------------------------------------------------------------------------------------
// Fixed chunks: at least kTernaryStatsMinChunk elements, at most kStatsMaxChunks of them (partials per thread), a
// multiple of kStatsLanes; the chunking depends on n only. Inside a chunk, element i goes to accumulator lane
// i % kStatsLanes (32 independent sums: they hide the add latency and fill the widest vectors), and the lanes
// are combined in a fixed pairwise order.
// (ternary_math.h's order: the CUDA kernel adds in the same one, so both give the same bits.)
constexpr int64_t kStatsMaxChunks = kTernaryStatsMaxChunks;
constexpr int kStatsLanes = kTernaryStatsLanes;

struct StatsPartial {
  double sum = 0.0, sumsq = 0.0;
  int32_t max_bits = 0;  // max of the bits of |g| (as int32, all >= 0): for non-negative floats the integer
                         // order is the float order, and every NaN (exponent all ones, mantissa != 0) is above +Inf
};

// Adds before the statistics, element by element, stored back to g: kDecay (weight decay) g += decay * w (the
// product rounded first, as axpy), then kResidual (error feedback) g += r; the statistics are the new g's.
struct StatsAdds {
  const float* w = nullptr;  // kDecay
  float decay = 0.f;
  const float* r = nullptr;  // kResidual
};
template <typename V, bool kDecay, bool kResidual>
TG_ALWAYS_INLINE StatsPartial stats_body(float* g, StatsAdds a, int64_t n) {
  constexpr bool kAdd = kDecay || kResidual;
  const float* const r = a.r;
  typedef typename V::f64 D;
  typedef typename V::f32h F;
  typedef typename V::i32h I;
  constexpr int kWidth = sizeof(D) / sizeof(double), kVectors = kStatsLanes / kWidth;
  D s[kVectors] = {}, q[kVectors] = {};
  I m[kVectors] = {};
  int64_t i = 0;
  for (; i + kStatsLanes <= n; i += kStatsLanes) {
    for (int v = 0; v < kVectors; ++v) {
      F x;
      I bits;
      std::memcpy(&x, g + i + kWidth * v, sizeof x);
      if (kDecay) {
        F y;
        std::memcpy(&y, a.w + i + kWidth * v, sizeof y);
        x += y * a.decay;
      }
      if (kResidual) {
        F y;
        std::memcpy(&y, r + i + kWidth * v, sizeof y);
        x += y;
      }
      if (kAdd) std::memcpy(g + i + kWidth * v, &x, sizeof x);
      std::memcpy(&bits, &x, sizeof bits);
      const D d = __builtin_convertvector(x, D);
      s[v] += d;
      q[v] += d * d;  // exact: a float squared fits in a double
      bits &= 0x7FFFFFFF;
      m[v] = bits > m[v] ? bits : m[v];
    }
  }
  double ls[kStatsLanes], lq[kStatsLanes];
  int32_t lm[kStatsLanes];
  std::memcpy(ls, s, sizeof ls);
  std::memcpy(lq, q, sizeof lq);
  std::memcpy(lm, m, sizeof lm);
  for (int l = 0; i < n; ++i, ++l) {  // the last n % 32 elements, lane by lane as above
    if (kDecay) g[i] = g[i] + a.decay * a.w[i];
    if (kResidual) g[i] = g[i] + r[i];
    int32_t bits;
    std::memcpy(&bits, g + i, sizeof bits);
    const double d = g[i];
    ls[l] += d;
    lq[l] += d * d;
    lm[l] = std::max(lm[l], bits & 0x7FFFFFFF);
  }
  for (int w = kStatsLanes / 2; w >= 1; w /= 2) {
    for (int l = 0; l < w; ++l) {
      ls[l] += ls[l + w];
      lq[l] += lq[l + w];
      lm[l] = std::max(lm[l], lm[l + w]);
    }
  }
  StatsPartial p;
  p.sum = ls[0];
  p.sumsq = lq[0];
  p.max_bits = lm[0];
  return p;
}

using StatsFn = StatsPartial (*)(float*, StatsAdds, int64_t);
template <bool kDecay, bool kResidual>
StatsPartial stats_generic(float* g, StatsAdds a, int64_t n) {
  return stats_body<Vec16, kDecay, kResidual>(g, a, n);
}
#if TG_CPU_X86
template <bool kDecay, bool kResidual>
TG_TARGET_AVX2 StatsPartial stats_avx2(float* g, StatsAdds a, int64_t n) {
  return stats_body<Vec32, kDecay, kResidual>(g, a, n);
}
template <bool kDecay, bool kResidual>
TG_TARGET_AVX512 StatsPartial stats_avx512(float* g, StatsAdds a, int64_t n) {
  return stats_body<Vec64, kDecay, kResidual>(g, a, n);
}
#endif

template <bool kDecay, bool kResidual>
StatsFn stats_fn(CodecIsa isa) {
#if TG_CPU_X86
  if (isa == CodecIsa::kAvx512) return stats_avx512<kDecay, kResidual>;
  if (isa == CodecIsa::kAvx2) return stats_avx2<kDecay, kResidual>;
#endif
  (void)isa;
  return stats_generic<kDecay, kResidual>;
}

StatsFn stats_fn(CodecIsa isa, const StatsAdds& a) {
  if (a.w && a.r) return stats_fn<true, true>(isa);
  if (a.w) return stats_fn<true, false>(isa);
  if (a.r) return stats_fn<false, true>(isa);
  return stats_fn<false, false>(isa);
}

// ---- bucket maxima (per-bucket scalers) -----------------------------------------------------------------------
// max over a bucket of the bits of |g| (an integer max: any order gives the same result; every NaN is above
// +Inf), one plain loop the compiler vectorizes for each target.
TG_ALWAYS_INLINE int32_t max_abs_bits_loop(const float* g, int64_t n) {
  int32_t m = 0;
  for (int64_t i = 0; i < n; ++i) {
    int32_t bits;
    std::memcpy(&bits, g + i, sizeof bits);
    bits &= 0x7FFFFFFF;
    m = bits > m ? bits : m;
  }
  return m;
}
using MaxBitsFn = int32_t (*)(const float*, int64_t);
constexpr int64_t kMaxBitsGrain = 1 << 16;  // elements per thread at least
int32_t max_abs_bits_generic(const float* g, int64_t n) { return max_abs_bits_loop(g, n); }
#if TG_CPU_X86
TG_TARGET_AVX2 int32_t max_abs_bits_avx2(const float* g, int64_t n) { return max_abs_bits_loop(g, n); }
TG_TARGET_AVX512 int32_t max_abs_bits_avx512(const float* g, int64_t n) { return max_abs_bits_loop(g, n); }
#endif

// ---- encode -------------------------------------------------------------------------------------------------
// Kernels encode whole units of kUnitBlocks Philox blocks (kUnitElements elements, kUnitBytes packed bytes)
// starting at block block0 (a multiple of kUnitBlocks, so a unit never straddles a 2^32 boundary of the block
// index: the counter's high word is the same for all its blocks). g and packed point at the first unit.
// They return the number of non-zero codes. With a residual r (error feedback; kResidual kStore or kStream, the
// latter with streaming stores), they also write r[i] = ternary_residual_value(g[i], s, code i).
enum ResidualOut { kNoResidual, kStore, kStream };
constexpr int kUnitBlocks = 32;
constexpr int kUnitElements = kUnitBlocks * kTernaryBlockElements;  // 256
constexpr int kUnitBytes = kUnitElements / 4;                       // 64
constexpr int64_t kEncodeGrainUnits = 64;                           // 16K elements at least per thread
using EncodeFn = int64_t (*)(const float*, uint64_t, int64_t, float, PhiloxKey, uint32_t, uint32_t, uint8_t*, float*);

// Plain C++: 16 blocks side by side, their 32-bit words in 64-bit lanes so the multiplies are 32x32->64.
template <int kResidual>
int64_t encode_units_generic(const float* g, uint64_t block0, int64_t units, float s, PhiloxKey key, uint32_t step,
                             uint32_t tensor, uint8_t* packed, float* r) {
  constexpr int kLanes = 16, kElements = kLanes * kTernaryBlockElements;
  int64_t kept = 0;
  for (int64_t sub = 0; sub < units * (kUnitBlocks / kLanes); ++sub) {
    const uint64_t b0 = block0 + static_cast<uint64_t>(sub) * kLanes;
    uint64_t w0[kLanes], w1[kLanes], w2[kLanes], w3[kLanes];
    for (int l = 0; l < kLanes; ++l) {  // the counter of ternary_block
      w0[l] = static_cast<uint32_t>(b0 + l);
      w1[l] = step;
      w2[l] = tensor ^ static_cast<uint32_t>((b0 + l) >> 32);
      w3[l] = kTernaryPurpose;
    }
    uint64_t k0 = key.k[0], k1 = key.k[1];
    for (int r = 0; r < 10; ++r) {  // philox4x32_10, word for word
      if (r > 0) {
        k0 = static_cast<uint32_t>(k0 + philox_detail::kW0);
        k1 = static_cast<uint32_t>(k1 + philox_detail::kW1);
      }
      for (int l = 0; l < kLanes; ++l) {
        const uint64_t p0 = uint64_t{philox_detail::kM0} * (w0[l] & 0xffffffffu);
        const uint64_t p1 = uint64_t{philox_detail::kM1} * (w2[l] & 0xffffffffu);
        const uint64_t n0 = (p1 >> 32) ^ w1[l] ^ k0;
        const uint64_t n2 = (p0 >> 32) ^ w3[l] ^ k1;
        w1[l] = p1 & 0xffffffffu;
        w3[l] = p0 & 0xffffffffu;
        w0[l] = n0;
        w2[l] = n2;
      }
    }
    // Element 8l + 2j + k draws half k of word j of block l: the words stored little-endian in the order
    // (block, word) put the halves in element order.
    uint64_t pairs[2 * kLanes];
    for (int l = 0; l < kLanes; ++l) {
      pairs[2 * l] = w0[l] | (w1[l] << 32);
      pairs[2 * l + 1] = w2[l] | (w3[l] << 32);
    }
    uint16_t h[kElements];
    std::memcpy(h, pairs, sizeof h);
    const float* x = g + sub * kElements;
    uint8_t field[kElements];
    for (int e = 0; e < kElements; ++e) {
      const float v = x[e];
      const uint32_t keep = ternary_uniform16(h[e]) * s < fabsf(v);  // ternarize_with_uniform's rule
      field[e] = static_cast<uint8_t>(keep << (v > 0.f ? 0 : 1));    // 01 for +1, 10 for -1, 00 for 0
      kept += keep;
      if (kResidual != kNoResidual)
        r[sub * kElements + e] = ternary_residual_value(v, s, keep ? (v > 0.f ? 1 : -1) : 0);
    }
    uint8_t* out = packed + sub * (kElements / 4);
    for (int q = 0; q < kElements / 4; ++q) {  // the four 2-bit fields of bytes 4q..4q+3 of `field` into one
      uint32_t f;
      std::memcpy(&f, field + 4 * q, sizeof f);
      out[q] = static_cast<uint8_t>(f | (f >> 6) | (f >> 12) | (f >> 18));
    }
  }
  return kept;
}

#if TG_CPU_X86
// GCC 12 reports the _mm512_undefined_* pass-through operands inside its own intrinsics as "may be used
// uninitialized" (GCC bug 105593, fixed in 13): silenced for the intrinsic kernels only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
//
// Both kernels keep one Philox block per 64-bit lane with only its low 32 bits meaningful: vpmuludq reads the
// low halves and gives the whole 64-bit product, whose high half (>> 32) is the next xor's operand and whose
// low half is the next round's w1/w3 as is (the garbage above it is never read as a number: it is shifted
// out, multiplied away by vpmuludq, or dropped when the words are packed). Six instructions per round for
// 8 blocks (AVX-512). The draws are then packed in element order: the low words of w0, w1 (w2, w3) as one
// 64-bit lane, the two lanes of each block interleaved.
//
// Codes: with t = (h + 0.5) * (s * 2^-16) = ternary_uniform16(h) * s exactly (s * 2^-16 is exact for
// s >= 2^-100; smaller scalers take the generic path), code +1 iff g > t and -1 iff g < -t, which is
// ternarize_with_uniform's rule (t > 0 or t = +0; NaN compares false). The +1 and -1 masks become the low and
// high bits of the 2-bit fields by pdep; each non-zero code sets exactly one bit, so popcount counts them.
constexpr float kMinFastScaler = 0x1p-100f;

template <int kResidual>
TG_TARGET_AVX2 int64_t encode_units_avx2(const float* g, uint64_t block0, int64_t units, float s, PhiloxKey key,
                                         uint32_t step, uint32_t tensor, uint8_t* packed, float* r) {
  constexpr int kRegs = 2;  // 2 x 4 blocks in flight (16 registers hold the state)
  const __m256i m0 = _mm256_set1_epi64x(philox_detail::kM0), m1 = _mm256_set1_epi64x(philox_detail::kM1);
  const __m256i iota = _mm256_setr_epi64x(0, 1, 2, 3);
  const __m256 half = _mm256_set1_ps(0.5f);
  const __m256 vt = _mm256_set1_ps(s * 1.52587890625e-05f), vtn = _mm256_set1_ps(-s * 1.52587890625e-05f);
  const __m256 vs = _mm256_set1_ps(s);
  int64_t kept = 0;
  for (int64_t sub = 0; sub < units * (kUnitBlocks / (4 * kRegs)); ++sub) {
    const uint64_t b0 = block0 + static_cast<uint64_t>(sub) * (4 * kRegs);
    __m256i w0[kRegs], w1[kRegs], w2[kRegs], w3[kRegs];
    for (int v = 0; v < kRegs; ++v) {
      w0[v] = _mm256_add_epi64(_mm256_set1_epi64x(static_cast<uint32_t>(b0) + 4 * v), iota);
      w1[v] = _mm256_set1_epi64x(step);
      w2[v] = _mm256_set1_epi64x(tensor ^ static_cast<uint32_t>(b0 >> 32));
      w3[v] = _mm256_set1_epi64x(kTernaryPurpose);
    }
    uint32_t k0 = key.k[0], k1 = key.k[1];
    for (int r = 0; r < 10; ++r) {
      if (r > 0) {
        k0 += philox_detail::kW0;
        k1 += philox_detail::kW1;
      }
      const __m256i kk0 = _mm256_set1_epi64x(k0), kk1 = _mm256_set1_epi64x(k1);
      for (int v = 0; v < kRegs; ++v) {
        const __m256i p0 = _mm256_mul_epu32(w0[v], m0), p1 = _mm256_mul_epu32(w2[v], m1);
        w0[v] = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p1, 32), w1[v]), kk0);
        w2[v] = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p0, 32), w3[v]), kk1);
        w1[v] = p1;
        w3[v] = p0;
      }
    }
    for (int v = 0; v < kRegs; ++v) {
      const __m256i p01 = _mm256_blend_epi32(w0[v], _mm256_slli_epi64(w1[v], 32), 0xAA);
      const __m256i p23 = _mm256_blend_epi32(w2[v], _mm256_slli_epi64(w3[v], 32), 0xAA);
      const __m256i lo = _mm256_unpacklo_epi64(p01, p23), hi = _mm256_unpackhi_epi64(p01, p23);  // blocks 0|2, 1|3
      const __m256i o[2] = {_mm256_permute2x128_si256(lo, hi, 0x20), _mm256_permute2x128_si256(lo, hi, 0x31)};
      const int64_t first = (sub * kRegs + v) * 4;  // block, relative to block0
      const float* x = g + first * kTernaryBlockElements;
      for (int j = 0; j < 2; ++j) {  // blocks 2j, 2j + 1: 16 elements, 4 packed bytes
        uint32_t pos = 0, neg = 0;
        for (int q = 0; q < 2; ++q) {
          const __m128i h = q ? _mm256_extracti128_si256(o[j], 1) : _mm256_castsi256_si128(o[j]);
          const __m256 u = _mm256_add_ps(_mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(h)), half);
          const __m256 xv = _mm256_loadu_ps(x + 16 * j + 8 * q);
          const __m256 pm = _mm256_cmp_ps(xv, _mm256_mul_ps(u, vt), _CMP_GT_OQ);
          const __m256 nm = _mm256_cmp_ps(xv, _mm256_mul_ps(u, vtn), _CMP_LT_OQ);
          pos |= _mm256_movemask_ps(pm) << (8 * q);
          neg |= _mm256_movemask_ps(nm) << (8 * q);
          if (kResidual != kNoResidual) {  // g - s, g + s or g (exactly g - s * code: s is finite here)
            __m256 rv = _mm256_blendv_ps(xv, _mm256_sub_ps(xv, vs), pm);
            rv = _mm256_blendv_ps(rv, _mm256_add_ps(xv, vs), nm);
            float* out = r + first * kTernaryBlockElements + 16 * j + 8 * q;
            if (kResidual == kStream) {
              _mm256_stream_ps(out, rv);
            } else {
              _mm256_storeu_ps(out, rv);
            }
          }
        }
        const uint32_t bits = _pdep_u32(pos, 0x55555555u) | _pdep_u32(neg, 0xAAAAAAAAu);
        kept += _mm_popcnt_u32(bits);
        std::memcpy(packed + first * 2 + 4 * j, &bits, sizeof bits);
      }
    }
  }
  if (kResidual == kStream) _mm_sfence();  // the streaming stores before the caller's next reads
  return kept;
}

template <int kResidual>
TG_TARGET_AVX512 int64_t encode_units_avx512(const float* g, uint64_t block0, int64_t units, float s, PhiloxKey key,
                                             uint32_t step, uint32_t tensor, uint8_t* packed, float* r) {
  constexpr int kRegs = kUnitBlocks / 8;  // 4 x 8 blocks in flight
  const __m512i m0 = _mm512_set1_epi64(philox_detail::kM0), m1 = _mm512_set1_epi64(philox_detail::kM1);
  const __m512i iota = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7);
  const __m512i first4 = _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11),
                last4 = _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15);
  const __m512 half = _mm512_set1_ps(0.5f);
  const __m512 vt = _mm512_set1_ps(s * 1.52587890625e-05f), vtn = _mm512_set1_ps(-s * 1.52587890625e-05f);
  const __m512 vs = _mm512_set1_ps(s);
  int64_t kept = 0;
  for (int64_t unit = 0; unit < units; ++unit) {
    const uint64_t b0 = block0 + static_cast<uint64_t>(unit) * kUnitBlocks;
    __m512i w0[kRegs], w1[kRegs], w2[kRegs], w3[kRegs];
    for (int v = 0; v < kRegs; ++v) {
      w0[v] = _mm512_add_epi64(_mm512_set1_epi64(static_cast<uint32_t>(b0) + 8 * v), iota);
      w1[v] = _mm512_set1_epi64(step);
      w2[v] = _mm512_set1_epi64(tensor ^ static_cast<uint32_t>(b0 >> 32));
      w3[v] = _mm512_set1_epi64(kTernaryPurpose);
    }
    uint32_t k0 = key.k[0], k1 = key.k[1];
    for (int r = 0; r < 10; ++r) {
      if (r > 0) {
        k0 += philox_detail::kW0;
        k1 += philox_detail::kW1;
      }
      const __m512i kk0 = _mm512_set1_epi64(k0), kk1 = _mm512_set1_epi64(k1);
      for (int v = 0; v < kRegs; ++v) {
        const __m512i p0 = _mm512_mul_epu32(w0[v], m0), p1 = _mm512_mul_epu32(w2[v], m1);
        w0[v] = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p1, 32), w1[v], kk0, 0x96);  // three-way xor
        w2[v] = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p0, 32), w3[v], kk1, 0x96);
        w1[v] = p1;
        w3[v] = p0;
      }
    }
    for (int v = 0; v < kRegs; ++v) {
      const __m512i p01 = _mm512_mask_blend_epi32(0xAAAA, w0[v], _mm512_slli_epi64(w1[v], 32));
      const __m512i p23 = _mm512_mask_blend_epi32(0xAAAA, w2[v], _mm512_slli_epi64(w3[v], 32));
      const __m512i o[2] = {_mm512_permutex2var_epi64(p01, first4, p23), _mm512_permutex2var_epi64(p01, last4, p23)};
      const int64_t first = unit * kUnitBlocks + 8 * v;  // block, relative to block0
      const float* x = g + first * kTernaryBlockElements;
      for (int j = 0; j < 2; ++j) {  // blocks 4j .. 4j + 3: 32 elements, 8 packed bytes
        __mmask16 pos[2], neg[2];
        for (int q = 0; q < 2; ++q) {
          const __m256i h = q ? _mm512_extracti64x4_epi64(o[j], 1) : _mm512_castsi512_si256(o[j]);
          const __m512 u = _mm512_add_ps(_mm512_cvtepi32_ps(_mm512_cvtepu16_epi32(h)), half);
          const __m512 xv = _mm512_loadu_ps(x + 32 * j + 16 * q);
          pos[q] = _mm512_cmp_ps_mask(xv, _mm512_mul_ps(u, vt), _CMP_GT_OQ);
          neg[q] = _mm512_cmp_ps_mask(xv, _mm512_mul_ps(u, vtn), _CMP_LT_OQ);
          if (kResidual != kNoResidual) {  // g - s, g + s or g (exactly g - s * code: s is finite here)
            const __m512 rv = _mm512_mask_add_ps(_mm512_mask_sub_ps(xv, pos[q], xv, vs), neg[q], xv, vs);
            float* out = r + first * kTernaryBlockElements + 32 * j + 16 * q;
            if (kResidual == kStream) {
              _mm512_stream_ps(out, rv);
            } else {
              _mm512_storeu_ps(out, rv);
            }
          }
        }
        const uint64_t bits = _pdep_u64(_cvtmask32_u32(_mm512_kunpackw(pos[1], pos[0])), 0x5555555555555555ull) |
                              _pdep_u64(_cvtmask32_u32(_mm512_kunpackw(neg[1], neg[0])), 0xAAAAAAAAAAAAAAAAull);
        kept += _mm_popcnt_u64(bits);
        std::memcpy(packed + first * 2 + 8 * j, &bits, sizeof bits);
      }
    }
  }
  if (kResidual == kStream) _mm_sfence();  // the streaming stores before the caller's next reads
  return kept;
}
#pragma GCC diagnostic pop
#endif  // TG_CPU_X86

template <int kResidual>
EncodeFn encode_fn(CodecIsa isa, float s) {
#if TG_CPU_X86
  if (s >= kMinFastScaler && (kResidual == kNoResidual || std::isfinite(s))) {
    if (isa == CodecIsa::kAvx512) return encode_units_avx512<kResidual>;
    if (isa == CodecIsa::kAvx2) return encode_units_avx2<kResidual>;
  }
#endif
  (void)isa;
  (void)s;
  return encode_units_generic<kResidual>;
}

EncodeFn encode_fn(CodecIsa isa, float s, int residual) {
  if (residual == kStream) return encode_fn<kStream>(isa, s);
  if (residual == kStore) return encode_fn<kStore>(isa, s);
  return encode_fn<kNoResidual>(isa, s);
}

// ---- code sums, unpack, decode ----------------------------------------------------------------------------
// One packed byte b per 32-bit lane, spread into its 4 byte lanes (byte k = field k = (b >> 2k) & 3) and turned
// into code + 1 (0, 1 or 2) per byte lane. Summing the lanes of up to 127 workers keeps every byte lane below
// 256: lanes never carry into each other, and byte lane k of the sum is num_workers + the code sum of
// element 4b + k, in element order when the 32-bit lanes are read as bytes.
constexpr int kMaxLaneWorkers = kMaxCodeSumWorkers;
constexpr int kSumStepElements = 64;        // threads split the elements at multiples of this
constexpr int64_t kDecodeGrainSteps = 256;  // 16K elements at least per thread

// kBiasedCodes[b]: the same four byte lanes for one byte (the generic path).
constexpr std::array<uint32_t, 256> make_biased_codes() {
  std::array<uint32_t, 256> t{};
  for (uint32_t b = 0; b < 256; ++b) {
    for (int k = 0; k < 4; ++k) {  // ternary_code_of_field + 1 (that one is not constexpr: it is device code too)
      const uint32_t field = (b >> (2 * k)) & 3u;
      t[b] |= ((field & 1u) + 1u - (field >> 1)) << (8 * k);
    }
  }
  return t;
}
constexpr std::array<uint32_t, 256> kBiasedCodes = make_biased_codes();

// Kernels over `count` elements (a multiple of kSumStepElements) whose packed bytes start at packed (worker w's
// at packed + w * stride).
using SumCodesFn = void (*)(const uint8_t*, int64_t, int, int64_t, int8_t*);
using DecodeGatheredFn = void (*)(const uint8_t*, int64_t, int, int64_t, float, float*, bool stream);
using DecodeSumsFn = void (*)(const int8_t*, int64_t, float, int, float*);

// lanes[e] = num_workers + the code sum of element e, for the 64 elements of 16 packed bytes.
inline void biased_sums_generic(const uint8_t* packed, int64_t stride, int num_workers, uint8_t lanes[64]) {
  uint32_t acc[16] = {};
  for (int w = 0; w < num_workers; ++w)
    for (int q = 0; q < 16; ++q) acc[q] += kBiasedCodes[packed[w * stride + q]];
  std::memcpy(lanes, acc, sizeof acc);
}

void sum_codes_generic(const uint8_t* packed, int64_t stride, int num_workers, int64_t count, int8_t* code_sums) {
  for (int64_t e = 0; e < count; e += 64) {
    uint8_t lanes[64];
    biased_sums_generic(packed + e / 4, stride, num_workers, lanes);
    for (int k = 0; k < 64; ++k) code_sums[e + k] = static_cast<int8_t>(lanes[k] - num_workers);
  }
}

void decode_gathered_generic(const uint8_t* gathered, int64_t stride, int num_workers, int64_t count, float s, float* g,
                             bool /*stream*/) {
  for (int64_t e = 0; e < count; e += 64) {
    uint8_t lanes[64];
    biased_sums_generic(gathered + e / 4, stride, num_workers, lanes);
    for (int k = 0; k < 64; ++k) g[e + k] = ternary_decode_value(s, lanes[k] - num_workers, num_workers);
  }
}

// g = ternary_decode_value of int8 code sums: a plain loop the compiler vectorizes for each target.
TG_ALWAYS_INLINE void decode_sums_loop(const int8_t* code_sums, int64_t n, float s, int num_workers, float* g) {
  for (int64_t i = 0; i < n; ++i) g[i] = ternary_decode_value(s, code_sums[i], num_workers);
}
void decode_sums_generic(const int8_t* c, int64_t n, float s, int w, float* g) { decode_sums_loop(c, n, s, w, g); }

#if TG_CPU_X86
// Streaming (non-temporal) stores for a decoded tensor larger than a last-level cache (32 MiB): its output
// cannot stay cached anyway, and writing around the caches saves reading every output line first (memory
// traffic 4 bytes an element instead of 8). Smaller tensors stay cached for the optimizer that reads them
// next. Only for 64-byte aligned outputs (slab tensors are; every thread's range then is too).
constexpr int64_t kStreamMinElements = (int64_t{32} << 20) / sizeof(float);
inline bool stream_output(const float* g, int64_t n) {
  return n >= kStreamMinElements && reinterpret_cast<uintptr_t>(g) % 64 == 0;
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC bug 105593, as for the encode kernels
TG_TARGET_AVX2 void decode_sums_avx2(const int8_t* c, int64_t n, float s, int w, float* g) {
  decode_sums_loop(c, n, s, w, g);
}
TG_TARGET_AVX512 void decode_sums_avx512(const int8_t* c, int64_t n, float s, int w, float* g) {
  decode_sums_loop(c, n, s, w, g);
}

// AVX2: 8 packed bytes (32 elements) per step; the byte lanes of the result in element order.
TG_TARGET_AVX2 TG_ALWAYS_INLINE __m256i biased_sums32(const uint8_t* packed, int64_t stride, int num_workers) {
  const __m256i ones = _mm256_set1_epi32(0x01010101), fields = _mm256_set1_epi32(0x03030303);
  __m256i acc = _mm256_setzero_si256();
  for (int w = 0; w < num_workers; ++w) {
    const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(packed + w * stride)));
    const __m256i f =
        _mm256_and_si256(_mm256_or_si256(_mm256_or_si256(b, _mm256_slli_epi32(b, 6)),
                                         _mm256_or_si256(_mm256_slli_epi32(b, 12), _mm256_slli_epi32(b, 18))),
                         fields);
    acc = _mm256_add_epi32(acc, _mm256_sub_epi32(_mm256_add_epi32(_mm256_and_si256(f, ones), ones),
                                                 _mm256_and_si256(_mm256_srli_epi32(f, 1), ones)));
  }
  return acc;
}

TG_TARGET_AVX2 void sum_codes_avx2(const uint8_t* packed, int64_t stride, int num_workers, int64_t count,
                                   int8_t* code_sums) {
  const __m256i bias = _mm256_set1_epi8(static_cast<char>(num_workers));
  for (int64_t e = 0; e < count; e += 32) {
    const __m256i sums = _mm256_sub_epi8(biased_sums32(packed + e / 4, stride, num_workers), bias);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(code_sums + e), sums);
  }
}

template <bool kStream>
TG_TARGET_AVX2 TG_ALWAYS_INLINE void decode_gathered_avx2_loop(const uint8_t* gathered, int64_t stride, int num_workers,
                                                               int64_t count, float s, float* g) {
  const __m256 vs = _mm256_set1_ps(s), vn = _mm256_set1_ps(static_cast<float>(num_workers));
  const __m256i bias = _mm256_set1_epi32(num_workers);
  for (int64_t e = 0; e < count; e += 32) {
    const __m256i acc = biased_sums32(gathered + e / 4, stride, num_workers);
    const __m128i lo = _mm256_castsi256_si128(acc), hi = _mm256_extracti128_si256(acc, 1);
    const __m128i part[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
    for (int q = 0; q < 4; ++q) {
      const __m256i sum = _mm256_sub_epi32(_mm256_cvtepu8_epi32(part[q]), bias);
      const __m256 out = _mm256_div_ps(_mm256_mul_ps(vs, _mm256_cvtepi32_ps(sum)), vn);  // s * sum / N
      if (kStream) {
        _mm256_stream_ps(g + e + 8 * q, out);
      } else {
        _mm256_storeu_ps(g + e + 8 * q, out);
      }
    }
  }
  if (kStream) _mm_sfence();
}

TG_TARGET_AVX2 void decode_gathered_avx2(const uint8_t* gathered, int64_t stride, int num_workers, int64_t count,
                                         float s, float* g, bool stream) {
  if (stream) {
    decode_gathered_avx2_loop<true>(gathered, stride, num_workers, count, s, g);
  } else {
    decode_gathered_avx2_loop<false>(gathered, stride, num_workers, count, s, g);
  }
}

// AVX-512: 16 packed bytes (64 elements) per step.
TG_TARGET_AVX512 TG_ALWAYS_INLINE __m512i biased_sums64(const uint8_t* packed, int64_t stride, int num_workers) {
  const __m512i ones = _mm512_set1_epi32(0x01010101), fields = _mm512_set1_epi32(0x03030303);
  __m512i acc = _mm512_setzero_si512();
  for (int w = 0; w < num_workers; ++w) {
    const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(packed + w * stride)));
    const __m512i f =
        _mm512_and_si512(_mm512_or_si512(_mm512_or_si512(b, _mm512_slli_epi32(b, 6)),
                                         _mm512_or_si512(_mm512_slli_epi32(b, 12), _mm512_slli_epi32(b, 18))),
                         fields);
    acc = _mm512_add_epi32(acc, _mm512_sub_epi32(_mm512_add_epi32(_mm512_and_si512(f, ones), ones),
                                                 _mm512_and_si512(_mm512_srli_epi32(f, 1), ones)));
  }
  return acc;
}

TG_TARGET_AVX512 void sum_codes_avx512(const uint8_t* packed, int64_t stride, int num_workers, int64_t count,
                                       int8_t* code_sums) {
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(num_workers));
  for (int64_t e = 0; e < count; e += 64) {
    const __m512i sums = _mm512_sub_epi8(biased_sums64(packed + e / 4, stride, num_workers), bias);
    _mm512_storeu_si512(code_sums + e, sums);
  }
}

template <bool kStream>
TG_TARGET_AVX512 TG_ALWAYS_INLINE void decode_gathered_avx512_loop(const uint8_t* gathered, int64_t stride,
                                                                   int num_workers, int64_t count, float s, float* g) {
  const __m512 vs = _mm512_set1_ps(s), vn = _mm512_set1_ps(static_cast<float>(num_workers));
  const __m512i bias = _mm512_set1_epi32(num_workers);
  for (int64_t e = 0; e < count; e += 64) {
    const __m512i acc = biased_sums64(gathered + e / 4, stride, num_workers);
    const __m128i part[4] = {_mm512_castsi512_si128(acc), _mm512_extracti32x4_epi32(acc, 1),
                             _mm512_extracti32x4_epi32(acc, 2), _mm512_extracti32x4_epi32(acc, 3)};
    for (int q = 0; q < 4; ++q) {
      const __m512i sum = _mm512_sub_epi32(_mm512_cvtepu8_epi32(part[q]), bias);
      const __m512 out = _mm512_div_ps(_mm512_mul_ps(vs, _mm512_cvtepi32_ps(sum)), vn);  // s * sum / N
      if (kStream) {
        _mm512_stream_ps(g + e + 16 * q, out);
      } else {
        _mm512_storeu_ps(g + e + 16 * q, out);
      }
    }
  }
  if (kStream) _mm_sfence();
}

TG_TARGET_AVX512 void decode_gathered_avx512(const uint8_t* gathered, int64_t stride, int num_workers, int64_t count,
                                             float s, float* g, bool stream) {
  if (stream) {
    decode_gathered_avx512_loop<true>(gathered, stride, num_workers, count, s, g);
  } else {
    decode_gathered_avx512_loop<false>(gathered, stride, num_workers, count, s, g);
  }
}
#pragma GCC diagnostic pop
#endif  // TG_CPU_X86

template <typename Fn>
Fn pick(CodecIsa isa, Fn generic, Fn avx2, Fn avx512) {
  if (isa == CodecIsa::kAvx512) return avx512;
  if (isa == CodecIsa::kAvx2) return avx2;
  return generic;
}
#if TG_CPU_X86
#define TG_CODEC_PICK(isa, name) pick(isa, name##_generic, name##_avx2, name##_avx512)
#else
#define TG_CODEC_PICK(isa, name) name##_generic
#endif

// Sum of the codes of element i over the workers: the plain definition (tails, and beyond 127 workers).
inline int code_sum(const uint8_t* packed, int64_t stride, int num_workers, int64_t i) {
  int sum = 0;
  for (int w = 0; w < num_workers; ++w) sum += unpack_ternary(packed + w * stride, i);
  return sum;
}

}  // namespace

CodecIsa ternary_codec_isa() { return active_isa(); }

CodecIsa set_ternary_codec_isa(CodecIsa isa) {
  g_forced_isa.store(static_cast<int>(isa), std::memory_order_relaxed);
  return active_isa();
}

namespace {
// The statistics of g, after the adds that are given (the same pass).
TensorStats tensor_stats(float* g, StatsAdds a, int64_t n) {
  TensorStats st;
  if (n <= 0) return st;
  const int64_t chunk = ternary_stats_chunk(n);
  const StatsFn fn = stats_fn(active_isa(), a);
  // Per calling thread (a replica's thread): no allocation in a step, no 48 KiB on the stack.
  thread_local StatsPartial partials[kStatsMaxChunks];
  StatsPartial* const partial = partials;  // this thread's array (the team's threads must not see their own)
  parallel_chunks(n, chunk, [&](int64_t k, int64_t b, int64_t e) {
    const StatsAdds at{a.w ? a.w + b : nullptr, a.decay, a.r ? a.r + b : nullptr};
    partial[k] = fn(g + b, at, e - b);
  });
  const int chunks = ternary_stats_chunks(n), span = ternary_stats_span(chunks);
  for (int k = chunks; k < span; ++k) partial[k] = StatsPartial{};
  for (int w = span / 2; w >= 1; w /= 2)  // pairwise, as the lanes (ternary_math.h)
    for (int k = 0; k < w; ++k) {
      partial[k].sum += partial[k + w].sum;
      partial[k].sumsq += partial[k + w].sumsq;
      partial[k].max_bits = std::max(partial[k].max_bits, partial[k + w].max_bits);
    }
  st.sum = partial[0].sum;
  st.sumsq = partial[0].sumsq;
  std::memcpy(&st.max_abs, &partial[0].max_bits, sizeof partial[0].max_bits);
  st.mean = st.sum / static_cast<double>(n);
  st.sigma = ternary_sigma_from_sums(st.sum, st.sumsq, n);
  return st;
}
}  // namespace

TensorStats tensor_stats_cpu(const float* g, int64_t n) {
  return tensor_stats(const_cast<float*>(g), StatsAdds{}, n);  // read only: nothing is added
}

float ternary_scaler_cpu(const float* g, int64_t n, float clip_factor) {
  if (n <= 0) return 0.f;
  const TensorStats st = tensor_stats_cpu(g, n);
  return ternary_scaler_from_stats(st.sigma, st.max_abs, clip_factor);
}

float ternary_scaler_with_adds_cpu(float* g, const float* decayed, float decay, const float* residual, int64_t n,
                                   float clip_factor) {
  if (n <= 0) return 0.f;
  const TensorStats st = tensor_stats(g, StatsAdds{decayed, decay, residual}, n);
  return ternary_scaler_from_stats(st.sigma, st.max_abs, clip_factor);
}

namespace {
// Elements per scaler of a tensor of n elements (the whole tensor for bucket 0 or >= n); a bucket smaller than
// the tensor must be a multiple of kScalerBucketAlign, so that encode units and decode steps never straddle two
// buckets.
int64_t elements_per_scaler(int64_t n, int64_t bucket, const char* op) {
  if (bucket <= 0 || bucket >= n) return n > 0 ? n : 1;
  TG_CHECK(bucket % kScalerBucketAlign == 0, "{}: a scaler bucket of {} elements is not a multiple of {}", op, bucket,
           kScalerBucketAlign);
  return bucket;
}

// The end (exclusive, in units of `step` elements) of the bucket holding unit u, capped at `cap`.
inline int64_t bucket_end(int64_t u, int64_t step, int64_t per, int64_t cap) {
  const int64_t k = u * step / per;
  return std::min(cap, (k + 1) * per / step);
}
}  // namespace

void ternary_bucket_scalers_cpu(float* g, const float* decayed, float decay, const float* residual, int64_t n,
                                float clip_factor, int64_t bucket, float* scalers) {
  const int64_t per = elements_per_scaler(n, bucket, "ternary scalers");
  if (n <= 0) {
    scalers[0] = 0.f;
    return;
  }
  const TensorStats st = tensor_stats(g, StatsAdds{decayed, decay, residual}, n);
  const int64_t count = (n + per - 1) / per;
  if (count == 1) {
    scalers[0] = ternary_scaler_from_stats(st.sigma, st.max_abs, clip_factor);
    return;
  }
  const MaxBitsFn fn = TG_CODEC_PICK(active_isa(), max_abs_bits);
  parallel_for(count, std::max<int64_t>(1, kMaxBitsGrain / per), [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      const int64_t first = k * per;
      const int32_t bits = fn(g + first, std::min(per, n - first));
      float bucket_max;
      std::memcpy(&bucket_max, &bits, sizeof bits);
      scalers[k] = ternary_bucket_scaler(st.sigma, st.max_abs, bucket_max, clip_factor);
    }
  });
}

int64_t ternary_encode_cpu(const float* g, int64_t n, float s, PhiloxKey key, uint32_t step, uint32_t tensor,
                           uint8_t* packed, float* residual) {
  return ternary_encode_buckets_cpu(g, n, &s, 0, key, step, tensor, packed, residual);
}

// Whole units (kUnitElements) in parallel, each run of units inside one bucket by the kernel for its scaler (a
// scaler <= 0 or NaN: all codes 0, residual = g - s * 0), then the last partial unit block by block (it lies in
// the last bucket: buckets are whole units).
int64_t ternary_encode_buckets_cpu(const float* g, int64_t n, const float* scalers, int64_t bucket, PhiloxKey key,
                                   uint32_t step, uint32_t tensor, uint8_t* packed, float* residual) {
  if (n <= 0) return 0;
  const int64_t per = elements_per_scaler(n, bucket, "ternary encode");
  const int64_t nbytes = ternary_packed_bytes(n);
  int mode = residual ? kStore : kNoResidual;
#if TG_CPU_X86
  if (residual && stream_output(residual, n)) mode = kStream;  // not read again before the next step
#endif
  const CodecIsa isa = active_isa();
  const int64_t units = n / kUnitElements;
  // Units [u0, u1) of one bucket, drawn with s; returns their non-zero codes.
  auto run = [&](int64_t u0, int64_t u1, float s) -> int64_t {
    if (!(s > 0.f)) {  // s = 0 (or NaN): every code is 0
      std::memset(packed + u0 * kUnitBytes, 0, static_cast<size_t>((u1 - u0) * kUnitBytes));
      if (residual)
        for (int64_t i = u0 * kUnitElements; i < u1 * kUnitElements; ++i)
          residual[i] = ternary_residual_value(g[i], s, 0);
      return 0;
    }
    return encode_fn(isa, s, mode)(g + u0 * kUnitElements, static_cast<uint64_t>(u0) * kUnitBlocks, u1 - u0, s, key,
                                   step, tensor, packed + u0 * kUnitBytes,
                                   residual ? residual + u0 * kUnitElements : nullptr);
  };
  std::atomic<int64_t> nonzero{0};  // an integer count: the same whatever order the threads add in
  parallel_for(units, kEncodeGrainUnits, [&](int64_t u0, int64_t u1) {
    int64_t kept = 0;
    for (int64_t u = u0; u < u1;) {
      const int64_t end = bucket_end(u, kUnitElements, per, u1);
      kept += run(u, end, scalers[u * kUnitElements / per]);
      u = end;
    }
    nonzero += kept;
  });
  int64_t kept = nonzero.load();
  const int64_t blocks = (n + kTernaryBlockElements - 1) / kTernaryBlockElements;
  // The last partial unit's scaler; read only when there is one (units * kUnitElements == n indexes past the end).
  const float s = units * kUnitElements < n ? scalers[units * kUnitElements / per] : 0.f;
  for (int64_t b = units * kUnitBlocks; b < blocks; ++b) {  // the last partial unit, block by block
    const uint32_t bits = ternarize_pack_block(g, n, b, s, key, step, tensor);
    packed[2 * b] = static_cast<uint8_t>(bits);
    if (2 * b + 1 < nbytes) packed[2 * b + 1] = static_cast<uint8_t>(bits >> 8);
    for (int e = 0; e < kTernaryBlockElements; ++e) {
      kept += ((bits >> (2 * e)) & 3u) != 0;
      const int64_t i = b * kTernaryBlockElements + e;
      if (residual && i < n) residual[i] = ternary_residual_value(g[i], s, ternary_code_of_field(bits >> (2 * e)));
    }
  }
  return n - kept;
}

void ternary_sum_codes_cpu(const uint8_t* packed, int64_t stride, int num_workers, int64_t n, int8_t* code_sums) {
  TG_CHECK(num_workers >= 1 && num_workers <= kMaxLaneWorkers,
           "ternary code sums: {} workers (an int8 sum holds 1 to {} workers)", num_workers, kMaxCodeSumWorkers);
  if (n <= 0) return;
  const SumCodesFn fn = TG_CODEC_PICK(active_isa(), sum_codes);
  const int64_t steps = n / kSumStepElements;
  parallel_for(steps, kDecodeGrainSteps, [&](int64_t t0, int64_t t1) {
    fn(packed + t0 * (kSumStepElements / 4), stride, num_workers, (t1 - t0) * kSumStepElements,
       code_sums + t0 * kSumStepElements);
  });
  for (int64_t i = steps * kSumStepElements; i < n; ++i)
    code_sums[i] = static_cast<int8_t>(code_sum(packed, stride, num_workers, i));
}

void max_scalers_cpu(const float* const* xs, int count, int64_t n, float* out) {
  TG_CHECK(count >= 1, "scaler max of {} workers", count);
  for (int64_t k = 0; k < n; ++k) {  // a scaler vector: one per ternary tensor, short
    float m = 0.f;
    for (int w = 0; w < count; ++w) {
      float s = xs[w][k];
      if (!std::isfinite(s)) s = std::numeric_limits<float>::infinity();
      m = m < s ? s : m;
    }
    out[k] = m;
  }
}

void ternary_unpack_cpu(const uint8_t* packed, int64_t n, int8_t* codes) {
  ternary_sum_codes_cpu(packed, 0, 1, n, codes);  // one worker's code sums are its codes
}

void ternary_decode_sums_cpu(const int8_t* code_sums, int64_t n, float s, int num_workers, float* g) {
  ternary_decode_sums_buckets_cpu(code_sums, n, &s, 0, num_workers, g);
}

void ternary_decode_sums_buckets_cpu(const int8_t* code_sums, int64_t n, const float* scalers, int64_t bucket,
                                     int num_workers, float* g) {
  TG_CHECK(num_workers >= 1, "ternary decode: {} workers", num_workers);
  if (n <= 0) return;
  const int64_t per = elements_per_scaler(n, bucket, "ternary decode");
  const DecodeSumsFn fn = TG_CODEC_PICK(active_isa(), decode_sums);
  parallel_for(n, 1 << 14, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e;) {
      const int64_t end = bucket_end(i, 1, per, e);
      fn(code_sums + i, end - i, scalers[i / per], num_workers, g + i);
      i = end;
    }
  });
}

void ternary_decode_gathered_cpu(const uint8_t* gathered, int64_t stride, int num_workers, int64_t n, float s,
                                 float* g) {
  ternary_decode_gathered_buckets_cpu(gathered, stride, num_workers, n, &s, 0, g);
}

void ternary_decode_gathered_buckets_cpu(const uint8_t* gathered, int64_t stride, int num_workers, int64_t n,
                                         const float* scalers, int64_t bucket, float* g) {
  TG_CHECK(num_workers >= 1, "ternary decode: {} workers", num_workers);
  if (n <= 0) return;
  const int64_t per = elements_per_scaler(n, bucket, "ternary decode");
  if (num_workers > kMaxLaneWorkers) {  // byte lanes would carry: the plain definition
    parallel_for(n, 1 << 14, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        g[i] = ternary_decode_value(scalers[i / per], code_sum(gathered, stride, num_workers, i), num_workers);
    });
    return;
  }
  const DecodeGatheredFn fn = TG_CODEC_PICK(active_isa(), decode_gathered);
#if TG_CPU_X86
  const bool stream = stream_output(g, n);
#else
  const bool stream = false;
#endif
  const int64_t steps = n / kSumStepElements;
  parallel_for(steps, kDecodeGrainSteps, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1;) {
      const int64_t end = bucket_end(t, kSumStepElements, per, t1);
      fn(gathered + t * (kSumStepElements / 4), stride, num_workers, (end - t) * kSumStepElements,
         scalers[t * kSumStepElements / per], g + t * kSumStepElements, stream);
      t = end;
    }
  });
  for (int64_t i = steps * kSumStepElements; i < n; ++i)
    g[i] = ternary_decode_value(scalers[i / per], code_sum(gathered, stride, num_workers, i), num_workers);
}

// The same element values for one range of a tensor, on the calling thread alone (Backend::optimizer_update_coded's
// tiles): the kernels are element-wise, so a range that starts at a packed byte gives the whole tensor's bits. The
// range is cut where a bucket ends.
void ternary_decode_gathered_range_cpu(const uint8_t* gathered, int64_t stride, int num_workers, int64_t begin,
                                       int64_t count, const float* scalers, int64_t bucket, float* out) {
  TG_CHECK(num_workers >= 1, "ternary decode: {} workers", num_workers);
  TG_CHECK(begin >= 0 && begin % 4 == 0, "ternary decode: a range must start at a packed byte, not element {}", begin);
  TG_CHECK(bucket <= 0 || bucket % kScalerBucketAlign == 0,
           "ternary decode: a scaler bucket of {} elements is not a multiple of {}", bucket, kScalerBucketAlign);
  for (int64_t a = begin, end = begin + count; a < end;) {
    const int64_t k = ternary_scaler_of(a, bucket);
    const int64_t b = bucket > 0 ? std::min(end, (k + 1) * bucket) : end;
    const float s = scalers[k];
    const uint8_t* packed = gathered + a / 4;
    float* o = out + (a - begin);
    int64_t done = 0;
    if (num_workers <= kMaxLaneWorkers) {
      done = (b - a) / kSumStepElements * kSumStepElements;
      if (done > 0) TG_CODEC_PICK(active_isa(), decode_gathered)(packed, stride, num_workers, done, s, o, false);
    }
    for (int64_t i = done; i < b - a; ++i)
      o[i] = ternary_decode_value(s, code_sum(packed, stride, num_workers, i), num_workers);
    a = b;
  }
}

void ternary_decode_sums_range_cpu(const int8_t* code_sums, int64_t begin, int64_t count, const float* scalers,
                                   int64_t bucket, int num_workers, float* out) {
  TG_CHECK(num_workers >= 1, "ternary decode: {} workers", num_workers);
  for (int64_t a = begin, end = begin + count; a < end;) {
    const int64_t k = ternary_scaler_of(a, bucket);
    const int64_t b = bucket > 0 ? std::min(end, (k + 1) * bucket) : end;
    TG_CODEC_PICK(active_isa(), decode_sums)(code_sums + a, b - a, scalers[k], num_workers, out + (a - begin));
    a = b;
  }
}

}  // namespace tg

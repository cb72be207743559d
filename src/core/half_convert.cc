// Bulk fp16 conversions: F16C kernels and their scalar fallbacks (see the header).
#include "terngrad/core/half_convert.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace tg {

namespace {

void floats_to_halves_scalar(const float* in, half_bits* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = float_to_half(in[i]);
}
void halves_to_floats_scalar(const half_bits* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = half_to_float(in[i]);
}
void add_rounded_scalar(const float* in, float* acc, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] += half_to_float(float_to_half(in[i]));
}
void add_halves_scalar(half_bits* dst, const half_bits* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = float_to_half(half_to_float(dst[i]) + half_to_float(src[i]));
}

#if defined(__x86_64__)
#define TG_F16C __attribute__((target("f16c,avx")))
TG_F16C __m256 load8(const half_bits* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
TG_F16C void store8(half_bits* p, __m256 v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}
TG_F16C void floats_to_halves_f16c(const float* in, half_bits* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) store8(out + i, _mm256_loadu_ps(in + i));
  floats_to_halves_scalar(in + i, out + i, n - i);
}
TG_F16C void halves_to_floats_f16c(const half_bits* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, load8(in + i));
  halves_to_floats_scalar(in + i, out + i, n - i);
}
TG_F16C void add_rounded_f16c(const float* in, float* acc, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 rounded = _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
    _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), rounded));
  }
  add_rounded_scalar(in + i, acc + i, n - i);
}
TG_F16C void add_halves_f16c(half_bits* dst, const half_bits* src, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) store8(dst + i, _mm256_add_ps(load8(dst + i), load8(src + i)));
  add_halves_scalar(dst + i, src + i, n - i);
}
#undef TG_F16C

#if defined(__clang__) && __clang_major__ < 15
// clang 14 (the fuzzing build's compiler) has no "f16c" for __builtin_cpu_supports: ask cpuid leaf 1 (AVX,
// F16C, OSXSAVE) and XCR0 (the OS saves the YMM state), which is what that builtin answers.
bool cpu_has_f16c_avx() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_F16C) || !(c & bit_AVX) || !(c & bit_OSXSAVE)) return false;
  unsigned lo = 0, hi = 0;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (lo & 6) == 6;
}
#else
bool cpu_has_f16c_avx() { return __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx"); }
#endif

bool has_f16c() {
  static const bool yes = cpu_has_f16c_avx();
  return yes;
}
#endif

}  // namespace

void floats_to_halves(const float* in, half_bits* out, int64_t n) {
#if defined(__x86_64__)
  if (has_f16c()) return floats_to_halves_f16c(in, out, n);
#endif
  floats_to_halves_scalar(in, out, n);
}

void halves_to_floats(const half_bits* in, float* out, int64_t n) {
#if defined(__x86_64__)
  if (has_f16c()) return halves_to_floats_f16c(in, out, n);
#endif
  halves_to_floats_scalar(in, out, n);
}

void add_rounded_to_half(const float* in, float* acc, int64_t n) {
#if defined(__x86_64__)
  if (has_f16c()) return add_rounded_f16c(in, acc, n);
#endif
  add_rounded_scalar(in, acc, n);
}

void add_halves(half_bits* dst, const half_bits* src, int64_t n) {
#if defined(__x86_64__)
  if (has_f16c()) return add_halves_f16c(dst, src, n);
#endif
  add_halves_scalar(dst, src, n);
}

}  // namespace tg

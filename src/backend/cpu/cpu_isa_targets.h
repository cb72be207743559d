// The vector paths of the CPU backend's own loops (ternary_codec.cc, cpu_lrn.cc): one loop body compiled three
// times, for baseline x86-64, for AVX2 (x86-64-v3) and for AVX-512 (x86-64-v4), chosen at run time by
// ternary_codec_isa() (terngrad/backend/ternary_codec.h). The project builds without -march, so these function
// attributes are the only place a wider ISA is named.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TG_CPU_X86 1
#define TG_TARGET_AVX512 __attribute__((target("arch=x86-64-v4")))
#define TG_TARGET_AVX2 __attribute__((target("arch=x86-64-v3")))
#else
#define TG_CPU_X86 0
#endif
#define TG_ALWAYS_INLINE inline __attribute__((always_inline))

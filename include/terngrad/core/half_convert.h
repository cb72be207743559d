// Bulk fp16 conversions for the host: the gradient codec's fp16 coding and the MPI communicator's fp16 sums.
// With F16C (checked at run time) eight values take one instruction each way; otherwise the scalar
// float_to_half / half_to_float of dtype.h. Both give the same bits, except the payload of NaNs (F16C keeps
// the quiet NaN's payload, the scalar form returns the canonical 0x7e00).
#pragma once

#include <cstdint>

#include "terngrad/core/dtype.h"

namespace tg {

void floats_to_halves(const float* in, half_bits* out, int64_t n);  // out[i] = float_to_half(in[i])
void halves_to_floats(const half_bits* in, float* out, int64_t n);  // out[i] = half_to_float(in[i])
// acc[i] += half_to_float(float_to_half(in[i])): adds fp16-rounded values in fp32 (a sum of fp16 payloads).
void add_rounded_to_half(const float* in, float* acc, int64_t n);
// dst[i] = float_to_half(half_to_float(dst[i]) + half_to_float(src[i])): an fp16 sum, rounded once per pair.
void add_halves(half_bits* dst, const half_bits* src, int64_t n);

}  // namespace tg

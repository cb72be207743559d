// The element-wise reductions of the host communicators (MpiCommunicator's ring, ThreadCommunicator), shared so
// that both combine two values the same way: dst[i] = dst[i] (op) src[i].
//   f32 sum: dst + src; f32 max: src when src > dst or src is NaN (a NaN on any rank wins, so every rank sees
//   it: the trainer stops on NaN scalers); i8/i32 sum: wrap-around through unsigned arithmetic (as MPI's do in
//   practice, and defined); i8/i32 max; f16 sum: half(float(dst) + float(src)), rounded to nearest even
//   (core/half_convert.h, F16C when the CPU has it); bf16 sum: bf16(float(dst) + float(src)), nearest even.
// Internal to src/comm (not a public header).
#pragma once

#include <cstddef>
#include <cstdint>

#include "terngrad/comm/communicator.h"
#include "terngrad/core/dtype.h"

namespace tg::comm_detail {

// dst (op)= src over `bytes` bytes of dtype elements; throws for a combination not listed above.
void reduce_into(uint8_t* dst, const uint8_t* src, size_t bytes, DType dtype, ReduceOp op);

}  // namespace tg::comm_detail

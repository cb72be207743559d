// GradientExchange: one training step's gradient exchange for one worker (DESIGN.md section 3, steps 3-7):
//   1. local per-tensor scalers -> all-reduce MAX (every worker then uses the same s per tensor),
//   2. ternary codes: allgather2 (gather every worker's packed 2-bit codes, sum locally) or allreduce8
//      (unpack to int8, all-reduce SUM; exact up to 127 workers),
//   3. fp16 tensors: one fused all-reduce SUM in fp16; fp32 tensors: one fused all-reduce SUM in fp32,
//   4. decode: the gradient tensors are overwritten with the average over workers.
// --exchange auto picks allgather2 below 8 workers and allreduce8 from 8 on. Each worker owns one
// GradientExchange (its scratch buffers) and calls run() with its own communicator; the worker index that
// keys the ternary randomness is the communicator's rank.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "terngrad/comm/communicator.h"
#include "terngrad/compress/gradient_codec.h"

namespace tg {

enum class ExchangeMode : uint8_t { Auto, Allgather2, Allreduce8 };
// "auto" | "allgather2" | "allreduce8"; anything else is an error naming --exchange and the choices.
ExchangeMode parse_exchange_mode(const std::string& s);
const char* exchange_mode_name(ExchangeMode m);
// Auto -> Allgather2 for num_workers < 8, Allreduce8 otherwise; explicit modes stay.
ExchangeMode resolve_exchange_mode(ExchangeMode m, int num_workers);

struct ExchangeStats {
  uint64_t payload_bytes = 0;       // bytes this worker handed to collectives in the step
  uint64_t moved_bytes = 0;         // bytes the algorithms move per rank (Communicator's byte model)
  uint64_t fp32_payload_bytes = 0;  // payload of the same step sent as fp32 (4 bytes per element)
  uint64_t fp32_moved_bytes = 0;    // ... and what a ring all-reduce of it moves per rank
};

class GradientExchange {
 public:
  GradientExchange(const CompressionPolicy& policy, Communicator& comm, ExchangeMode mode, uint64_t seed,
                   ThreadPool* pool = nullptr);

  // grads: one f32 host tensor per policy tensor (this worker's gradient); overwritten with the average.
  ExchangeStats run(const std::vector<Tensor>& grads, uint32_t step);

  ExchangeMode mode() const { return mode_; }  // resolved (never Auto)
  const GradientCodec& codec() const { return codec_; }
  // Of the last run: the shared scalers and this worker's zero-code count per ternary tensor (summaries).
  const std::vector<float>& shared_scalers() const { return encoded_.scalers; }
  const std::vector<int64_t>& zero_codes() const { return encoded_.zero_codes; }

 private:
  GradientCodec codec_;
  Communicator& comm_;
  ExchangeMode mode_;
  EncodedGradient encoded_;
  std::vector<uint8_t> gathered_;  // (N, packed_bytes) allgather2
  std::vector<int8_t> code_sums_;  // (4 * packed_bytes) allreduce8
};

}  // namespace tg

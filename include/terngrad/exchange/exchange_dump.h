// Exchange dumps (--exchange_dump DIR, --exchange_dump_step N): one step's exchange written out so that another
// backend can redo it. At step N every replica exchanges after backward (no overlap) and writes, into DIR:
//   rank<R>_gradients.npy  f32 [L, T]: its L local workers' gradients as they enter the exchange (T: every policy
//                          tensor's elements, concatenated in the policy's order)
//   rank<R>_params.npy     f32 [T]: its parameters, only when the exchange adds the weight decay itself
//   rank<R>_average.npy    f32 [T]: what the exchange left in the target's gradients (deferred decodes done)
//   exchange_dump.json     (replica 0 of process 0) the exchange's inputs: the step as the exchange counts it, the
//                          seed, --exchange, the compression flags, the tensors (name, elements), ranks and workers
//                          per rank, the weight decay coefficients the exchange applied.
// replay_exchange_dump redoes the exchange on the CPU backend from the gradients of every rank (all workers of all
// ranks as the local workers of one replica: the same global worker indices, so the same Philox keys and codes) and
// compares its average with every rank's: ternary-coded tensors bit for bit (the same codes for the same gradients),
// fp32 ones within a relative 1e-6 of the largest magnitude (a GPU group's sum order is NCCL's). Only stateless flat
// schemes replay: TernGrad's allgather2 and allreduce8 without error feedback, and fp32; fp16 (rounded per rank and
// again in the all-reduce: one replica cannot redo that), hierarchical, powersgd and none, error feedback and the
// quantization probe are refused with the flag named.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "terngrad/backend/backend.h"
#include "terngrad/compress/compression_policy.h"
#include "terngrad/exchange/exchange_options.h"

namespace tg {

struct ExchangeDumpManifest {
  uint32_t step = 0;  // as passed to GradientExchange::begin
  uint64_t seed = 1;
  std::string exchange = "auto";
  CompressionFlags compression;
  std::vector<ParamInfo> tensors;
  int ranks = 1;
  int workers_per_rank = 1;
  std::vector<float> weight_decay;  // per tensor, when the exchange applied it (rank<R>_params.npy then exists)

  int64_t total_elements() const;
  std::string to_json() const;
  // Throws naming `what` (the file) and the member that is missing or wrong.
  static ExchangeDumpManifest from_json(const std::string& text, const std::string& what);
};

// One replica's files; the tensors are on `be`'s device (copied to the host here: a synchronisation).
void write_exchange_dump_inputs(const std::string& dir, int rank, Backend& be,
                                const std::vector<std::vector<Tensor>>& worker_grads,
                                const std::vector<Tensor>& params);
void write_exchange_dump_average(const std::string& dir, int rank, Backend& be, const std::vector<Tensor>& average);
void write_exchange_dump_manifest(const std::string& dir, const ExchangeDumpManifest& m);

struct ExchangeReplayResult {
  int64_t ternary_elements = 0, other_elements = 0;  // compared per rank
  int64_t ternary_mismatches = 0;                    // over all ranks
  double worst_other = 0;                            // largest |replay - dump| / max(1e-30, max |replay|) of the rest
  std::string first_mismatch;                        // "rank 1 conv1/weights[17]: dump 0.25 replay -0.25", or ""
  bool passed() const { return ternary_mismatches == 0 && worst_other <= 1e-6; }
  std::string summary() const;
};
// Reads DIR (errors name the file and what is wrong), redoes the exchange on the CPU and compares.
ExchangeReplayResult replay_exchange_dump(const std::string& dir);

}  // namespace tg

// ExchangeOptions: how a replica's gradients are exchanged: --exchange (the algorithm), --bucket_mb and
// --overlap (the scheduler), --error_feedback and --local_bits (scheme options), the seed of the ternary
// rounding. The values of --exchange are the flat ones (ExchangeMode: the scheme --grad_bits chooses, TernGrad's
// codes gathered or summed) and every scheme row's own value (scheme_registry.h: hierarchical, powersgd, none, and a
// scheme registered from its folder), which chooses that scheme whatever --grad_bits:
//   auto          a scheme whose row claims the layout (hierarchical: ternary gradients on more than one node of
//                 more than one rank); otherwise allgather2 below 8 workers, allreduce8 from 8 on
//   allgather2    every worker's 2-bit codes gathered by every worker ((N-1) n/4 bytes in per worker)
//   allreduce8    codes summed as int8 by a ring all-reduce (2 (N-1)/N n bytes; exact up to 127 workers)
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "terngrad/core/enum_names.h"
#include "terngrad/core/flag_table.h"

namespace tg {

// The flat values of --exchange (the exchange's own; the schemes' values come from their rows).
enum class ExchangeMode : uint8_t { kAuto, kAllgather2, kAllreduce8 };
template <>
struct EnumNames<ExchangeMode> : EnumNamesBase {
  static constexpr const char* kFlag = "--exchange";
  static constexpr EnumName<ExchangeMode> kList[] = {{ExchangeMode::kAuto, "auto"},
                                                     {ExchangeMode::kAllgather2, "allgather2"},
                                                     {ExchangeMode::kAllreduce8, "allreduce8"}};
};
// Every value --exchange takes, the flat ones first ("auto, allgather2, allreduce8, hierarchical, ...").
std::vector<std::string> exchange_values();
// Throws a usage error naming `flag` and listing exchange_values() when `value` is not one of them.
void check_exchange_value(std::string_view value, std::string_view flag = "--exchange");
// The flat mode of an --exchange value: the value itself for auto, allgather2, allreduce8; kAuto for a scheme's own
// value (its scheme does not read the flat mode).
ExchangeMode flat_mode(const std::string& exchange);

// The layout facts --exchange auto decides on.
struct ExchangeLayout {
  int num_workers = 1;     // N
  int num_nodes = 1;       // nodes the job spans
  int ranks_per_node = 1;  // replicas per node
};

// The flat ternary algorithm for `workers` participants: allgather2 below 8, allreduce8 from 8 on (per-worker
// traffic (N-1) n/4 against 2 (N-1)/N n bytes). Explicit allgather2/allreduce8 stay.
ExchangeMode resolve_exchange_mode(ExchangeMode m, int num_workers);

// Where an overlapped exchange runs (ExchangeOptions::overlap_engine): kThread, the CPU's schedule (compute stages
// on the calling thread, collectives on a communication thread); kStream, a GPU's (each bucket's stages, codec kernels
// and collectives alike, enqueued on the backend's side stream as soon as the bucket is complete; on the CPU, where
// there is no second stream, the same schedule runs each bucket's stages inline on the calling thread). kAuto:
// kStream when the backend has a side stream, else kThread.
enum class OverlapEngine : uint8_t { kAuto, kThread, kStream };

// The exchange's flags as given (--exchange, --overlap, --bucket_mb, --error_feedback, --local_bits,
// --decode_in_update, --fp32_warmup_steps, --powersgd_rank), owned here
// with their flag sub-table (exchange_flags()); TrainConfig derives from this struct and embeds the table.
struct ExchangeConfig {
  std::string exchange = "auto";
  bool overlap = true;            // exchange buckets while backward runs (several processes, host gradients)
  double bucket_mb = 25;          // MiB of fp32 gradient per bucket (DDP's default)
  bool error_feedback = false;    // terngrad: carry each worker's rounding error to its next step
  int local_bits = 32;            // hierarchical: 32 (fp32) or 16 (fp16) inside a node
  bool decode_in_update = true;   // terngrad: the optimizer decodes the ternary average inside its update
  int64_t fp32_warmup_steps = 0;  // compressed exchanges: exchange fp32 gradients for the first this many steps
  int powersgd_rank = 1;          // powersgd: the rank of the low-rank approximations (PyTorch's default)
};
const std::vector<Flag<ExchangeConfig>>& exchange_flags();

// What a GradientExchange and its scheme are built with: the flags (their defaults declared once, above; a scheme
// ignores the options it does not have, and the trainer's own ones: decode_in_update, fp32_warmup_steps), the run's
// seed, and switches for tests. `exchange` (the flag's value) chooses the scheme; mode() is its flat mode.
struct ExchangeOptions : ExchangeConfig {
  uint64_t seed = 1;
  // CPU: check the shared scalers on the host as soon as they are shared (a non-finite one stops the step with
  // an error naming tensor and step). Off, only the device flag catches them (as on a GPU): tests of that flag.
  bool host_scaler_check = true;
  // The trainer leaves kAuto; tests run the GPU's schedule on the CPU with kStream.
  OverlapEngine overlap_engine = OverlapEngine::kAuto;

  ExchangeOptions() = default;
  // The flags' options (--exchange checked) with the run's seed.
  ExchangeOptions(const ExchangeConfig& c, uint64_t seed);
  ExchangeMode mode() const { return flat_mode(exchange); }
};

}  // namespace tg

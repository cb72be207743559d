// The registry rows of the dense schemes (scheme_registry.h): fp32 and fp16 sums, chosen by --grad_bits 32 and 16.
#include "src/exchange/schemes/dense/dense_scheme.h"
#include "terngrad/exchange/scheme_registry.h"

namespace tg {

std::vector<SchemeInfo> dense_schemes() {
  using namespace scheme_rules;  // NOLINT: the rules rows share
  return {
      {"fp32", "fp32 sums, all-reduced", &make_fp32_scheme, nullptr, 32, nullptr, any_bits, never, "auto", replayable,
       dense_buffer_bytes, nullptr},
      {"fp16", "fp16 sums of the compressed tensors, fp32 for the rest", &make_fp16_scheme, nullptr, 16, nullptr,
       any_bits, never, "auto",
       [](bool) -> const char* {
         return "--exchange_dump cannot replay --grad_bits 16 (each rank's sum is rounded to fp16, then the fp16 "
                "all-reduce rounds again: one replica cannot redo that)";
       },
       dense_buffer_bytes, nullptr},
  };
}

}  // namespace tg

// The registry row of --exchange none (scheme_registry.h): no exchange, the benchmarks' compute-only step.
#include "src/exchange/schemes/none/no_exchange_scheme.h"
#include "terngrad/exchange/scheme_registry.h"

namespace tg {

std::vector<SchemeInfo> none_schemes() {
  using namespace scheme_rules;  // NOLINT: the rules rows share
  return {
      {"none", "no exchange (benchmarks' compute-only step; replicas drift apart)", &make_no_exchange_scheme, "none", 0,
       nullptr, any_bits, never, "none",
       [](bool) -> const char* { return "--exchange_dump: --exchange none exchanges nothing"; },
       no_exchange_buffer_bytes, nullptr},
  };
}

}  // namespace tg

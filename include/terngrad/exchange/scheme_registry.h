// The registry of gradient schemes: name -> factory, one line per scheme (src/exchange/scheme_registry.cc), as
// Caffe's layer registry. Which scheme a run uses follows from the reference's flags (--grad_bits) and
// --exchange, with the layout of the job (nodes, ranks per node) for --exchange auto:
//   fp32          --grad_bits 32: fused fp32 sums, all-reduced
//   fp16          --grad_bits 16: the compressed tensors as fp16 sums, the rest fp32
//   terngrad      --grad_bits 1 with allgather2 or allreduce8: 2-bit codes of every worker (--error_feedback)
//   hierarchical  --exchange hierarchical (--grad_bits 1 or 32): fp32 inside a node, ternary (or fp32) between
//                 nodes on one ring per local index
//   powersgd      --exchange powersgd (--grad_bits 32): rank-R low-rank matrices with error feedback, all-reduced
//   none          --exchange none: no exchange (benchmarks' compute-only step)
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "terngrad/exchange/gradient_scheme.h"

namespace tg {

struct SchemeInfo {
  const char* name;
  const char* description;
  std::unique_ptr<GradientScheme> (*make)(SchemeContext& ctx);
};

// Every registered scheme, in registry order.
const std::vector<SchemeInfo>& gradient_schemes();
// The scheme called `name`; an unknown name is an error listing the known ones.
std::unique_ptr<GradientScheme> make_gradient_scheme(const std::string& name, SchemeContext& ctx);

// The layout facts --exchange auto decides on.
struct ExchangeLayout {
  int num_workers = 1;     // N
  int num_nodes = 1;       // nodes the job spans
  int ranks_per_node = 1;  // replicas per node
};
// The scheme name for --grad_bits / --exchange on this layout (explicit modes are kept; auto resolved as in
// exchange_options.h); a combination no scheme serves is an error naming the flags and the fix.
std::string scheme_name_for(int grad_bits, ExchangeMode mode, const ExchangeLayout& layout);
// Whether --grad_bits / --exchange compress the gradients (what an fp32 warm-up, --fp32_warmup_steps, precedes).
bool exchange_compresses(int grad_bits, ExchangeMode mode);
// The exchange mode of the uncompressed steps of a warm-up (with --grad_bits 32): the mode itself where it has an
// fp32 form (hierarchical: fp32 inside and between nodes; none), else auto (the flat fp32 all-reduce).
ExchangeMode fp32_form(ExchangeMode mode);

}  // namespace tg

// The registry of gradient schemes: one row per scheme, as Caffe's layer registry, holding its name, its factory and
// every rule about it: the --exchange value that chooses it or the --grad_bits that does, the --grad_bits it takes,
// whether it compresses (what an fp32 warm-up precedes), its fp32 form, whether --exchange_dump can replay it, its
// buffers' bytes and its options' flags. Each scheme folder (src/exchange/schemes/<folder>/) defines its rows in
// `std::vector<SchemeInfo> <folder>_schemes()`; the build lists the folders (tg_scheme_folders.inc, generated), so a
// new scheme is its folder alone. What the trainer and the tools ask of a scheme (scheme_name_for,
// exchange_compresses, fp32_form, check_replayable, the --exchange values and help) is read from the rows, so the
// train room names no scheme. Which scheme a run uses follows from the reference's flags (--grad_bits) and
// --exchange, with the layout of the job (nodes, ranks per node) for --exchange auto:
//   fp32          --grad_bits 32: fused fp32 sums, all-reduced
//   fp16          --grad_bits 16: the compressed tensors as fp16 sums, the rest fp32
//   terngrad      --grad_bits 1 with allgather2 or allreduce8: 2-bit codes of every worker (--error_feedback)
//   hierarchical  --exchange hierarchical (--grad_bits 1 or 32), or auto with --grad_bits 1 on several nodes of
//                 several ranks: fp32 inside a node, ternary (or fp32) between nodes on one ring per local index
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
  // How the flags choose it: `exchange`, the --exchange value that chooses it whatever --grad_bits; null: chosen by
  // --grad_bits equal to `grad_bits` with a flat --exchange (auto, allgather2, allreduce8). Neither (null and 0): by
  // its name only (make_gradient_scheme).
  const char* exchange;
  int grad_bits;
  // --exchange auto chooses it on this layout before the --grad_bits rows (null: never).
  bool (*auto_on)(int grad_bits, const ExchangeLayout& layout);
  // "" when it takes --grad_bits, else the refusal (one line naming the flags and the fix).
  std::string (*refuses_bits)(int grad_bits);
  // Whether it compresses the gradients at --grad_bits (what --fp32_warmup_steps precedes).
  bool (*compresses)(int grad_bits);
  // The --exchange of its uncompressed steps (an fp32 warm-up, the quantization probe's reference): its own value
  // where it has an fp32 form, else "auto" (with --grad_bits 32: the flat fp32 all-reduce).
  const char* fp32_form;
  // Why --exchange_dump cannot replay it on one replica (one line), or null when it can.
  const char* (*replay_refusal)(bool error_feedback);
  // The bytes of its buffers (arenas and state) on a replica, before it exists (train/memory_budget.h).
  size_t (*buffer_bytes)(const SchemeMemoryQuery& q);
  // Its options' flag rows (null: none), defined in its folder; exchange_flags() lists them after the exchange's own.
  const std::vector<Flag<ExchangeConfig>>& (*flags)();
};

// A scheme beyond the folders' rows (a test's, or a program's that links its own): one SchemeRegistration at namespace
// scope in the scheme's file, constructed before the registry's first use (static initialisation). The file must be
// linked as an object of the program: in a static library nothing references it and the linker drops it, so the
// library's own schemes are their folders' rows.
struct SchemeRegistration {
  explicit SchemeRegistration(const SchemeInfo& info);
};

// Every scheme, the built-in rows first, then the registered ones in the order they were registered; a name given
// twice is an error naming both (at the first use, so at the start of a run).
const std::vector<SchemeInfo>& gradient_schemes();
// Refuses a list with a name given twice (one line naming the scheme and both descriptions).
void check_unique_scheme_names(const std::vector<SchemeInfo>& schemes);
// The scheme called `name`; an unknown name is an error listing the known ones.
const SchemeInfo& gradient_scheme(const std::string& name);
std::unique_ptr<GradientScheme> make_gradient_scheme(const std::string& name, SchemeContext& ctx);

// The scheme name for --grad_bits / --exchange on this layout (a scheme's own value chooses it; auto resolved as in
// exchange_options.h); a combination no scheme serves is an error naming the flags and the fix.
std::string scheme_name_for(int grad_bits, const std::string& exchange, const ExchangeLayout& layout);
// Whether --grad_bits / --exchange compress the gradients (what an fp32 warm-up, --fp32_warmup_steps, precedes).
bool exchange_compresses(int grad_bits, const std::string& exchange);
// The --exchange of the uncompressed steps of a warm-up (with --grad_bits 32): the value itself where its scheme has
// an fp32 form (hierarchical: fp32 inside and between nodes; none), else "auto" (the flat fp32 all-reduce).
std::string fp32_form(const std::string& exchange);

// Rules several rows share.
namespace scheme_rules {
inline std::string any_bits(int) { return ""; }
inline bool never(int) { return false; }
inline bool always(int) { return true; }
inline const char* replayable(bool) { return nullptr; }
}  // namespace scheme_rules
// --exchange_dump: throws, naming why, when the scheme cannot be replayed on one replica (with --error_feedback:
// whether its state carries over) and which exchanges can.
void check_replayable(const std::string& scheme, bool error_feedback);

}  // namespace tg

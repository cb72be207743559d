// Heap allocation counter for benchmarks and tests of "a step allocates nothing": the library that holds
// alloc_counter.cc defines malloc & co. and forwards to glibc's implementations, so every allocation of the
// process (ours, oneDNN's, libstdc++'s, OpenMP's) passes through it. Counting is on only between start and
// stop. Link it only into executables that need it (it replaces malloc; sanitizer builds cannot use it).
// With start(true) each counted allocation is also attributed by its caller (the first frame of its backtrace
// outside malloc and libstdc++'s operator new): made by oneDNN's code (a loaded libdnnl*) or by anything else.
// Attribution costs a backtrace per allocation (microseconds): tests use it, timed benchmark loops do not.
#pragma once

#include <cstdint>

namespace tg::alloc_counter {

void start(bool attribute = false);
void stop();
int64_t count();            // allocations counted so far
int64_t count_in_onednn();  // ... of them, attributed ones that oneDNN's own code made (inside libdnnl)
void set_tracing(bool);     // a raw backtrace per counted allocation on stderr (resolve with addr2line)
long minor_page_faults();   // of the process so far (getrusage)

}  // namespace tg::alloc_counter

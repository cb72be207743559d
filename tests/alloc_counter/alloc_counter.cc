// The malloc interposer behind alloc_counter.h.
#include "alloc_counter/alloc_counter.h"

#include <execinfo.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>

extern "C" {
void* __libc_malloc(size_t);
void __libc_free(void*);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
}

namespace {
std::atomic<bool> g_counting{false};
std::atomic<bool> g_tracing{false};
std::atomic<int64_t> g_allocations{0};
thread_local bool t_in_trace = false;
inline void note_allocation() {
  if (!g_counting.load(std::memory_order_relaxed)) return;
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (g_tracing.load(std::memory_order_relaxed) && !t_in_trace) {
    t_in_trace = true;  // backtrace() may allocate on its first call
    void* frames[16];
    int n = backtrace(frames, 16);
    static const char kSep[] = "---- allocation\n";
    (void)!write(2, kSep, sizeof(kSep) - 1);
    backtrace_symbols_fd(frames, n, 2);
    t_in_trace = false;
  }
}
}  // namespace

extern "C" {
void* malloc(size_t n) {
  note_allocation();
  return __libc_malloc(n);
}
void free(void* p) { __libc_free(p); }
void* calloc(size_t n, size_t s) {
  note_allocation();
  return __libc_calloc(n, s);
}
void* realloc(void* p, size_t n) {
  note_allocation();
  return __libc_realloc(p, n);
}
void* memalign(size_t a, size_t n) {
  note_allocation();
  return __libc_memalign(a, n);
}
void* aligned_alloc(size_t a, size_t n) {
  note_allocation();
  return __libc_memalign(a, n);
}
int posix_memalign(void** out, size_t a, size_t n) {
  note_allocation();
  void* p = __libc_memalign(a, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
}

namespace tg::alloc_counter {
void start() { g_counting = true; }
void stop() { g_counting = false; }
int64_t count() { return g_allocations.load(); }
void set_tracing(bool on) { g_tracing = on; }
long minor_page_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}
}  // namespace tg::alloc_counter

// The malloc interposer behind alloc_counter.h.
#include "alloc_counter/alloc_counter.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <link.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>

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
std::atomic<bool> g_attributing{false};
std::atomic<int64_t> g_allocations{0}, g_in_onednn{0};
thread_local bool t_in_trace = false;

// The executable segments of the libraries an allocation is attributed through (filled by start()).
struct Range {
  uintptr_t lo = 0, hi = 0;
};
constexpr int kMaxRanges = 16;
Range g_onednn[kMaxRanges], g_libstdcxx[kMaxRanges];
int g_onednn_n = 0, g_libstdcxx_n = 0;

int add_segments(dl_phdr_info* info, size_t, void*) {
  const char* name = info->dlpi_name ? info->dlpi_name : "";
  Range* out = nullptr;
  int* n = nullptr;
  if (std::strstr(name, "libdnnl")) out = g_onednn, n = &g_onednn_n;
  if (std::strstr(name, "libstdc++")) out = g_libstdcxx, n = &g_libstdcxx_n;
  if (!out) return 0;
  for (int i = 0; i < info->dlpi_phnum && *n < kMaxRanges; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_LOAD && (ph.p_flags & PF_X))
      out[(*n)++] = {info->dlpi_addr + ph.p_vaddr, info->dlpi_addr + ph.p_vaddr + ph.p_memsz};
  }
  return 0;
}
bool in(const Range* r, int n, const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  for (int i = 0; i < n; ++i)
    if (a >= r[i].lo && a < r[i].hi) return true;
  return false;
}

inline void note_allocation() {
  if (!g_counting.load(std::memory_order_relaxed)) return;
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (t_in_trace || !(g_attributing.load(std::memory_order_relaxed) || g_tracing.load(std::memory_order_relaxed)))
    return;
  t_in_trace = true;
  void* frames[16];
  const int n = backtrace(frames, 16);
  // frames[0] is this interposer; the caller is the first frame past libstdc++'s operator new.
  for (int i = 1; i < n; ++i) {
    if (in(g_libstdcxx, g_libstdcxx_n, frames[i])) continue;
    if (in(g_onednn, g_onednn_n, frames[i])) g_in_onednn.fetch_add(1, std::memory_order_relaxed);
    break;
  }
  if (g_tracing.load(std::memory_order_relaxed)) {
    static const char kSep[] = "---- allocation\n";
    (void)!write(2, kSep, sizeof(kSep) - 1);
    backtrace_symbols_fd(frames, n, 2);
  }
  t_in_trace = false;
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
void start(bool attribute) {
  g_attributing = attribute;
  if (!t_in_trace) {
    t_in_trace = true;  // backtrace() allocates on its first call (it loads the unwinder): not while counting
    void* frames[2];
    backtrace(frames, 2);
    g_onednn_n = g_libstdcxx_n = 0;
    dl_iterate_phdr(add_segments, nullptr);
    t_in_trace = false;
  }
  g_counting = true;
}
void stop() { g_counting = false; }
int64_t count() { return g_allocations.load(); }
int64_t count_in_onednn() { return g_in_onednn.load(); }
void set_tracing(bool on) { g_tracing = on; }
long minor_page_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}
}  // namespace tg::alloc_counter

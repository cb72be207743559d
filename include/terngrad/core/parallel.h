// Host loops on the process's compute threads: the OpenMP team that oneDNN and the CPU backend's loops run
// on. The gradient codec, the optimizer and the exchange's reductions use the same team, so no second set of
// threads ever spins against it for the cores (measured on 2 cores: two pools cost 28% of a step in
// spin-waiting). A team belongs to the thread that starts the parallel region: call these from the compute
// (main) thread; a loop started from another thread (a communication thread) would start a second team.
//
// parallel_for(n, grain, fn) calls fn(begin, end) on contiguous chunks of [0, n), one per thread, never
// shorter than `grain` (short ranges run on the caller alone). fn must not throw. Results that must not
// depend on the thread count are reduced over fixed chunks (parallel_chunks), never over threads.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace tg {

// The compute threads of the calling thread's team (omp_get_max_threads; set by set_compute_threads, which
// CpuBackend calls with its --threads).
inline int compute_threads() { return omp_get_max_threads(); }
inline void set_compute_threads(int n) { omp_set_num_threads(std::max(1, n)); }

template <typename Fn>
void parallel_for(int64_t n, int64_t grain, const Fn& fn, int threads = compute_threads()) {
  const int64_t chunks = std::min<int64_t>(threads, std::max<int64_t>(1, n / std::max<int64_t>(grain, 1)));
  if (chunks <= 1) {
    if (n > 0) fn(int64_t{0}, n);
    return;
  }
#pragma omp parallel num_threads(static_cast <int>(chunks))
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t begin = n * t / nt, end = n * (t + 1) / nt;
    if (begin < end) fn(begin, end);
  }
}

// fn(chunk, begin, end) for the fixed chunks [k * chunk_size, min((k + 1) * chunk_size, n)) of [0, n),
// spread over the threads: a reduction that stores one partial result per chunk and combines them in chunk
// order gives the same bits at any thread count.
template <typename Fn>
void parallel_chunks(int64_t n, int64_t chunk_size, const Fn& fn, int threads = compute_threads()) {
  const int64_t num_chunks = n <= 0 ? 0 : (n + chunk_size - 1) / chunk_size;
  parallel_for(
      num_chunks, 1,
      [&](int64_t k0, int64_t k1) {
        for (int64_t k = k0; k < k1; ++k) fn(k, k * chunk_size, std::min(n, (k + 1) * chunk_size));
      },
      threads);
}

}  // namespace tg

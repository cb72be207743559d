// MpiCommunicator: collectives over MPI processes (see the header).
#include "terngrad/comm/mpi_communicator.h"

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "src/comm/reduce_into.h"
#include "terngrad/core/error.h"
#include "terngrad/core/half_convert.h"

namespace tg {

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return fmt::format("MPI error code {}", code);
  return fmt::format("{} ({})", std::string(text, len), code);
}

namespace {

// The ring: segments of kSegmentBytes (a multiple of every element size), up to kWindow sends and kWindow
// receives in flight; the scratch holds kWindow segments (16 MiB). Each segment is one MPI message, sent
// eagerly (kEagerLimit below).
constexpr size_t kSegmentBytes = size_t{4} << 20;
constexpr int kWindow = 4;
// Below this many bytes per rank an all-reduce or all-gather goes through Open MPI's non-blocking
// collective (latency-bound: fewer messages than the ring's 2(N-1)).
constexpr size_t kRingMinBytes = size_t{256} << 10;
constexpr int kRingTag = 7;

// Open MPI's TCP transport sends a message above its eager limit (64 KiB by default) with a rendezvous: the
// receiver answers the sender's first fragment with an acknowledgement before the bulk follows. Between two
// ranks both directions share one TCP socket, and that acknowledgement queues behind the megabytes of data the
// receiver is itself sending, so the two directions of an exchange often run one after the other: measured
// on a 1 Gbit/s emulated link (bench/link_bench.sh), a 2-rank all-gather or all-reduce ran at either ~119 or
// ~59 MB/s per direction, at random, raw MPI calls and our ring alike. With the ring's segments below the
// eager limit no acknowledgement is needed and both directions ran at ~118 MB/s in every repetition.
// MpiEnvironment sets this limit before MPI_Init unless the user set one (OMPI_MCA_btl_tcp_eager_limit or
// mpirun --mca btl_tcp_eager_limit).
constexpr size_t kEagerLimit = kSegmentBytes + 4096;  // + Open MPI's match header

// Without MPI_THREAD_MULTIPLE every MPI call of this file holds this lock (see the header). Decided once, from
// MPI_Query_thread, when MPI is first used after initialisation.
std::mutex g_mpi_mutex;
std::once_flag g_lock_mode_once;
bool g_need_lock = true;

bool mpi_needs_lock() {
  std::call_once(g_lock_mode_once, [] {
    int provided = MPI_THREAD_SINGLE;
    if (MPI_Query_thread(&provided) == MPI_SUCCESS) g_need_lock = provided < MPI_THREAD_MULTIPLE;
  });
  return g_need_lock;
}

class MpiLock {
 public:
  MpiLock() {
    if (mpi_needs_lock()) lock_ = std::unique_lock<std::mutex>(g_mpi_mutex);
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

// TG_MPI_CHECK under the process-wide lock when the library is not MPI_THREAD_MULTIPLE.
#define TG_MPI(call)    \
  do {                  \
    MpiLock mpi_lock_;  \
    TG_MPI_CHECK(call); \
  } while (0)

// The thread level to ask for: MPI_THREAD_MULTIPLE unless TG_MPI_THREAD_LEVEL=serialized.
int requested_thread_level() {
  const char* v = std::getenv("TG_MPI_THREAD_LEVEL");
  if (v == nullptr || *v == '\0' || std::string(v) == "multiple") return MPI_THREAD_MULTIPLE;
  TG_CHECK(std::string(v) == "serialized", "TG_MPI_THREAD_LEVEL={}: expected multiple or serialized", v);
  return MPI_THREAD_SERIALIZED;
}

}  // namespace

MpiEnvironment::MpiEnvironment() {
  int initialized = 0;
  TG_MPI_CHECK(MPI_Initialized(&initialized));
  if (!initialized) {
    setenv("OMPI_MCA_btl_tcp_eager_limit", std::to_string(kEagerLimit).c_str(), /*overwrite=*/0);
    int provided = 0;
    // MULTIPLE: replica threads and their communication threads drive different communicators at once.
    // SERIALIZED is enough with the process-wide lock (mpi_needs_lock).
    TG_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, requested_thread_level(), &provided));
    TG_CHECK(provided >= MPI_THREAD_SERIALIZED,
             "this MPI library provides thread level {}, terngrad needs MPI_THREAD_SERIALIZED ({})", provided,
             static_cast<int>(MPI_THREAD_SERIALIZED));
    owns_ = true;
    // Failures come back as return codes, turned into tg::Error by TG_MPI_CHECK, instead of aborting.
    TG_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  }
}

bool MpiEnvironment::thread_multiple() { return !mpi_needs_lock(); }

void MpiEnvironment::abort_all(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; this only satisfies [[noreturn]]
}

MpiEnvironment::~MpiEnvironment() {
  if (!owns_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

int MpiEnvironment::world_rank() const {
  int r = 0;
  TG_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &r));
  return r;
}

int MpiEnvironment::world_size() const {
  int s = 0;
  TG_MPI(MPI_Comm_size(MPI_COMM_WORLD, &s));
  return s;
}

namespace {

// fp16 sum, dst[i] = half(float(src[i]) + float(dst[i])), rounded to nearest even (core/half_convert.h: F16C
// when the CPU has it; the software conversions cost ~0.14 s per 30M elements, an AlexNet fp16 reduce-scatter).
void half_sum(half_bits* dst, const half_bits* src, size_t n) { add_halves(dst, src, static_cast<int64_t>(n)); }

// The MPI user op of the small (MPI_Iallreduce) path: inout = in + inout.
void half_sum_op(void* in, void* inout, int* len, MPI_Datatype*) {
  half_sum(static_cast<half_bits*>(inout), static_cast<const half_bits*>(in), static_cast<size_t>(*len));
}

// The small path's f32 max and i8 sum are ours too (src/comm/reduce_into.h), so that both paths agree: Open
// MPI's MPI_MAX keeps or drops a NaN depending on the operands' order (ours: a NaN wins on every rank), and its
// AVX int8 MPI_SUM saturates at -128/127 (ours wraps, as the ring's and the other communicators' do).
void f32_max_op(void* in, void* inout, int* len, MPI_Datatype*) {
  comm_detail::reduce_into(static_cast<uint8_t*>(inout), static_cast<const uint8_t*>(in),
                           static_cast<size_t>(*len) * sizeof(float), DType::kF32, ReduceOp::kMax);
}
void i8_sum_op(void* in, void* inout, int* len, MPI_Datatype*) {
  comm_detail::reduce_into(static_cast<uint8_t*>(inout), static_cast<const uint8_t*>(in), static_cast<size_t>(*len),
                           DType::kI8, ReduceOp::kSum);
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::kF32:
      return MPI_FLOAT;
    case DType::kI8:
      return MPI_INT8_T;
    case DType::kI32:
      return MPI_INT32_T;
    case DType::kF16:
      return MPI_UINT16_T;  // reduced by half_sum_op only
    default:
      TG_THROW("MPI communicator: no MPI datatype for {}", dtype_name(t));
  }
}

// Takes the communicator, not its name: formatting the name on every call would allocate.
void check_host(const MpiCommunicator& c, Device device) {
  TG_CHECK(device.is_cpu(), "{}: buffers on {} are not supported (host memory only; use the NCCL communicator)",
           c.name(), device.str());
}

// MPI counts are int: larger broadcasts go in chunks (the ring cuts everything into segments).
constexpr int64_t kMaxChunk = INT_MAX / 8;

// Waiting: spin (MPI_Testsome back to back) for kSpinNs, which covers a small collective on a fast link
// (a 1 MiB all-reduce over loopback TCP takes ~0.2 ms; a 50 us spin made it 2-15x slower); then sleep
// between tests, from kSleepMinNs doubling to the cap. While we sleep the kernel keeps moving data through
// the socket buffers, so the cap costs no bandwidth on large transfers. Measured with bench/comm_bench
// (bench/README.md, "Emulated link"): rank 0 waiting 300 ms for a late peer used 9-12 ms of CPU with a
// 500 us cap, 15-22 ms with 250 us, 28-50 ms with 100 us (each wake-up costs ~15 us: MPI_Testsome runs
// Open MPI's whole progress loop; nanosleep adds the 50 us default timer slack); a blocking MPI_Allreduce
// used 195-300 ms. 64-256 MiB transfers over loopback ran at the same speed with all three caps, and on the
// 1 Gbit/s emulated link a pair of 32 MiB messages moved ~118 MB/s each way with 1 ms sleeps between tests
// as with a blocking wait. 250 us: ~6% of a core while waiting, at most ~0.3 ms late noticing a completion.
constexpr int64_t kSpinNs = 200'000;
constexpr int64_t kSleepMinNs = 10'000;
constexpr int64_t kDefaultSleepCapNs = 250'000;

int64_t now_ns() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec;
}

int64_t sleep_cap_from_env() {
  const char* v = std::getenv("TG_MPI_POLL_CAP_US");
  if (v == nullptr || *v == '\0') return kDefaultSleepCapNs;
  char* end = nullptr;
  const long us = std::strtol(v, &end, 10);
  TG_CHECK(end != v && *end == '\0' && us >= 0 && us <= 100'000,
           "TG_MPI_POLL_CAP_US={}: expected microseconds in [0, 100000]", v);
  return int64_t{us} * 1000;
}

// abort_waits(): every MPI wait of this process stops at its next test and throws (the progress watchdog's abort;
// the process then ends the job). A process-wide switch: after it nothing of this process communicates again.
std::atomic<bool> g_waits_aborted{false};
std::mutex g_abort_mu;
std::string g_abort_why;  // under g_abort_mu; set once

// MPI_COMM_WORLD's rank of `rank` in `comm` (the process a person can find), or -1.
int world_rank_of(MPI_Comm comm, int rank) {
  MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  int out = -1;
  if (MPI_Comm_group(comm, &group) == MPI_SUCCESS && MPI_Comm_group(MPI_COMM_WORLD, &world) == MPI_SUCCESS)
    MPI_Group_translate_ranks(group, 1, &rank, world, &out);
  if (group != MPI_GROUP_NULL) MPI_Group_free(&group);
  if (world != MPI_GROUP_NULL) MPI_Group_free(&world);
  return out == MPI_UNDEFINED ? -1 : out;
}

// One wait's pacing: call pause() after every test that found nothing done.
class Backoff {
 public:
  explicit Backoff(int64_t cap_ns) : cap_ns_(cap_ns), start_ns_(now_ns()) {}
  void pause() {
    if (sleep_ns_ == 0) {
      if (cap_ns_ == 0 || now_ns() - start_ns_ < kSpinNs) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
        return;
      }
      sleep_ns_ = std::min(kSleepMinNs, cap_ns_);
    }
    timespec ts{0, static_cast<long>(sleep_ns_)};
    nanosleep(&ts, nullptr);
    sleep_ns_ = std::min(2 * sleep_ns_, cap_ns_);
  }

 private:
  int64_t cap_ns_;
  int64_t start_ns_;
  int64_t sleep_ns_ = 0;
};

}  // namespace

struct MpiCommunicator::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Op half_sum = MPI_OP_NULL, f32_max = MPI_OP_NULL, i8_sum = MPI_OP_NULL;
  int rank = 0, size = 1;
  int left_process = -1, right_process = -1;  // the ring's neighbours as MPI_COMM_WORLD ranks (-1: unknown)
  int64_t sleep_cap_ns = kDefaultSleepCapNs;
  // Ring state, reused by every call: requests 0..kWindow-1 are receives, kWindow..2*kWindow-1 sends.
  std::unique_ptr<uint8_t[]> scratch;  // kWindow received segments waiting to be reduced (allocated on first use)
  MPI_Request requests[2 * kWindow];
  size_t slot_offset[kWindow];  // byte offset (in the step's receive range) of the segment in each receive slot
  size_t slot_bytes[kWindow];
  int done_index[2 * kWindow];
  std::vector<uint8_t> partial[2];  // reduce-scatter's partial sums between ring steps (grow, never shrink)
  std::vector<uint8_t> staging;     // a copy of an in-place small reduce-scatter's input (grows)

  // The small path's MPI operation for dtype/op.
  MPI_Op mpi_op(DType dtype, ReduceOp op) const {
    if (dtype == DType::kF16) return half_sum;
    if (dtype == DType::kF32 && op == ReduceOp::kMax) return f32_max;
    if (dtype == DType::kI8 && op == ReduceOp::kSum) return i8_sum;
    return op == ReduceOp::kSum ? MPI_SUM : MPI_MAX;
  }

  // Takes ownership of `c` (a new communicator: a dup or a split).
  static std::unique_ptr<Impl> wrap(MPI_Comm c) {
    auto m = std::make_unique<Impl>();
    m->comm = c;
    // Errors come back as return codes (checked by TG_MPI_CHECK) instead of aborting the job.
    TG_MPI(MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN));
    TG_MPI(MPI_Comm_rank(m->comm, &m->rank));
    TG_MPI(MPI_Comm_size(m->comm, &m->size));
    TG_MPI(MPI_Op_create(&half_sum_op, 1, &m->half_sum));
    TG_MPI(MPI_Op_create(&f32_max_op, 1, &m->f32_max));
    TG_MPI(MPI_Op_create(&i8_sum_op, 1, &m->i8_sum));
    m->sleep_cap_ns = sleep_cap_from_env();
    m->left_process = world_rank_of(c, (m->rank + m->size - 1) % m->size);
    m->right_process = world_rank_of(c, (m->rank + 1) % m->size);
    return m;
  }

  // After abort_waits(): throws naming what this wait waited for and why it was aborted.
  void throw_if_aborted(const std::string& waiting_for) const {
    if (!g_waits_aborted.load(std::memory_order_acquire)) return;
    std::lock_guard<std::mutex> lock(g_abort_mu);
    TG_THROW("mpi (rank {} of {}) stopped waiting for {}: {}", rank, size, waiting_for, g_abort_why);
  }

  ~Impl() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    MpiLock lock;
    for (MPI_Op* o : {&half_sum, &f32_max, &i8_sum})
      if (*o != MPI_OP_NULL) MPI_Op_free(o);
    if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
  }

  // Waits for one request (a non-blocking collective) with the backoff.
  void wait(MPI_Request* request) const {
    Backoff backoff(sleep_cap_ns);
    for (;;) {
      int done = 0;
      TG_MPI(MPI_Test(request, &done, MPI_STATUS_IGNORE));
      if (done) return;
      if (g_waits_aborted.load(std::memory_order_acquire))
        throw_if_aborted(fmt::format("the other {} rank(s) of its collective", size - 1));
      backoff.pause();
    }
  }

  // One ring step: send `send_bytes` from `send` to the right neighbour while receiving `recv_bytes` from the
  // left one into `recv`, both cut into kSegmentBytes segments with up to kWindow of each in flight. With
  // `own` (reducing), received segments land in the scratch and recv becomes own (op) received, segment by
  // segment as they arrive (own may be recv).
  void ring_step(const uint8_t* send, size_t send_bytes, uint8_t* recv, size_t recv_bytes, const uint8_t* own,
                 DType dtype, ReduceOp op) {
    const bool reduce = own != nullptr;
    const int right = (rank + 1) % size, left = (rank + size - 1) % size;
    const size_t num_send = (send_bytes + kSegmentBytes - 1) / kSegmentBytes;
    const size_t num_recv = (recv_bytes + kSegmentBytes - 1) / kSegmentBytes;
    size_t sends_posted = 0, recvs_posted = 0, sends_done = 0, recvs_done = 0;
    for (MPI_Request& r : requests) r = MPI_REQUEST_NULL;
    Backoff backoff(sleep_cap_ns);
    while (sends_done < num_send || recvs_done < num_recv) {
      // Receives first, so that a peer's segment finds its buffer posted.
      while (recvs_posted < num_recv && requests[recvs_posted % kWindow] == MPI_REQUEST_NULL) {
        const int slot = static_cast<int>(recvs_posted % kWindow);
        const size_t offset = recvs_posted * kSegmentBytes;
        const size_t bytes = std::min(kSegmentBytes, recv_bytes - offset);
        uint8_t* into = reduce ? scratch.get() + slot * kSegmentBytes : recv + offset;
        slot_offset[slot] = offset;
        slot_bytes[slot] = bytes;
        TG_MPI(MPI_Irecv(into, static_cast<int>(bytes), MPI_BYTE, left, kRingTag, comm, &requests[slot]));
        ++recvs_posted;
      }
      while (sends_posted < num_send && requests[kWindow + sends_posted % kWindow] == MPI_REQUEST_NULL) {
        const int slot = kWindow + static_cast<int>(sends_posted % kWindow);
        const size_t offset = sends_posted * kSegmentBytes;
        const size_t bytes = std::min(kSegmentBytes, send_bytes - offset);
        TG_MPI(MPI_Isend(send + offset, static_cast<int>(bytes), MPI_BYTE, right, kRingTag, comm, &requests[slot]));
        ++sends_posted;
      }
      int num_done = 0;
      TG_MPI(MPI_Testsome(2 * kWindow, requests, &num_done, done_index, MPI_STATUSES_IGNORE));
      if (num_done == MPI_UNDEFINED) num_done = 0;  // no active request (cannot happen inside the loop)
      for (int k = 0; k < num_done; ++k) {
        const int slot = done_index[k];
        if (slot >= kWindow) {
          ++sends_done;
          continue;
        }
        if (reduce) {  // each block is reduced on one rank and copied to the others: the same bits everywhere
          uint8_t* into = recv + slot_offset[slot];
          if (own != recv) std::memcpy(into, own + slot_offset[slot], slot_bytes[slot]);
          comm_detail::reduce_into(into, scratch.get() + slot * kSegmentBytes, slot_bytes[slot], dtype, op);
        }
        ++recvs_done;
      }
      if (num_done == 0) {
        if (g_waits_aborted.load(std::memory_order_acquire)) {
          std::string peers;
          if (recvs_done < num_recv) peers = fmt::format("process {} (its data)", left_process);
          if (sends_done < num_send)
            peers += fmt::format("{}process {} (to take ours)", peers.empty() ? "" : " and ", right_process);
          throw_if_aborted(peers);
        }
        backoff.pause();
      }
    }
  }

  // The ring's reduce-scatter over N blocks of `bytes(b)` bytes: after it, `out` holds block `rank` reduced over
  // every rank. Step s sends block (rank - s - 1) and receives block (rank - s - 2), adding the local
  // contribution `in(b)` to the received partial sum: block b starts at rank b + 1 and ends at rank b. Partial
  // sums go to `step_out(s, b)` for the steps before the last (the block's place when reducing in place).
  template <typename In, typename Bytes, typename StepOut>
  void ring_reduce_scatter(In in, Bytes bytes, StepOut step_out, uint8_t* out, DType dtype, ReduceOp op) {
    if (!scratch) scratch = std::make_unique<uint8_t[]>(kWindow * kSegmentBytes);
    const int N = size, r = rank;
    const uint8_t* sent = nullptr;  // what the previous step produced: this step sends it on
    for (int s = 0; s < N - 1; ++s) {
      const int sb = (r - s - 1 + 2 * N) % N, rb = (r - s - 2 + 2 * N) % N;
      uint8_t* into = s == N - 2 ? out : step_out(s, rb);
      ring_step(s == 0 ? in(sb) : sent, bytes(sb), into, bytes(rb), in(rb), dtype, op);
      sent = into;
    }
  }

  // The ring's all-gather: step s passes block (rank - s) on to the right and receives block (rank - s - 1)
  // from the left, in place in `at(b)`.
  template <typename At, typename Bytes>
  void ring_allgather(At at, Bytes bytes) {
    if (!scratch) scratch = std::make_unique<uint8_t[]>(kWindow * kSegmentBytes);
    const int N = size, r = rank;
    for (int s = 0; s < N - 1; ++s) {
      const int sb = (r - s + 2 * N) % N, rb = (r - s - 1 + 2 * N) % N;
      ring_step(at(sb), bytes(sb), at(rb), bytes(rb), nullptr, DType::kU8, ReduceOp::kSum);
    }
  }
};

namespace {
MPI_Comm dup_of_world() {
  int initialized = 0;
  TG_MPI_CHECK(MPI_Initialized(&initialized));
  TG_CHECK(initialized, "MPI communicator: MPI is not initialised (create an MpiEnvironment first)");
  MPI_Comm c = MPI_COMM_NULL;
  TG_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &c));
  return c;
}
}  // namespace

MpiCommunicator::MpiCommunicator() : MpiCommunicator(Impl::wrap(dup_of_world())) {}

MpiCommunicator::MpiCommunicator(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)), rank_(impl_->rank), size_(impl_->size) {}

MpiCommunicator::~MpiCommunicator() = default;

std::unique_ptr<Communicator> MpiCommunicator::split_impl(int color, int key) {
  MPI_Comm c = MPI_COMM_NULL;
  TG_MPI(MPI_Comm_split(impl_->comm, color < 0 ? MPI_UNDEFINED : color, key, &c));
  if (c == MPI_COMM_NULL) return nullptr;
  return std::unique_ptr<Communicator>(new MpiCommunicator(Impl::wrap(c)));
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::split_shared_memory() {
  MPI_Comm c = MPI_COMM_NULL;
  TG_MPI(MPI_Comm_split_type(impl_->comm, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &c));
  return std::unique_ptr<MpiCommunicator>(new MpiCommunicator(Impl::wrap(c)));
}

void MpiCommunicator::abort_waits(const std::string& why) {
  std::lock_guard<std::mutex> lock(g_abort_mu);
  if (g_waits_aborted.load(std::memory_order_acquire)) return;
  g_abort_why = why;
  g_waits_aborted.store(true, std::memory_order_release);
}

std::vector<int> MpiCommunicator::unanswered_processes(double seconds) {
  int rank = 0, size = 1;
  TG_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  TG_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size));
  if (size == 1) return {};
  constexpr int kTag = 0x7e1a;  // MPI_COMM_WORLD carries nothing else of ours (every communicator is a duplicate)
  // Left to the process's end (a late word would land in freed memory otherwise), reachable from here.
  static int32_t* words = nullptr;
  static MPI_Request* recv = nullptr;
  words = new int32_t[static_cast<size_t>(size)];
  recv = new MPI_Request[static_cast<size_t>(size)];
  words[rank] = rank;
  for (int p = 0; p < size; ++p) {
    recv[p] = MPI_REQUEST_NULL;
    if (p == rank) continue;
    MPI_Request send = MPI_REQUEST_NULL;
    TG_MPI(MPI_Irecv(&words[p], 1, MPI_INT32_T, p, kTag, MPI_COMM_WORLD, &recv[p]));
    TG_MPI(MPI_Isend(&words[rank], 1, MPI_INT32_T, p, kTag, MPI_COMM_WORLD, &send));
    TG_MPI(MPI_Request_free(&send));
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  int missing = size - 1;
  while (missing > 0 && std::chrono::steady_clock::now() < deadline) {
    for (int p = 0; p < size; ++p) {
      if (recv[p] == MPI_REQUEST_NULL) continue;
      int done = 0;
      TG_MPI(MPI_Test(&recv[p], &done, MPI_STATUS_IGNORE));  // a done request becomes MPI_REQUEST_NULL
      if (done) --missing;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::vector<int> silent;
  for (int p = 0; p < size; ++p)
    if (p != rank && recv[p] != MPI_REQUEST_NULL) silent.push_back(p);
  return silent;
}

std::string MpiCommunicator::name() const { return fmt::format("mpi (rank {} of {})", rank_, size_); }

void MpiCommunicator::allreduce_impl(void* buffer, int64_t count, DType dtype, ReduceOp op, Device device) {
  check_host(*this, device);
  if (size_ == 1 || count == 0) return;
  Impl& m = *impl_;
  uint8_t* p = static_cast<uint8_t*>(buffer);
  const size_t elem = dtype_size(dtype);
  if (static_cast<size_t>(count) * elem < kRingMinBytes || count < size_) {
    const MPI_Op mop = m.mpi_op(dtype, op);
    MPI_Request request;
    TG_MPI(MPI_Iallreduce(MPI_IN_PLACE, p, static_cast<int>(count), mpi_type(dtype), mop, m.comm, &request));
    m.wait(&request);
    return;
  }
  // Block b: elements [block_begin(b), block_begin(b + 1)); the first count % size blocks hold one more.
  const int64_t base = count / size_, extra = count % size_;
  auto block_begin = [&](int b) { return b * base + std::min<int64_t>(b, extra); };
  auto block_ptr = [&](int b) { return p + static_cast<size_t>(block_begin(b)) * elem; };
  auto block_bytes = [&](int b) { return static_cast<size_t>(block_begin(b + 1) - block_begin(b)) * elem; };
  // Reduce-scatter in place (this rank ends with block rank_ reduced), then all-gather of the reduced blocks
  // (the same bits reach every rank): with equal blocks, exactly reduce_scatter followed by allgather.
  m.ring_reduce_scatter(
      block_ptr, block_bytes, [&](int, int b) { return block_ptr(b); }, block_ptr(rank_), dtype, op);
  m.ring_allgather(block_ptr, block_bytes);
}

void MpiCommunicator::reduce_scatter_impl(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                                          Device device) {
  check_host(*this, device);
  Impl& m = *impl_;
  const uint8_t* in = static_cast<const uint8_t*>(send);
  uint8_t* out = static_cast<uint8_t*>(recv);
  const size_t block = static_cast<size_t>(count) * dtype_size(dtype);
  if (size_ == 1 || count == 0) {
    if (out != in && block > 0) std::memmove(out, in, block);
    return;
  }
  if (block * static_cast<size_t>(size_) < kRingMinBytes) {
    // MPI has no in-place form that leaves the result in block rank (MPI_IN_PLACE puts it first): stage a copy.
    if (out == in + static_cast<size_t>(rank_) * block) {
      m.staging.resize(std::max(m.staging.size(), block * static_cast<size_t>(size_)));
      std::memcpy(m.staging.data(), in, block * static_cast<size_t>(size_));
      in = m.staging.data();
    }
    const MPI_Op mop = m.mpi_op(dtype, op);
    MPI_Request request;
    TG_MPI(MPI_Ireduce_scatter_block(in, out, static_cast<int>(count), mpi_type(dtype), mop, m.comm, &request));
    m.wait(&request);
    return;
  }
  // Partial sums alternate between two buffers of one block (the send buffer is not ours to write, and recv
  // may be block rank_ of it, still to be read by the last step).
  if (size_ > 2)
    for (auto& buf : m.partial) buf.resize(std::max(buf.size(), block));
  m.ring_reduce_scatter([&](int b) { return in + static_cast<size_t>(b) * block; }, [&](int) { return block; },
                        [&](int s, int) { return m.partial[s % 2].data(); }, out, dtype, op);
}

void MpiCommunicator::allgather_impl(const void* send, void* recv, size_t send_bytes, Device device) {
  check_host(*this, device);
  Impl& m = *impl_;
  uint8_t* out = static_cast<uint8_t*>(recv);
  uint8_t* mine = out + static_cast<size_t>(rank_) * send_bytes;
  if (send_bytes * size_ < kRingMinBytes) {
    MPI_Request request;
    // In place (send is this rank's block of recv): MPI_IN_PLACE, as MPI forbids aliased buffers.
    TG_MPI(MPI_Iallgather(mine == send ? MPI_IN_PLACE : send, static_cast<int>(send_bytes), MPI_BYTE, out,
                          static_cast<int>(send_bytes), MPI_BYTE, m.comm, &request));
    m.wait(&request);
    return;
  }
  if (mine != send) std::memmove(mine, send, send_bytes);
  m.ring_allgather([&](int b) { return out + static_cast<size_t>(b) * send_bytes; }, [&](int) { return send_bytes; });
}

void MpiCommunicator::broadcast_impl(void* buffer, size_t bytes, int root, Device device) {
  check_host(*this, device);
  uint8_t* p = static_cast<uint8_t*>(buffer);
  for (size_t done = 0; done < bytes;) {
    const int n = static_cast<int>(std::min<size_t>(kMaxChunk, bytes - done));
    MPI_Request request;
    TG_MPI(MPI_Ibcast(p + done, n, MPI_BYTE, root, impl_->comm, &request));
    impl_->wait(&request);
    done += n;
  }
}

void MpiCommunicator::barrier_impl() {
  MPI_Request request;
  TG_MPI(MPI_Ibarrier(impl_->comm, &request));
  impl_->wait(&request);
}

}  // namespace tg

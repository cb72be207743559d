// MpiCommunicator: collectives over MPI processes (see the header).
#include "terngrad/comm/mpi_communicator.h"

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

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

bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr ||
         std::getenv("PMIX_RANK") != nullptr;
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

}  // namespace

MpiEnvironment::MpiEnvironment() {
  int initialized = 0;
  TG_MPI_CHECK(MPI_Initialized(&initialized));
  if (!initialized) {
    setenv("OMPI_MCA_btl_tcp_eager_limit", std::to_string(kEagerLimit).c_str(), /*overwrite=*/0);
    int provided = 0;
    // SERIALIZED: a worker thread (not only the main one) may call MPI, one call at a time
    // (the GradientExchange's communication thread does, while the compute thread waits).
    TG_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided));
    TG_CHECK(provided >= MPI_THREAD_SERIALIZED,
             "this MPI library provides thread level {}, terngrad needs MPI_THREAD_SERIALIZED ({})", provided,
             static_cast<int>(MPI_THREAD_SERIALIZED));
    owns_ = true;
    // Failures come back as return codes, turned into tg::Error by TG_MPI_CHECK, instead of aborting.
    TG_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  }
}

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
  TG_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &r));
  return r;
}

int MpiEnvironment::world_size() const {
  int s = 0;
  TG_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &s));
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
  MPI_Op half_sum = MPI_OP_NULL;
  int rank = 0, size = 1;
  int64_t sleep_cap_ns = kDefaultSleepCapNs;
  // Ring state, reused by every call: requests 0..kWindow-1 are receives, kWindow..2*kWindow-1 sends.
  std::unique_ptr<uint8_t[]> scratch;  // kWindow received segments waiting to be reduced (allocated on first use)
  MPI_Request requests[2 * kWindow];
  size_t slot_offset[kWindow];  // byte offset (in the step's receive range) of the segment in each receive slot
  size_t slot_bytes[kWindow];
  int done_index[2 * kWindow];

  // Waits for one request (a non-blocking collective) with the backoff.
  void wait(MPI_Request* request) const {
    Backoff backoff(sleep_cap_ns);
    for (;;) {
      int done = 0;
      TG_MPI_CHECK(MPI_Test(request, &done, MPI_STATUS_IGNORE));
      if (done) return;
      backoff.pause();
    }
  }

  // One ring step: send `send_bytes` from `send` to the right neighbour while receiving `recv_bytes` from the
  // left one into `recv`, both cut into kSegmentBytes segments with up to kWindow of each in flight. With
  // `reduce`, received segments land in the scratch and are reduced into `recv` as they arrive.
  void ring_step(const uint8_t* send, size_t send_bytes, uint8_t* recv, size_t recv_bytes, bool reduce, DType dtype,
                 ReduceOp op) {
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
        TG_MPI_CHECK(MPI_Irecv(into, static_cast<int>(bytes), MPI_BYTE, left, kRingTag, comm, &requests[slot]));
        ++recvs_posted;
      }
      while (sends_posted < num_send && requests[kWindow + sends_posted % kWindow] == MPI_REQUEST_NULL) {
        const int slot = kWindow + static_cast<int>(sends_posted % kWindow);
        const size_t offset = sends_posted * kSegmentBytes;
        const size_t bytes = std::min(kSegmentBytes, send_bytes - offset);
        TG_MPI_CHECK(
            MPI_Isend(send + offset, static_cast<int>(bytes), MPI_BYTE, right, kRingTag, comm, &requests[slot]));
        ++sends_posted;
      }
      int num_done = 0;
      TG_MPI_CHECK(MPI_Testsome(2 * kWindow, requests, &num_done, done_index, MPI_STATUSES_IGNORE));
      if (num_done == MPI_UNDEFINED) num_done = 0;  // no active request (cannot happen inside the loop)
      for (int k = 0; k < num_done; ++k) {
        const int slot = done_index[k];
        if (slot >= kWindow) {
          ++sends_done;
          continue;
        }
        if (reduce)  // each block is reduced on one rank and copied to the others: the same bits everywhere
          comm_detail::reduce_into(recv + slot_offset[slot], scratch.get() + slot * kSegmentBytes, slot_bytes[slot],
                                   dtype, op);
        ++recvs_done;
      }
      if (num_done == 0) backoff.pause();
    }
  }
};

MpiCommunicator::MpiCommunicator() : impl_(std::make_unique<Impl>()) {
  int initialized = 0;
  TG_MPI_CHECK(MPI_Initialized(&initialized));
  TG_CHECK(initialized, "MPI communicator: MPI is not initialised (create an MpiEnvironment first)");
  TG_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &impl_->comm));
  // Errors come back as return codes (checked by TG_MPI_CHECK) instead of aborting the job.
  TG_MPI_CHECK(MPI_Comm_set_errhandler(impl_->comm, MPI_ERRORS_RETURN));
  TG_MPI_CHECK(MPI_Comm_rank(impl_->comm, &rank_));
  TG_MPI_CHECK(MPI_Comm_size(impl_->comm, &size_));
  TG_MPI_CHECK(MPI_Op_create(&half_sum_op, 1, &impl_->half_sum));
  impl_->rank = rank_;
  impl_->size = size_;
  impl_->sleep_cap_ns = sleep_cap_from_env();
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (impl_->half_sum != MPI_OP_NULL) MPI_Op_free(&impl_->half_sum);
  if (impl_->comm != MPI_COMM_NULL) MPI_Comm_free(&impl_->comm);
}

std::string MpiCommunicator::name() const { return fmt::format("mpi (rank {} of {})", rank_, size_); }

void MpiCommunicator::allreduce_impl(void* buffer, int64_t count, DType dtype, ReduceOp op, Device device) {
  check_host(*this, device);
  if (size_ == 1 || count == 0) return;
  Impl& m = *impl_;
  uint8_t* p = static_cast<uint8_t*>(buffer);
  const size_t elem = dtype_size(dtype);
  if (static_cast<size_t>(count) * elem < kRingMinBytes || count < size_) {
    MPI_Op mop = dtype == DType::kF16 ? m.half_sum : (op == ReduceOp::kSum ? MPI_SUM : MPI_MAX);
    MPI_Request request;
    TG_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, p, static_cast<int>(count), mpi_type(dtype), mop, m.comm, &request));
    m.wait(&request);
    return;
  }
  if (!m.scratch) m.scratch = std::make_unique<uint8_t[]>(kWindow * kSegmentBytes);
  // Block b: elements [block_begin(b), block_begin(b + 1)); the first count % size blocks hold one more.
  const int64_t base = count / size_, extra = count % size_;
  auto block_begin = [&](int b) { return b * base + std::min<int64_t>(b, extra); };
  auto block_ptr = [&](int b) { return p + static_cast<size_t>(block_begin(b)) * elem; };
  auto block_bytes = [&](int b) { return static_cast<size_t>(block_begin(b + 1) - block_begin(b)) * elem; };
  const int r = rank_, N = size_;
  // Reduce-scatter: after step s, block (r - s - 1) holds the sum of s + 2 ranks; at the end this rank owns
  // the full reduction of block (r + 1) mod N.
  for (int s = 0; s < N - 1; ++s) {
    const int sb = (r - s + 2 * N) % N, rb = (r - s - 1 + 2 * N) % N;
    m.ring_step(block_ptr(sb), block_bytes(sb), block_ptr(rb), block_bytes(rb), true, dtype, op);
  }
  // All-gather of the reduced blocks (the same bits reach every rank).
  for (int s = 0; s < N - 1; ++s) {
    const int sb = (r + 1 - s + 2 * N) % N, rb = (r - s + 2 * N) % N;
    m.ring_step(block_ptr(sb), block_bytes(sb), block_ptr(rb), block_bytes(rb), false, dtype, op);
  }
}

void MpiCommunicator::allgather_impl(const void* send, void* recv, size_t send_bytes, Device device) {
  check_host(*this, device);
  Impl& m = *impl_;
  uint8_t* out = static_cast<uint8_t*>(recv);
  if (send_bytes * size_ < kRingMinBytes) {
    MPI_Request request;
    TG_MPI_CHECK(MPI_Iallgather(send, static_cast<int>(send_bytes), MPI_BYTE, out, static_cast<int>(send_bytes),
                                MPI_BYTE, m.comm, &request));
    m.wait(&request);
    return;
  }
  const int r = rank_, N = size_;
  uint8_t* mine = out + static_cast<size_t>(r) * send_bytes;
  if (mine != send) std::memmove(mine, send, send_bytes);
  // Step s: pass block (r - s) on to the right, receive block (r - s - 1) from the left.
  for (int s = 0; s < N - 1; ++s) {
    const int sb = (r - s + 2 * N) % N, rb = (r - s - 1 + 2 * N) % N;
    m.ring_step(out + static_cast<size_t>(sb) * send_bytes, send_bytes, out + static_cast<size_t>(rb) * send_bytes,
                send_bytes, false, DType::kU8, ReduceOp::kSum);
  }
}

void MpiCommunicator::broadcast_impl(void* buffer, size_t bytes, int root, Device device) {
  check_host(*this, device);
  uint8_t* p = static_cast<uint8_t*>(buffer);
  for (size_t done = 0; done < bytes;) {
    const int n = static_cast<int>(std::min<size_t>(kMaxChunk, bytes - done));
    MPI_Request request;
    TG_MPI_CHECK(MPI_Ibcast(p + done, n, MPI_BYTE, root, impl_->comm, &request));
    impl_->wait(&request);
    done += n;
  }
}

void MpiCommunicator::barrier_impl() {
  MPI_Request request;
  TG_MPI_CHECK(MPI_Ibarrier(impl_->comm, &request));
  impl_->wait(&request);
}

}  // namespace tg

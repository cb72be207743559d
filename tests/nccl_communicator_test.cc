// Tests of NcclCommunicator. Without a CUDA build every test reports SKIPPED; without a GPU every test that
// needs one reports SKIPPED, and what can be seen without one is checked: the factory's one-line error naming
// the device, and (under mpirun, 2 processes) that the cross-process factory fails on every process instead of
// leaving one waiting. With one GPU: a 1-rank group (every collective is the identity), dtype checks, host
// and wrong-device buffers refused, bad device lists. With two or more: one thread per GPU runs each collective
// against a CPU reference (integer sums and max exact, float sums within rounding: NCCL's order is its own),
// every rank holding the same bits; and, with mpirun, one group over two processes of one GPU each.
// Reduce-scatter (in place too) against the same reference, split (ncclCommSplit, one thread or all GPUs in
// one group call) and connect_gpu_replicas' world/local/cross groups against the Topology.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/cuda_devices.h"
#include "common/error_of.h"
#include "common/mpi_launch.h"
#include "terngrad/comm/mpi_communicator.h"
#include "terngrad/core/error.h"
#ifdef TG_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "terngrad/comm/nccl_communicator.h"
#include "terngrad/comm/replica_groups.h"
#endif

namespace tg {
namespace {

#ifdef TG_HAVE_CUDA

int gpu_count() { return testing::cuda_device_count(); }

#define TG_NEED_GPUS(n) \
  if (gpu_count() < (n)) GTEST_SKIP() << "needs " << (n) << " CUDA device(s), found " << gpu_count()

void cuda_ok(cudaError_t e) { ASSERT_EQ(e, cudaSuccess) << cudaGetErrorString(e); }

// Device memory of one GPU, freed on scope exit.
struct DeviceBuffer {
  DeviceBuffer(int device, size_t bytes) : device(device), bytes(bytes) {
    cudaSetDevice(device);
    cuda_ok(cudaMalloc(&ptr, bytes == 0 ? 1 : bytes));
  }
  ~DeviceBuffer() {
    cudaSetDevice(device);
    cudaFree(ptr);
  }
  template <typename T>
  void upload(const std::vector<T>& v) {
    cudaSetDevice(device);
    cuda_ok(cudaMemcpy(ptr, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  template <typename T>
  std::vector<T> download(size_t n) const {
    std::vector<T> v(n);
    cudaSetDevice(device);
    cuda_ok(cudaMemcpy(v.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }
  int device;
  size_t bytes;
  void* ptr = nullptr;
};

// One stream per GPU, destroyed after the communicators that use them.
struct Streams {
  explicit Streams(const std::vector<int>& devices) {
    for (int d : devices) {
      cudaSetDevice(d);
      cudaStream_t s = nullptr;
      cuda_ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      streams.push_back(s);
      owners.push_back(d);
    }
  }
  ~Streams() {
    for (size_t k = 0; k < streams.size(); ++k) {
      cudaSetDevice(owners[k]);
      cudaStreamDestroy(static_cast<cudaStream_t>(streams[k]));
    }
  }
  std::vector<void*> streams;
  std::vector<int> owners;
};

using testing::error_of;

using NcclComms = std::vector<std::unique_ptr<NcclCommunicator>>;

// Tears down every communicator of these sets as ReplicaGroups does: all finalized first, then destroyed (a
// finalize may wait for its peers', which clearing one set after another would leave waiting for a destructor).
void tear_down(std::initializer_list<NcclComms*> sets) {
  std::vector<NcclCommunicator*> all;
  for (NcclComms* set : sets)
    for (auto& c : *set)
      if (c) all.push_back(c.get());
  finalize_nccl_communicators(all);
  for (NcclComms* set : sets) set->clear();
}

// cuda:0, cuda:1, ... of this machine, at most 8 (one NCCL rank each).
std::vector<int> gpus_up_to_8() {
  std::vector<int> devices;
  for (int d = 0; d < std::min(gpu_count(), 8); ++d) devices.push_back(d);
  return devices;
}

// One NCCL rank per GPU of the list (default: gpus_up_to_8()), each on a stream of its own (the streams outlive
// the communicators; the test ends with tear_down).
struct GpuRanks {
  explicit GpuRanks(std::vector<int> list = gpus_up_to_8()) : devices(std::move(list)) {}
  std::vector<int> devices;
  int G = static_cast<int>(devices.size());
  Streams s{devices};
  NcclComms comms = make_nccl_communicators(devices, s.streams);
};

// fn(r) on one thread per rank r < G, all at once (a collective returns only when every rank has called it).
template <typename F>
void on_each_rank(int G, F fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < G; ++r) threads.emplace_back([&fn, r] { fn(r); });
  for (auto& t : threads) t.join();
}

template <typename T>
std::vector<T> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> d(-1.0, 1.0);
  std::vector<T> v(n);
  for (auto& x : v) {
    if constexpr (std::is_same_v<T, float>)
      x = static_cast<float>(d(rng));
    else if constexpr (std::is_same_v<T, half_bits>)
      x = float_to_half(static_cast<float>(d(rng)));
    else if constexpr (std::is_same_v<T, bf16_bits>)
      x = float_to_bf16(static_cast<float>(d(rng)));
    else
      x = static_cast<T>(std::lround(d(rng) * 15));  // int8 sums of up to 8 ranks stay in range
  }
  return v;
}

template <typename T>
double as_double(T x) {
  if constexpr (std::is_same_v<T, half_bits>)
    return half_to_float(x);
  else if constexpr (std::is_same_v<T, bf16_bits>)
    return bf16_to_float(x);
  else
    return static_cast<double>(x);
}

#else
#define TG_NEED_GPUS(n) GTEST_SKIP() << "built without CUDA (TG_CUDA=OFF): no NCCL communicator"
#endif

TEST(NcclCommunicator, MissingDeviceIsAClearError) {
#ifndef TG_HAVE_CUDA
  GTEST_SKIP() << "built without CUDA (TG_CUDA=OFF): no NCCL communicator";
#else
  if (gpu_count() > 0) GTEST_SKIP() << "a CUDA device is present: the no-device message cannot be observed";
  const std::string m = error_of([] { make_nccl_communicators({0}, {nullptr}); });
  EXPECT_EQ(m.rfind("NCCL communicator on cuda:0: no CUDA device is available (cudaGetDeviceCount: ", 0), 0u) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  std::printf("the error: %s\n", m.c_str());
#endif
}

// A 1-rank group: every collective is the identity; argument errors.
TEST(NcclCommunicator, OneGpuGroup) {
  TG_NEED_GPUS(1);
#ifdef TG_HAVE_CUDA
  GpuRanks g({0});
  ASSERT_EQ(g.comms.size(), 1u);
  NcclCommunicator& c = *g.comms[0];
  EXPECT_EQ(c.rank(), 0);
  EXPECT_EQ(c.size(), 1);
  EXPECT_EQ(c.name(), "nccl (rank 0 of 1, cuda:0)");
  EXPECT_EQ(c.device(), Device::cuda(0));
  const size_t n = 1001;
  DeviceBuffer buf(0, n * 4), out(0, n * 4);
  auto identity = [&](auto tag, DType dtype, ReduceOp op) {
    using T = decltype(tag);
    const std::vector<T> v = random_values<T>(n, 3);
    buf.upload(v);
    c.allreduce(buf.ptr, n, dtype, op, Device::cuda(0));
    c.synchronize();
    const std::vector<T> back = buf.download<T>(n);
    EXPECT_EQ(std::memcmp(back.data(), v.data(), n * sizeof(T)), 0) << dtype_name(dtype) << " " << enum_name(op);
  };
  identity(float{}, DType::kF32, ReduceOp::kSum);
  identity(float{}, DType::kF32, ReduceOp::kMax);
  identity(int8_t{}, DType::kI8, ReduceOp::kSum);
  identity(int8_t{}, DType::kI8, ReduceOp::kMax);
  identity(int32_t{}, DType::kI32, ReduceOp::kSum);
  identity(int32_t{}, DType::kI32, ReduceOp::kMax);
  identity(half_bits{}, DType::kF16, ReduceOp::kSum);
  identity(bf16_bits{}, DType::kBf16, ReduceOp::kSum);
  const std::vector<uint8_t> bytes = random_values<uint8_t>(n, 9);
  buf.upload(bytes);
  c.allgather(buf.ptr, out.ptr, n, Device::cuda(0));
  c.broadcast(buf.ptr, n, 0, Device::cuda(0));
  c.barrier();
  EXPECT_EQ(out.download<uint8_t>(n), bytes);
  EXPECT_EQ(buf.download<uint8_t>(n), bytes);
  EXPECT_EQ(c.stats().calls, 8u + 3u);
  EXPECT_EQ(c.stats().moved_bytes, 0u);  // one rank moves nothing
  // use_stream: later collectives (and synchronize) on another stream, then back.
  Streams other({0});
  EXPECT_EQ(c.use_stream(other.streams[0]), g.s.streams[0]);
  EXPECT_EQ(c.stream(), other.streams[0]);
  identity(float{}, DType::kF32, ReduceOp::kSum);
  EXPECT_EQ(c.use_stream(g.s.streams[0]), other.streams[0]);
  EXPECT_EQ(c.stats().calls, 8u + 3u + 1u);
  // Refusals: the dtype/op, a host buffer (declared as such or not), another GPU's.
  EXPECT_NE(error_of([&] {
              c.allreduce(buf.ptr, n, DType::kF16, ReduceOp::kMax, Device::cuda(0));
            }).find("all-reduce max over f16 is not supported (supported: f32 sum, f32 max, f16 sum, bf16 sum"),
            std::string::npos);
  std::vector<float> host(n);
  EXPECT_NE(error_of([&] {
              c.allreduce(host.data(), n, DType::kF32, ReduceOp::kSum, Device::cpu());
            }).find("nccl (rank 0 of 1, cuda:0): buffers on cpu are not supported (device memory of cuda:0 only)"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              c.allreduce(host.data(), n, DType::kF32, ReduceOp::kSum, Device::cuda(0));
            }).find("is host memory, not memory of cuda:0"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              c.allgather(buf.ptr, out.ptr, 4, Device::cuda(1));
            }).find("buffers on cuda:1 are not supported (device memory of cuda:0 only)"),
            std::string::npos);
  // Bad device lists, one line each.
  EXPECT_NE(error_of([&] {
              make_nccl_communicators({0, 0}, {g.s.streams[0], g.s.streams[0]});
            }).find("listed twice"),
            std::string::npos);
  EXPECT_NE(error_of([&] { make_nccl_communicators({99}, {nullptr}); }).find("cuda:99: no such device"),
            std::string::npos);
  EXPECT_NE(error_of([&] { make_nccl_communicators({0}, {}); }).find("0 streams for 1 GPUs"), std::string::npos);
  g.comms.clear();  // before the streams go
#endif
}

// One thread per GPU; every collective against a CPU reference, every rank the same bits.
TEST(NcclCommunicator, ThreadPerGpuMatchesCpuReference) {
  TG_NEED_GPUS(2);
#ifdef TG_HAVE_CUDA
  GpuRanks g;
  const int G = g.G;
  NcclComms& comms = g.comms;
  const size_t n = (size_t{3} << 20) + 7;  // 12 MB of f32: NCCL's large-message path
  auto check = [&](auto tag, DType dtype, ReduceOp op, double rel_tol) {
    using T = decltype(tag);
    std::vector<std::vector<T>> in(G), out(G);
    for (int r = 0; r < G; ++r) in[r] = random_values<T>(n, 100u + r);
    on_each_rank(G, [&](int r) {
      DeviceBuffer b(r, n * sizeof(T));
      b.upload(in[r]);
      comms[r]->allreduce(b.ptr, n, dtype, op, Device::cuda(r));
      comms[r]->synchronize();
      out[r] = b.download<T>(n);
    });
    const std::string what = fmt::format("{} {} over {} GPUs", dtype_name(dtype), enum_name(op), G);
    for (int r = 1; r < G; ++r)
      ASSERT_EQ(std::memcmp(out[r].data(), out[0].data(), n * sizeof(T)), 0) << what << ": rank " << r << " differs";
    for (size_t i = 0; i < n; ++i) {
      double want = as_double(in[0][i]), scale = std::abs(want);
      for (int r = 1; r < G; ++r) {
        const double x = as_double(in[r][i]);
        want = op == ReduceOp::kSum ? want + x : std::max(want, x);
        scale += std::abs(x);
      }
      if (rel_tol == 0)
        ASSERT_EQ(as_double(out[0][i]), want) << what << " element " << i;
      else
        ASSERT_NEAR(as_double(out[0][i]), want, rel_tol * std::max(scale, 1.0)) << what << " element " << i;
    }
  };
  check(float{}, DType::kF32, ReduceOp::kSum, 1e-6 * G);
  check(float{}, DType::kF32, ReduceOp::kMax, 0);
  check(int8_t{}, DType::kI8, ReduceOp::kSum, 0);
  check(int32_t{}, DType::kI32, ReduceOp::kMax, 0);
  check(half_bits{}, DType::kF16, ReduceOp::kSum, 2e-3 * G);
  check(bf16_bits{}, DType::kBf16, ReduceOp::kSum, 1.6e-2 * G);
  // All-gather (separate and in place), broadcast from rank 1, barrier.
  const size_t block = (size_t{1} << 20) + 3;
  std::vector<std::vector<uint8_t>> gathered(G), in_place(G), bcast(G);
  on_each_rank(G, [&](int r) {
    const std::vector<uint8_t> mine = random_values<uint8_t>(block, 7u + r);
    DeviceBuffer send(r, block), recv(r, G * block), bc(r, block);
    send.upload(mine);
    comms[r]->allgather(send.ptr, recv.ptr, block, Device::cuda(r));
    comms[r]->synchronize();
    gathered[r] = recv.download<uint8_t>(G * block);
    cudaSetDevice(r);
    cuda_ok(cudaMemset(recv.ptr, 0, G * block));
    cuda_ok(cudaMemcpy(static_cast<uint8_t*>(recv.ptr) + r * block, mine.data(), block, cudaMemcpyHostToDevice));
    comms[r]->allgather(static_cast<uint8_t*>(recv.ptr) + r * block, recv.ptr, block, Device::cuda(r));
    bc.upload(mine);
    comms[r]->broadcast(bc.ptr, block, 1, Device::cuda(r));
    comms[r]->barrier();
    in_place[r] = recv.download<uint8_t>(G * block);
    bcast[r] = bc.download<uint8_t>(block);
  });
  std::vector<uint8_t> expected;
  for (int r = 0; r < G; ++r) {
    const std::vector<uint8_t> b = random_values<uint8_t>(block, 7u + r);
    expected.insert(expected.end(), b.begin(), b.end());
  }
  for (int r = 0; r < G; ++r) {
    EXPECT_EQ(gathered[r], expected) << "all-gather on rank " << r;
    EXPECT_EQ(in_place[r], expected) << "in-place all-gather on rank " << r;
    EXPECT_EQ(bcast[r], random_values<uint8_t>(block, 8u)) << "broadcast on rank " << r;
    uint64_t moved = 0;  // the six all-reduces (f32, f32, i8, i32, f16, bf16), two all-gathers, a broadcast
    for (size_t elem : {4, 4, 1, 4, 2, 2}) moved += Communicator::allreduce_moved_bytes(n * elem, G);
    moved += 2 * Communicator::allgather_moved_bytes(block, G) + block;
    EXPECT_EQ(comms[r]->stats().moved_bytes, moved) << "rank " << r;
    EXPECT_EQ(comms[r]->stats().calls, 6u + 2u + 1u + 1u) << "rank " << r;
  }
  tear_down({&comms});
#endif
}

// A 1-rank group: reduce-scatter is the identity (in place too); split with a color makes a new 1-rank
// communicator on the same GPU and stream, a negative color none; connect_gpu_replicas of one GPU makes no group.
TEST(NcclCommunicator, OneGpuReduceScatterAndSplit) {
  TG_NEED_GPUS(1);
#ifdef TG_HAVE_CUDA
  GpuRanks g({0});
  NcclCommunicator& c = *g.comms[0];
  const size_t n = 1001;
  const std::vector<float> v = random_values<float>(n, 5);
  DeviceBuffer in(0, n * 4), out(0, n * 4);
  in.upload(v);
  c.reduce_scatter(in.ptr, out.ptr, n, DType::kF32, ReduceOp::kSum, Device::cuda(0));
  c.reduce_scatter(in.ptr, in.ptr, n, DType::kF32, ReduceOp::kSum, Device::cuda(0));  // in place
  c.synchronize();
  EXPECT_EQ(out.download<float>(n), v);
  EXPECT_EQ(in.download<float>(n), v);
  EXPECT_EQ(c.split(-1, 0), nullptr);
  std::unique_ptr<Communicator> sub = c.split(0, 0);
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(sub->name(), "nccl (rank 0 of 1, cuda:0)");
  sub->allreduce(in.ptr, n, DType::kF32, ReduceOp::kMax, Device::cuda(0));
  sub->barrier();
  EXPECT_EQ(in.download<float>(n), v);
  EXPECT_EQ(sub->stats().calls, 2u);
  EXPECT_EQ(c.stats().calls, 2u);
  sub.reset();
  const Topology t = Topology::build(nullptr, 1, {});
  auto groups = connect_gpu_replicas(t, nullptr, {0}, g.s.streams);
  EXPECT_EQ(groups->replica(0).world, nullptr);
  EXPECT_EQ(groups->replica(0).local, nullptr);
  tear_down({&g.comms});
#endif
}

// One thread per GPU: an f32 reduce-scatter against the CPU reference (within rounding: NCCL's order), in place
// equal to out of place; the GPUs split by parity in one group call, an i32 sum over each half.
TEST(NcclCommunicator, ThreadPerGpuReduceScatterAndSplit) {
  TG_NEED_GPUS(2);
#ifdef TG_HAVE_CUDA
  GpuRanks g;
  const int G = g.G;
  NcclComms& comms = g.comms;
  const size_t n = (size_t{1} << 18) + 3;  // per rank
  std::vector<std::vector<float>> in(G), out(G), placed(G);
  for (int r = 0; r < G; ++r) in[r] = random_values<float>(G * n, 300u + r);
  on_each_rank(G, [&](int r) {
    DeviceBuffer a(r, G * n * 4), b(r, n * 4);
    a.upload(in[r]);
    comms[r]->reduce_scatter(a.ptr, b.ptr, n, DType::kF32, ReduceOp::kSum, Device::cuda(r));
    comms[r]->reduce_scatter(a.ptr, static_cast<float*>(a.ptr) + r * n, n, DType::kF32, ReduceOp::kSum,
                             Device::cuda(r));
    comms[r]->synchronize();
    out[r] = b.download<float>(n);
    const std::vector<float> all = a.download<float>(G * n);
    placed[r].assign(all.begin() + r * n, all.begin() + (r + 1) * n);
  });
  for (int r = 0; r < G; ++r) {
    EXPECT_EQ(out[r], placed[r]) << "rank " << r << ": in place differs";
    for (size_t i = 0; i < n; ++i) {
      double want = 0, scale = 0;
      for (int w = 0; w < G; ++w) {
        want += in[w][r * n + i];
        scale += std::abs(in[w][r * n + i]);
      }
      ASSERT_NEAR(out[r][i], want, 1e-6 * G * std::max(scale, 1.0)) << "rank " << r << " element " << i;
    }
    EXPECT_EQ(comms[r]->stats().moved_bytes, 2 * Communicator::reduce_scatter_moved_bytes(G * n * 4, G));
  }
  std::vector<NcclCommunicator*> parents;
  std::vector<int> colors, keys;
  for (int r = 0; r < G; ++r) {
    parents.push_back(comms[r].get());
    colors.push_back(r % 2);
    keys.push_back(r);
  }
  auto subs = split_nccl_communicators(parents, colors, keys);
  std::vector<int32_t> sums(G);
  on_each_rank(G, [&](int r) {
    DeviceBuffer x(r, 4);
    x.upload(std::vector<int32_t>{r + 1});
    subs[r]->allreduce(x.ptr, 1, DType::kI32, ReduceOp::kSum, Device::cuda(r));
    subs[r]->synchronize();
    sums[r] = x.download<int32_t>(1)[0];
  });
  for (int r = 0; r < G; ++r) {
    EXPECT_EQ(subs[r]->rank(), r / 2);
    EXPECT_EQ(subs[r]->size(), (G - r % 2 + 1) / 2);
    int want = 0;
    for (int w = r % 2; w < G; w += 2) want += w + 1;
    EXPECT_EQ(sums[r], want) << "rank " << r;
  }
  tear_down({&subs, &comms});
#endif
}

// ---- across processes (mpirun, 2 processes) ---------------------------------------------------------------

// Unequal GPU counts: every process gets the same error (checked before any GPU is touched, so this runs
// without GPUs too).
TEST(NcclAcrossProcesses, UnequalGpuCountsFailOnEveryProcess) {
#ifndef TG_HAVE_CUDA
  GTEST_SKIP() << "built without CUDA (TG_CUDA=OFF): no NCCL communicator";
#else
  TG_RUN_ON_N_MPI_RANKS(2);
  MpiCommunicator host;
  const std::vector<int> devices = host.rank() == 0 ? std::vector<int>{0} : std::vector<int>{0, 1};
  const std::vector<void*> streams(devices.size(), nullptr);
  const std::string m = error_of([&] { make_nccl_communicators_across_processes(host, devices, streams); });
  EXPECT_NE(m.find("process 0 brings 1 GPUs, process 1 brings 2: every process must bring the same number"),
            std::string::npos)
      << m;
  host.barrier();  // both got here: nobody was left waiting
#endif
}

// Without GPUs, each process reports its own missing device and none waits for the others.
TEST(NcclAcrossProcesses, MissingGpusFailOnEveryProcess) {
#ifndef TG_HAVE_CUDA
  GTEST_SKIP() << "built without CUDA (TG_CUDA=OFF): no NCCL communicator";
#else
  if (gpu_count() > 0) GTEST_SKIP() << "a CUDA device is present: the no-device path cannot be observed";
  TG_RUN_ON_N_MPI_RANKS(2);
  MpiCommunicator host;
  const std::string m = error_of([&] { make_nccl_communicators_across_processes(host, {0}, {nullptr}); });
  EXPECT_EQ(m.rfind("NCCL communicator on cuda:0: no CUDA device is available", 0), 0u) << m;
  host.barrier();
#endif
}

// Two processes of one GPU each (process p on cuda:p) form one group of 2: an f32 sum and an all-gather.
TEST(NcclAcrossProcesses, TwoProcessesOneGpuEach) {
  TG_NEED_GPUS(2);
#ifdef TG_HAVE_CUDA
  TG_RUN_ON_N_MPI_RANKS(2);
  MpiCommunicator host;
  const int p = host.rank();
  Streams s({p});
  auto comms = make_nccl_communicators_across_processes(host, {p}, s.streams);
  ASSERT_EQ(comms.size(), 1u);
  NcclCommunicator& c = *comms[0];
  EXPECT_EQ(c.rank(), p);
  EXPECT_EQ(c.size(), 2);
  const size_t n = 100003;
  DeviceBuffer b(p, n * 4), g(p, 2 * n);
  b.upload(std::vector<float>(n, 1.5f * (p + 1)));
  c.allreduce(b.ptr, n, DType::kF32, ReduceOp::kSum, Device::cuda(p));
  c.synchronize();
  EXPECT_EQ(b.download<float>(n), std::vector<float>(n, 4.5f));
  DeviceBuffer send(p, n);
  send.upload(std::vector<uint8_t>(n, static_cast<uint8_t>(p + 1)));
  c.allgather(send.ptr, g.ptr, n, Device::cuda(p));
  c.barrier();
  std::vector<uint8_t> want(2 * n, 1);
  std::fill(want.begin() + n, want.end(), 2);
  EXPECT_EQ(g.download<uint8_t>(2 * n), want);
  tear_down({&comms});
#endif
}

// connect_gpu_replicas over two processes of one GPU each as two emulated nodes (--ranks_per_node 1): a world of
// 2, no local group, a cross group of 2 (ncclCommSplit of the world); an i32 sum over each.
TEST(NcclAcrossProcesses, ReplicaGroupsOfTwoNodes) {
  TG_NEED_GPUS(2);
#ifdef TG_HAVE_CUDA
  TG_RUN_ON_N_MPI_RANKS(2);
  MpiCommunicator host;
  const int p = host.rank();
  Streams s({p});
  TopologyOptions o;
  o.ranks_per_node = 1;
  const Topology t = Topology::build(&host, 1, o);
  auto groups = connect_gpu_replicas(t, &host, {p}, s.streams);
  const ReplicaComms& c = groups->replica(0);
  ASSERT_NE(c.world, nullptr);
  EXPECT_EQ(c.local, nullptr);
  ASSERT_NE(c.cross, nullptr);
  EXPECT_EQ(c.cross->size(), 2);
  EXPECT_EQ(c.cross->rank(), p);
  DeviceBuffer x(p, 4);
  for (Communicator* g : {c.world, c.cross}) {
    x.upload(std::vector<int32_t>{p + 1});
    g->allreduce(x.ptr, 1, DType::kI32, ReduceOp::kSum, Device::cuda(p));
    g->barrier();
    EXPECT_EQ(x.download<int32_t>(1)[0], 3);
  }
  groups.reset();
#endif
}

}  // namespace
}  // namespace tg

int main(int argc, char** argv) { return tg::testing_mpi::run_all_tests_under_mpi_if_launched(argc, argv); }

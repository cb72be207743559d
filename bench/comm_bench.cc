// comm_bench: tg::MpiCommunicator's all-reduce and all-gather against the raw blocking Open MPI calls on the
// same bytes, in the same run, on 2 MPI processes. Run it under mpirun (2 ranks; anything else is refused):
//
//   mpirun --allow-run-as-root -np 2 --mca btl tcp,self build/bench/comm_bench [--sizes_mb 1,16,64,256]
//          [--reps 5] [--ops allreduce,allgather] [--caps_us 250] [--late_ms 1000]
//
// allreduce: f32 sum in place of S MB (raw: MPI_Allreduce(MPI_IN_PLACE, MPI_FLOAT, MPI_SUM)); allgather: a
// block of S MB per rank (raw: MPI_Allgather of MPI_BYTE; sizes above 64 MB are skipped for it). Each
// repetition runs raw then ours, after a barrier; a call's time is the slower rank's. Reported (markdown):
// the median time, GB/s = algorithm bytes per rank / time (the byte model of terngrad/comm/communicator.h:
// all-reduce 2(N-1)/N*n, all-gather (N-1)*n), ours/raw, and the CPU time (user+sys, getrusage(RUSAGE_THREAD))
// of the calling thread per call, median over repetitions: a blocking Open MPI collective busy-polls, so
// its CPU time is its wall time.
//
// "allocs/call": heap allocations in the whole process per call (malloc & co. interposed by
// tests/alloc_counter, as in train_step_bench), median over repetitions; ours should be 0 in steady state (the first
// call of a size may allocate: the ring's scratch, Open MPI's free lists).
//
// --caps_us: one MpiCommunicator per value of the wait's sleep cap (TG_MPI_POLL_CAP_US), to justify the
// default (a column per cap). --late_ms: adds a row where rank 1 enters a 1 MB all-reduce that many ms after
// rank 0; the row shows rank 0's wall time and its thread's CPU time while it waited (raw and ours).
#include <mpi.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "alloc_counter/alloc_counter.h"
#include "terngrad/comm/mpi_communicator.h"
#include "terngrad/core/error.h"

namespace {

double wall_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double thread_cpu_s() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

std::vector<long> parse_list(const std::string& flag, const std::string& text) {
  std::vector<long> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 0)
      TG_THROW("comm_bench: {} {}: expected non-negative integers", flag, text);
    out.push_back(v);
  }
  if (out.empty()) TG_THROW("comm_bench: {} is empty", flag);
  return out;
}

struct Options {
  std::vector<long> sizes_mb = {1, 16, 64, 256};
  int reps = 5;
  bool allreduce = true, allgather = true;
  std::vector<long> caps_us;  // empty: the communicator's default (or TG_MPI_POLL_CAP_US from the environment)
  long late_ms = 1000;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) TG_THROW("comm_bench: {} needs a value", a);
      return argv[++i];
    };
    if (a == "--sizes_mb") {
      o.sizes_mb = parse_list(a, value());
    } else if (a == "--reps") {
      o.reps = static_cast<int>(parse_list(a, value()).at(0));
      if (o.reps < 1) TG_THROW("comm_bench: --reps must be >= 1");
    } else if (a == "--ops") {
      const std::string v = value();
      o.allreduce = v.find("allreduce") != std::string::npos;
      o.allgather = v.find("allgather") != std::string::npos;
      if (!o.allreduce && !o.allgather) TG_THROW("comm_bench: --ops {}: expected allreduce and/or allgather", v);
    } else if (a == "--caps_us") {
      o.caps_us = parse_list(a, value());
    } else if (a == "--late_ms") {
      o.late_ms = parse_list(a, value()).at(0);
    } else if (a == "-h" || a == "--help") {
      std::printf(
          "usage: mpirun -np 2 comm_bench [--sizes_mb 1,16,64,256] [--reps 5] [--ops allreduce,allgather] "
          "[--caps_us 250,...] [--late_ms 1000 (0: no late-peer row)]\n");
      std::exit(0);
    } else {
      TG_THROW("comm_bench: unknown argument {} (--help)", a);
    }
  }
  return o;
}

struct Sample {
  std::vector<double> secs, cpu, allocs;
};

// Times `call` once on both ranks: barrier, call, the slower rank's wall time; this thread's CPU time.
template <typename F>
void time_once(MPI_Comm comm, Sample& s, F&& call) {
  MPI_Barrier(comm);
  const int64_t a0 = tg::alloc_counter::count();
  tg::alloc_counter::start();
  const double c0 = thread_cpu_s(), t0 = wall_s();
  call();
  double secs = wall_s() - t0;
  const double cpu = thread_cpu_s() - c0;
  tg::alloc_counter::stop();
  s.allocs.push_back(double(tg::alloc_counter::count() - a0));
  MPI_Allreduce(MPI_IN_PLACE, &secs, 1, MPI_DOUBLE, MPI_MAX, comm);
  s.secs.push_back(secs);
  s.cpu.push_back(cpu);
}

std::string fmt_bytes(size_t b) {
  return b >= (size_t{1} << 20) ? std::to_string(b >> 20) + " MiB" : std::to_string(b >> 10) + " KiB";
}

}  // namespace

int main(int argc, char** argv) {
  std::unique_ptr<tg::MpiEnvironment> env;
  try {
    const Options opt = parse(argc, argv);
    env = std::make_unique<tg::MpiEnvironment>();
    if (env->world_size() != 2) {
      if (env->world_rank() == 0)
        std::fprintf(stderr, "comm_bench: run it under mpirun with 2 ranks (this job has %d)\n", env->world_size());
      env.reset();
      return 2;
    }
    const int rank = env->world_rank();
    // One communicator per sleep cap asked for (the cap is read when the communicator is created).
    std::vector<std::unique_ptr<tg::MpiCommunicator>> ours;
    std::vector<std::string> labels;
    if (opt.caps_us.empty()) {
      ours.push_back(std::make_unique<tg::MpiCommunicator>());
      const char* cap = std::getenv("TG_MPI_POLL_CAP_US");
      labels.push_back(cap ? std::string("ours (cap ") + cap + " us)" : "ours");
    }
    for (long cap : opt.caps_us) {
      setenv("TG_MPI_POLL_CAP_US", std::to_string(cap).c_str(), 1);
      ours.push_back(std::make_unique<tg::MpiCommunicator>());
      labels.push_back("ours (cap " + std::to_string(cap) + " us)");
    }
    MPI_Comm raw;
    TG_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &raw));
    const int N = 2;

    if (rank == 0) {
      std::printf("| op | bytes per rank | raw ms | raw GB/s | raw CPU ms/call | raw allocs/call |");
      for (auto& l : labels)
        std::printf(" %s ms | %s GB/s | %s / raw | %s CPU ms/call | %s allocs/call |", l.c_str(), l.c_str(), l.c_str(),
                    l.c_str(), l.c_str());
      std::printf("\n|---|---|---|---|---|---|");
      for (size_t k = 0; k < labels.size(); ++k) std::printf("---|---|---|---|---|");
      std::printf("\n");
    }
    bool all_ok = true;
    auto report = [&](const std::string& op, size_t payload, uint64_t moved, const Sample& r,
                      const std::vector<Sample>& o) {
      if (rank != 0) return;
      const double rt = median(r.secs);
      std::printf("| %s | %s | %.2f | %.3f | %.2f | %.0f |", op.c_str(), fmt_bytes(payload).c_str(), 1e3 * rt,
                  double(moved) / rt / 1e9, 1e3 * median(r.cpu), median(r.allocs));
      for (const Sample& s : o) {
        const double t = median(s.secs);
        std::printf(" %.2f | %.3f | %.2f | %.2f | %.0f |", 1e3 * t, double(moved) / t / 1e9, rt / t,
                    1e3 * median(s.cpu), median(s.allocs));
      }
      std::printf("\n");
      std::fflush(stdout);
    };

    if (opt.allreduce) {
      for (long mb : opt.sizes_mb) {
        const size_t bytes = size_t(mb) << 20, n = bytes / sizeof(float);
        std::vector<float> buf(n);
        Sample r;
        std::vector<Sample> o(ours.size());
        for (int rep = 0; rep < opt.reps; ++rep) {
          std::fill(buf.begin(), buf.end(), float(rank + 1));
          time_once(raw, r,
                    [&] { TG_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf.data(), int(n), MPI_FLOAT, MPI_SUM, raw)); });
          for (size_t k = 0; k < ours.size(); ++k) {
            std::fill(buf.begin(), buf.end(), float(rank + 1) + float(k));
            time_once(raw, o[k],
                      [&] { ours[k]->allreduce(buf.data(), int64_t(n), tg::DType::kF32, tg::ReduceOp::kSum); });
            const float want = 3.f + 2.f * float(k);
            if (std::any_of(buf.begin(), buf.end(), [&](float v) { return v != want; })) {
              std::fprintf(stderr, "comm_bench: rank %d: wrong all-reduce result (%s)\n", rank, labels[k].c_str());
              all_ok = false;
            }
          }
        }
        report("allreduce f32", bytes, tg::Communicator::allreduce_moved_bytes(bytes, N), r, o);
      }
    }
    if (opt.allgather) {
      for (long mb : opt.sizes_mb) {
        if (mb > 64) continue;
        const size_t bytes = size_t(mb) << 20;
        std::vector<uint8_t> send(bytes, uint8_t(rank + 1)), recv(N * bytes);
        Sample r;
        std::vector<Sample> o(ours.size());
        for (int rep = 0; rep < opt.reps; ++rep) {
          time_once(raw, r, [&] {
            TG_MPI_CHECK(MPI_Allgather(send.data(), int(bytes), MPI_BYTE, recv.data(), int(bytes), MPI_BYTE, raw));
          });
          for (size_t k = 0; k < ours.size(); ++k) {
            std::fill(recv.begin(), recv.end(), uint8_t(0));
            time_once(raw, o[k], [&] { ours[k]->allgather(send.data(), recv.data(), bytes); });
            for (int w = 0; w < N; ++w)
              if (std::any_of(recv.begin() + w * bytes, recv.begin() + (w + 1) * bytes,
                              [&](uint8_t v) { return v != uint8_t(w + 1); })) {
                std::fprintf(stderr, "comm_bench: rank %d: wrong all-gather block %d (%s)\n", rank, w,
                             labels[k].c_str());
                all_ok = false;
              }
          }
        }
        report("allgather bytes", bytes, tg::Communicator::allgather_moved_bytes(bytes, N), r, o);
      }
    }
    if (opt.late_ms > 0) {
      // Rank 1 enters late: rank 0's thread waits; a busy-polling wait costs a core for the whole time.
      const size_t n = (size_t{1} << 20) / sizeof(float);
      std::vector<float> buf(n, 1.f);
      Sample r;
      std::vector<Sample> o(ours.size());
      auto late = [&] {
        if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(opt.late_ms));
      };
      for (int rep = 0; rep < std::min(opt.reps, 3); ++rep) {
        time_once(raw, r, [&] {
          late();
          TG_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf.data(), int(n), MPI_FLOAT, MPI_SUM, raw));
        });
        for (size_t k = 0; k < ours.size(); ++k)
          time_once(raw, o[k], [&] {
            late();
            ours[k]->allreduce(buf.data(), int64_t(n), tg::DType::kF32, tg::ReduceOp::kSum);
          });
      }
      report("allreduce f32, rank 1 " + std::to_string(opt.late_ms) + " ms late (rank 0's CPU)", size_t{1} << 20,
             tg::Communicator::allreduce_moved_bytes(size_t{1} << 20, N), r, o);
    }
    TG_MPI_CHECK(MPI_Comm_free(&raw));
    ours.clear();
    env.reset();
    return all_ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "comm_bench: %s\n", e.what());
    if (env) tg::MpiEnvironment::abort_all(1);
    return 1;
  }
}

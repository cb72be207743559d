// PhaseTimes (arithmetic, log-line and metrics forms), ScopedPhase, and Timeline: the step window, concurrent
// recording from two threads, no allocation while recording, the Chrome trace file (parsed with python3's
// json module, which the tests need; they report SKIPPED without it), flag checks and atomic writes.
#include "terngrad/core/timeline.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <new>
#include <sstream>
#include <thread>

#include "common/error_of.h"
#include "terngrad/core/error.h"
#include "terngrad/core/phase_times.h"

// Counts every allocation of the program, so a test can show that a stretch of code allocates nothing. GCC
// cannot see that these new and delete are a matching malloc/free pair and would warn where they inline.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
static std::atomic<long> g_allocations{0};
void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

namespace tg {
namespace {

namespace fs = std::filesystem;
using Clock = Timeline::Clock;
using std::chrono::microseconds;
using testing::error_of;

// A fresh folder under the system's temporary folder, removed with everything in it at the end of the test.
struct TempDir {
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() / ("tg_timeline_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path, fs::perms::owner_all, ec);
    fs::remove_all(path, ec);
  }
  fs::path path;
};

bool have_python() { return std::system("python3 -c '' >/dev/null 2>&1") == 0; }

// Loads the trace with python3's json module (so the file is valid JSON) and prints one line per event:
//   M <pid> <tid> <name> <args as sorted JSON>
//   X <pid> <tid> <name> <cat> <step> <ts> <dur> <args as sorted JSON>
// The python exits non-zero (and the test fails) on invalid JSON or an unexpected shape.
std::vector<std::string> trace_lines(const fs::path& trace) {
  const fs::path script = trace.parent_path() / "check_trace.py";
  std::ofstream(script) << R"(import json, sys
d = json.load(open(sys.argv[1]))
assert sorted(d) == ["displayTimeUnit", "traceEvents"], sorted(d)
assert d["displayTimeUnit"] == "ms"
for e in d["traceEvents"]:
    args = json.dumps(e["args"], sort_keys=True, separators=(",", ":"))
    if e["ph"] == "M":
        print("M", e["pid"], e["tid"], e["name"], args)
    else:
        assert e["ph"] == "X", e
        assert isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float)), e
        print("X", e["pid"], e["tid"], e["name"], e["cat"], e["args"]["step"], "%.3f" % e["ts"], "%.3f" % e["dur"], args)
)";
  const std::string out_file = (trace.parent_path() / "trace_lines.txt").string();
  const std::string cmd = "python3 " + script.string() + " " + trace.string() + " > " + out_file;
  EXPECT_EQ(std::system(cmd.c_str()), 0) << "python3 rejected " << trace;
  std::vector<std::string> lines;
  std::ifstream in(out_file);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<std::string> fields(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string f; in >> f;) out.push_back(f);
  return out;
}

// ---- PhaseTimes ------------------------------------------------------------------------------------------

TEST(PhaseTimes, NamesInOrder) {
  const char* want[] = {"input_wait",     "forward_backward", "scalers",       "encode", "comm_blocked",
                        "comm_in_flight", "decode",           "optimizer_ema", "other",  "comm_cpu"};
  ASSERT_EQ(kPhaseCount, 10);
  for (int i = 0; i < kPhaseCount; ++i) EXPECT_STREQ(phase_name(static_cast<Phase>(i)), want[i]);
  EXPECT_THROW(phase_name(Phase::kCount), Error);
}

TEST(PhaseTimes, Arithmetic) {
  PhaseTimes a;
  for (double s : a.seconds) EXPECT_EQ(s, 0.0);
  a.add(Phase::kForwardBackward, 0.25);
  a.add(Phase::kForwardBackward, 0.5);
  a.add(Phase::kCommInFlight, 2.0);
  a.add(Phase::kCommBlocked, 0.125);
  a.add(Phase::kCommCpu, 0.5);
  EXPECT_EQ(a.get(Phase::kForwardBackward), 0.75);
  EXPECT_EQ(a.total_excluding_in_flight(), 0.875);  // in-flight and the collectives' CPU overlap the rest

  PhaseTimes b;
  b.add(Phase::kForwardBackward, 0.25);
  b.add(Phase::kOther, 1.0);
  a += b;
  EXPECT_EQ(a.get(Phase::kForwardBackward), 1.0);
  EXPECT_EQ(a.get(Phase::kOther), 1.0);
  EXPECT_EQ(a.get(Phase::kCommInFlight), 2.0);

  const PhaseTimes half = a.scaled(0.5);
  EXPECT_EQ(half.get(Phase::kForwardBackward), 0.5);
  EXPECT_EQ(half.get(Phase::kCommInFlight), 1.0);
  EXPECT_EQ(half.get(Phase::kCommBlocked), 0.0625);
  EXPECT_EQ(a.get(Phase::kForwardBackward), 1.0);  // scaled() leaves the original alone
  EXPECT_EQ(half.total_excluding_in_flight(), 0.5 * a.total_excluding_in_flight());

  a.clear();
  for (double s : a.seconds) EXPECT_EQ(s, 0.0);
  EXPECT_EQ(a.total_excluding_in_flight(), 0.0);
}

TEST(PhaseTimes, CompactLogForm) {
  PhaseTimes t;
  t.add(Phase::kInputWait, 0.0001);
  t.add(Phase::kForwardBackward, 0.301);
  t.add(Phase::kScalers, 0.002);
  t.add(Phase::kEncode, 0.0051);
  t.add(Phase::kCommBlocked, 0.010);
  t.add(Phase::kCommInFlight, 0.040);
  t.add(Phase::kDecode, 0.0042);
  t.add(Phase::kOptimizerEma, 0.006);
  t.add(Phase::kOther, 0.0013);
  t.add(Phase::kCommCpu, 0.003);
  EXPECT_EQ(t.compact(), "in 0.1 fb 301 sc 2.0 en 5.1 comm 10/40 (cpu 3.0) de 4.2 opt 6.0 other 1.3 ms");
  EXPECT_EQ(PhaseTimes().compact(), "in 0.0 fb 0.0 sc 0.0 en 0.0 comm 0.0/0.0 (cpu 0.0) de 0.0 opt 0.0 other 0.0 ms");

  PhaseTimes edge;  // the precision switches after rounding: 9.96 ms is "10", 9.94 ms is "9.9"
  edge.add(Phase::kInputWait, 0.00996);
  edge.add(Phase::kForwardBackward, 0.00994);
  edge.add(Phase::kOther, 12.3456);
  EXPECT_EQ(edge.compact(), "in 10 fb 9.9 sc 0.0 en 0.0 comm 0.0/0.0 (cpu 0.0) de 0.0 opt 0.0 other 12346 ms");
}

TEST(PhaseTimes, NamedForMetrics) {
  PhaseTimes t;
  t.add(Phase::kInputWait, 1.5);
  t.add(Phase::kOther, 0.25);
  const auto named = t.named("time/");
  ASSERT_EQ(named.size(), size_t(kPhaseCount));
  EXPECT_EQ(named[0].first, "time/input_wait");
  EXPECT_EQ(named[0].second, 1.5);
  EXPECT_EQ(named[5].first, "time/comm_in_flight");
  EXPECT_EQ(named[8].first, "time/other");
  EXPECT_EQ(named[8].second, 0.25);
  EXPECT_EQ(named[9].first, "time/comm_cpu");
  EXPECT_EQ(t.named("")[1].first, "forward_backward");
}

// ---- ScopedPhase -----------------------------------------------------------------------------------------

TEST(ScopedPhase, AddsElapsedTimeOnce) {
  PhaseTimes t;
  {
    const auto outer_start = std::chrono::steady_clock::now();
    ScopedPhase scope(t, Phase::kDecode);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const double s = scope.stop();
    const double outer = std::chrono::duration<double>(std::chrono::steady_clock::now() - outer_start).count();
    EXPECT_GE(s, 0.005);
    EXPECT_LE(s, outer);  // not a fixed bound: the time around the scope, at any speed
    EXPECT_EQ(t.get(Phase::kDecode), s);
    EXPECT_EQ(scope.stop(), 0.0);  // a second stop adds nothing, nor does the destructor
  }
  const double after_first = t.get(Phase::kDecode);
  { ScopedPhase scope(t, Phase::kDecode); }  // the destructor stops it
  EXPECT_GT(t.get(Phase::kDecode), after_first);
  EXPECT_EQ(t.total_excluding_in_flight(), t.get(Phase::kDecode));
}

TEST(ScopedPhase, RejectsUnknownTrack) {
  Timeline tl("unused.json", 1, 1, 0);
  PhaseTimes t;
  EXPECT_NE(error_of([&] { ScopedPhase s(t, Phase::kEncode, &tl, 0); }).find("no track 0"), std::string::npos);
  tl.add_track("worker 0");
  EXPECT_NO_THROW(ScopedPhase(t, Phase::kEncode, &tl, 0));
  EXPECT_THROW(ScopedPhase(t, Phase::kEncode, &tl, 1), Error);
  EXPECT_THROW(ScopedPhase(t, Phase::kEncode, &tl, -1), Error);
}

// ---- Timeline --------------------------------------------------------------------------------------------

TEST(Timeline, RecordsOnlyStepsInWindow) {
  Timeline tl("unused.json", 3, 4, 0);
  const int track = tl.add_track("worker 0");
  const Clock::time_point t0 = Clock::now();
  EXPECT_FALSE(tl.recording());  // before the first set_step
  std::vector<bool> recording;
  for (int64_t step = 1; step <= 6; ++step) {
    tl.set_step(step);
    recording.push_back(tl.recording());
    tl.record(track, "forward_backward", t0, t0 + microseconds(10));
  }
  EXPECT_EQ(recording, (std::vector<bool>{false, false, true, true, false, false}));
  EXPECT_EQ(tl.num_events(), 2u);
  // A communication thread finishing step 4 after the compute thread moved on is kept; step 5 is not.
  tl.record_for_step(4, track, "allgather", t0, t0 + microseconds(10));
  tl.record_for_step(5, track, "allgather", t0, t0 + microseconds(10));
  EXPECT_EQ(tl.num_events(), 3u);

  PhaseTimes times;
  tl.set_step(2);
  { ScopedPhase s(times, Phase::kEncode, &tl, track); }  // outside: timed, not recorded
  tl.set_step(3);
  { ScopedPhase s(times, Phase::kEncode, &tl, track); }
  EXPECT_EQ(tl.num_events(), 4u);
  EXPECT_GT(times.get(Phase::kEncode), 0.0);
  EXPECT_EQ(tl.dropped_events(), 0u);

  const std::string json = tl.events_json();
  EXPECT_EQ(json.find("\"step\":1"), std::string::npos);
  EXPECT_EQ(json.find("\"step\":2"), std::string::npos);
  EXPECT_EQ(json.find("\"step\":5"), std::string::npos);
  EXPECT_NE(json.find("\"step\":3"), std::string::npos);
  EXPECT_NE(json.find("\"step\":4"), std::string::npos);
}

TEST(Timeline, WritesValidChromeTrace) {
  if (!have_python()) GTEST_SKIP() << "python3 not found: cannot parse the trace";
  const TempDir temp_trace("trace");
  const fs::path& dir = temp_trace.path;
  const fs::path path = dir / "trace.json";
  std::ofstream(path) << "an older file";  // replaced whole

  Timeline tl(path.string(), 1, 2, 0);
  const int worker = tl.add_track("worker 0");
  const int odd = tl.add_track("comm \"0\"\\\n");  // escaped on output, read back intact
  tl.set_step(1);
  const Clock::time_point t0 = Clock::now();
  tl.record(worker, "forward_backward", t0, t0 + microseconds(1500));
  tl.record(odd, "allgather", t0 + microseconds(200), t0 + microseconds(700), 4096, "bytes", "comm_in_flight");
  PhaseTimes times;
  tl.set_step(2);
  {
    ScopedPhase s(times, Phase::kOptimizerEma, &tl, worker, "momentum \"update\"");
    s.set_arg(7, "bucket");
  }
  tl.write();
  EXPECT_TRUE(fs::exists(path));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1) << "a temporary file left";

  const std::vector<std::string> lines = trace_lines(path);
  std::vector<std::string> meta, events;
  for (const std::string& l : lines) (l[0] == 'M' ? meta : events).push_back(l);
  EXPECT_NE(std::find(meta.begin(), meta.end(), R"(M 0 0 process_name {"name":"process 0"})"), meta.end());
  EXPECT_NE(std::find(meta.begin(), meta.end(), R"(M 0 0 thread_name {"name":"worker 0"})"), meta.end());
  EXPECT_NE(std::find(meta.begin(), meta.end(), R"(M 0 1 thread_name {"name":"comm \"0\"\\\n"})"), meta.end());
  EXPECT_NE(std::find(meta.begin(), meta.end(), R"(M 0 1 thread_sort_index {"sort_index":1})"), meta.end());

  ASSERT_EQ(events.size(), 3u);
  auto e0 = fields(events[0]);  // X pid tid name cat step ts dur args
  ASSERT_EQ(e0.size(), 9u) << events[0];
  EXPECT_EQ(e0[1], "0");
  EXPECT_EQ(e0[2], "0");
  EXPECT_EQ(e0[3], "forward_backward");
  EXPECT_EQ(e0[4], "step");
  EXPECT_EQ(e0[5], "1");
  const double ts0 = std::stod(e0[6]);
  EXPECT_GE(ts0, 0.0);
  EXPECT_LT(ts0, 5e6);
  EXPECT_EQ(e0[7], "1500.000");
  EXPECT_EQ(e0[8], R"({"step":1})");

  auto e1 = fields(events[1]);
  ASSERT_EQ(e1.size(), 9u) << events[1];
  EXPECT_EQ(e1[2], "1");
  EXPECT_EQ(e1[3], "allgather");
  EXPECT_EQ(e1[4], "comm_in_flight");
  EXPECT_NEAR(std::stod(e1[6]) - ts0, 200.0, 0.002);
  EXPECT_EQ(e1[7], "500.000");
  EXPECT_EQ(e1[8], R"({"bytes":4096,"step":1})");

  // The scope's name has a space and quotes: split off the fixed fields from the end.
  const std::string& l2 = events[2];
  EXPECT_EQ(l2.rfind(R"(X 0 0 momentum "update" optimizer_ema 2 )", 0), 0u) << l2;
  EXPECT_NE(l2.find(R"({"bucket":7,"step":2})"), std::string::npos) << l2;
}

TEST(Timeline, FragmentsOfSeveralProcessesJoin) {
  if (!have_python()) GTEST_SKIP() << "python3 not found: cannot parse the trace";
  const TempDir temp_join("join");
  const fs::path& dir = temp_join.path;
  std::vector<std::string> fragments;
  for (int process = 0; process < 2; ++process) {
    Timeline tl("unused.json", 1, 1, process);
    const int track = tl.add_track("worker " + std::to_string(process));
    tl.set_step(1);
    const Clock::time_point t0 = Clock::now();
    tl.record(track, "forward_backward", t0, t0 + microseconds(100 * (process + 1)));
    fragments.push_back(tl.events_json());
  }
  fragments.insert(fragments.begin() + 1, "");  // a process with nothing to say
  const fs::path path = dir / "all.json";
  Timeline::write_trace(path.string(), fragments);
  int process_names = 0, x_events = 0;
  for (const std::string& l : trace_lines(path)) {
    process_names += l.find(" process_name ") != std::string::npos;
    if (l[0] == 'X') {
      const auto f = fields(l);
      EXPECT_EQ(f[7], f[1] == "0" ? "100.000" : "200.000") << l;
      ++x_events;
    }
  }
  EXPECT_EQ(process_names, 2);
  EXPECT_EQ(x_events, 2);
}

TEST(Timeline, TwoThreadsRecordConcurrentlyWithoutAllocating) {
  if (!have_python()) GTEST_SKIP() << "python3 not found: cannot parse the trace";
  const int kPerThread = 5000;
  const TempDir temp_threads("threads");
  const fs::path& dir = temp_threads.path;
  Timeline tl((dir / "t.json").string(), 1, 1, 3, 2 * kPerThread);
  const int compute = tl.add_track("worker 0");
  const int comm = tl.add_track("comm");
  tl.set_step(1);

  std::atomic<bool> go{false};
  PhaseTimes compute_times, comm_times;  // one per thread, added up after the join
  auto body = [&](int track, PhaseTimes& times, Phase phase) {
    while (!go.load()) {
    }
    for (int i = 0; i < kPerThread; ++i) {
      if (i % 2) {
        ScopedPhase s(times, phase, &tl, track);
        s.set_arg(i, "index");
      } else {
        const Clock::time_point b = Clock::now();
        tl.record(track, "manual", b, b + microseconds(1), i, "index");
      }
    }
  };
  const long allocations_before = g_allocations.load();
  static int* volatile sink = nullptr;  // the counter sees allocations at all (volatile: not elided)
  sink = new int[16];
  delete[] sink;
  ASSERT_EQ(g_allocations.load(), allocations_before + 1);
  std::thread a(body, compute, std::ref(compute_times), Phase::kForwardBackward);
  std::thread b(body, comm, std::ref(comm_times), Phase::kCommInFlight);
  const long allocations_threads = g_allocations.load();  // std::threads' own state
  go = true;
  a.join();
  b.join();
  EXPECT_EQ(g_allocations.load(), allocations_threads) << "recording allocated";
  EXPECT_LE(allocations_threads - allocations_before, 5);
  EXPECT_EQ(tl.num_events(), size_t(2 * kPerThread));
  EXPECT_EQ(tl.dropped_events(), 0u);
  PhaseTimes total = compute_times;
  total += comm_times;
  EXPECT_GT(total.get(Phase::kForwardBackward), 0.0);
  EXPECT_GT(total.get(Phase::kCommInFlight), 0.0);
  EXPECT_EQ(total.total_excluding_in_flight(), compute_times.get(Phase::kForwardBackward));

  tl.write();
  std::map<std::string, int> per_track;
  std::map<std::string, std::vector<bool>> seen;
  for (const std::string& l : trace_lines(dir / "t.json")) {
    if (l[0] != 'X') continue;
    const auto f = fields(l);
    ASSERT_EQ(f[1], "3");  // the process index is the pid
    ++per_track[f[2]];
    const auto at = f[8].find("\"index\":");
    ASSERT_NE(at, std::string::npos) << l;
    auto& s = seen[f[2]];
    s.resize(kPerThread);
    s[std::stoi(f[8].substr(at + 8))] = true;
  }
  EXPECT_EQ(per_track["0"], kPerThread);
  EXPECT_EQ(per_track["1"], kPerThread);
  for (auto& [track, s] : seen) EXPECT_EQ(std::count(s.begin(), s.end(), true), kPerThread) << track;
}

TEST(Timeline, FullStorageDropsAndSaysSo) {
  Timeline tl("unused.json", 1, 1, 0, 3);
  const int track = tl.add_track("worker 0");
  tl.set_step(1);
  const Clock::time_point t0 = Clock::now();
  for (int i = 0; i < 10; ++i) tl.record(track, "encode", t0, t0 + microseconds(1));
  EXPECT_EQ(tl.num_events(), 3u);
  EXPECT_EQ(tl.dropped_events(), 7u);
  const std::string json = tl.events_json();
  EXPECT_NE(json.find(R"("name":"process_labels")"), std::string::npos);
  EXPECT_NE(json.find("timeline full: dropped 7 events"), std::string::npos) << json;

  Timeline roomy("unused.json", 1, 1, 0);
  EXPECT_EQ(roomy.events_json().find("process_labels"), std::string::npos);
}

TEST(Timeline, RecordChecksTrack) {
  Timeline tl("unused.json", 1, 1, 0);
  tl.add_track("worker 0");
  tl.set_step(1);
  const Clock::time_point t0 = Clock::now();
  EXPECT_THROW(tl.record(1, "x", t0, t0), Error);
  tl.set_step(2);
  EXPECT_NO_THROW(tl.record(1, "x", t0, t0));  // outside the window nothing is looked at
  EXPECT_THROW(Timeline("t.json", 0, 3, 0), Error);
  EXPECT_THROW(Timeline("t.json", 4, 3, 0), Error);
  EXPECT_THROW(Timeline("t.json", 1, 3, -1), Error);
}

TEST(Timeline, CheckPath) {
  const std::string missing = "/no/such/dir/t.json";
  const std::string msg = error_of([&] { Timeline::check_path(missing); });
  EXPECT_NE(msg.find("--timeline /no/such/dir/t.json: folder /no/such/dir does not exist"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos);

  const TempDir temp_checkpath("checkpath");
  const fs::path& dir = temp_checkpath.path;
  EXPECT_NO_THROW(Timeline::check_path((dir / "t.json").string()));
  EXPECT_NO_THROW(Timeline::check_path("relative_name.json"));  // the current folder
  EXPECT_NE(error_of([&] { Timeline::check_path(dir.string()); }).find("is a folder"), std::string::npos);
  std::ofstream(dir / "plain") << "x";
  EXPECT_NE(error_of([&] { Timeline::check_path((dir / "plain" / "t.json").string()); }).find("is not a folder"),
            std::string::npos);
  EXPECT_NE(error_of([&] { Timeline::check_path(""); }).find("--timeline: empty path"), std::string::npos);
  if (::geteuid() != 0) {  // root writes anywhere
    const fs::path locked = dir / "locked";
    fs::create_directory(locked);
    fs::permissions(locked, fs::perms::owner_read | fs::perms::owner_exec);
    EXPECT_NE(error_of([&] { Timeline::check_path((locked / "t.json").string()); }).find("is not writable"),
              std::string::npos);
    fs::permissions(locked, fs::perms::owner_all);
  }
}

TEST(Timeline, ParseSteps) {
  TimelineSteps s = Timeline::parse_steps("100-110");
  EXPECT_EQ(s.first, 100);
  EXPECT_EQ(s.last, 110);
  s = Timeline::parse_steps("7");
  EXPECT_EQ(s.first, 7);
  EXPECT_EQ(s.last, 7);
  s = Timeline::parse_steps("1-1");
  EXPECT_EQ(s.first, 1);
  EXPECT_EQ(s.last, 1);

  const std::pair<const char*, const char*> bad[] = {{"5-2", "ends before it starts"},
                                                     {"x", "expected a step A or a range A-B"},
                                                     {"0", "steps start at 1"},
                                                     {"0-3", "steps start at 1"},
                                                     {"", "expected"},
                                                     {"3-", "expected"},
                                                     {"-3", "expected"},
                                                     {"1-2-3", "expected"},
                                                     {" 4", "expected"},
                                                     {"4x", "expected"},
                                                     {"99999999999999999999", "expected"}};
  for (const auto& [value, why] : bad) {
    const std::string msg = error_of([&] { Timeline::parse_steps(value); });
    EXPECT_EQ(msg.rfind(std::string("--timeline_steps ") + value + ":", 0), 0u) << value << ": " << msg;
    EXPECT_NE(msg.find(why), std::string::npos) << value << ": " << msg;
  }
}

TEST(Timeline, WriteIntoVanishedFolderThrowsAndLeavesNothing) {
  const TempDir temp_vanish("vanish");
  const fs::path& parent = temp_vanish.path;
  const fs::path dir = parent / "out";
  fs::create_directory(dir);
  const fs::path path = dir / "t.json";
  Timeline tl(path.string(), 1, 1, 0);
  tl.add_track("worker 0");
  tl.set_step(1);
  tl.record(0, "encode", Clock::now(), Clock::now());
  fs::remove_all(dir);
  const std::string msg = error_of([&] { tl.write(); });
  EXPECT_NE(msg.find(path.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(dir));
  EXPECT_TRUE(fs::is_empty(parent)) << "something was written beside the vanished folder";

  // A target name taken by a folder: refused, and no temporary file stays behind.
  fs::create_directories(path);
  EXPECT_THROW(tl.write(), Error);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  EXPECT_TRUE(fs::is_directory(path));
}

}  // namespace
}  // namespace tg

// What the three command-line front-ends share: the options of a flag table (core/flag_table.h) and
// --help-markdown, one-line usage errors (exit 2), strict integer flags, and (terngrad-train) the stop signals.
//
// Usage errors: CLI11 prints its message and a "Run with --help" line and exits 103-114 by kind; ours print
// "<program>: error: <message> (see --help)" on one line and exit 2 for every usage error (bad values that
// parse, checked by the program itself, exit 1).
//
// Integers: CLI11 2.1 reads an int64 flag with strtoll and keeps the saturated value of an out-of-range number
// ("99999999999999999999" became INT64_MAX), and accepts octal/hex prefixes. strict_integers() makes every
// integer flag (command line or config file) accept only a plain decimal number that fits its type.
//
// StopSignals: the first SIGINT/SIGTERM sets the stop flag (the trainer finishes its step, saves a checkpoint
// and returns; a process waiting for input stops waiting). If the process is still running 10 s later (a long
// step, a collective waiting for a lost peer, a slow checkpoint write: the write is atomic, so cutting it
// leaves the previous checkpoint), it says so in one line and exits with 128 + signal. A second signal exits
// at once with 128 + signal (one a second or more after the first: a single request often arrives twice).
#pragma once

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "terngrad/core/flag_table.h"

namespace tg::apps {

// The CLI11 options of `table`, bound to the members of `config` (entries marked kFlagInternal are left out):
// a switch for kFlagSwitch booleans, an option with a value otherwise, and a switch per alias.
template <typename C>
void add_flag_table(CLI::App& app, const std::vector<Flag<C>>& table, C& config) {
  for (const Flag<C>& f : table) {
    if (f.has(kFlagInternal)) continue;
    const std::string name = std::string("--") + f.name;
    std::visit(
        [&](auto member) {
          auto& value = config.*member;
          if constexpr (std::is_same_v<std::decay_t<decltype(value)>, bool>) {
            if (f.has(kFlagSwitch)) {
              app.add_flag(name, value, f.full_help());
              return;
            }
          }
          CLI::Option* o = app.add_option(name, value, f.full_help());
          if (f.has(kFlagRequired))
            o->required();
          else
            o->capture_default_str();
        },
        f.member);
    for (const FlagAlias& a : f.aliases)
      app.add_flag_callback(
          std::string("--") + a.name,
          [f, &config, value = std::string(a.value)] { set_flag_from_text(f, config, value); },
          "same as " + name + " " + a.value);
  }
}

// --log_level, in every program's table of its own settings.
template <typename C>
Flag<C> log_level_flag() {
  return {"log_level", &C::log_level, "trace, debug, info, warn, error"};
}

// --help-markdown: prints the Markdown flag table (the README's; `rows` gives its rows) and exits 0.
template <typename Rows>
void add_help_markdown(CLI::App& app, Rows rows) {
  app.add_flag_callback(
      "--help-markdown",
      [rows] {
        const std::string text = flags_markdown_header() + rows();
        std::fwrite(text.data(), 1, text.size(), stdout);
        throw CLI::Success();
      },
      "print the flag table in Markdown (the README's) and exit");
}

inline int usage_error(const CLI::App& app, const CLI::ParseError& e, const char* program) {
  if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);  // --help
  std::string msg = e.what();
  for (char& c : msg)
    if (c == '\n' || c == '\r') c = ' ';
  std::fprintf(stderr, "%s: error: %s (see --help)\n", program, msg.c_str());
  return 2;
}

// A plain decimal integer that fits T (no sign for unsigned, no prefix, no spaces).
template <typename T>
inline std::string check_integer(const std::string& text) {
  T value{};
  const char* begin = text.data();
  const char* end = begin + text.size();
  if (std::is_unsigned<T>::value && !text.empty() && text[0] == '-')
    return "'" + text + "' is not a non-negative integer";
  const auto r = std::from_chars(begin, end, value, 10);
  if (r.ec == std::errc::result_out_of_range)
    return "'" + text + "' is out of range (" + std::to_string(std::numeric_limits<T>::min()) + " to " +
           std::to_string(std::numeric_limits<T>::max()) + ")";
  if (text.empty() || r.ec != std::errc() || r.ptr != end) return "'" + text + "' is not an integer";
  return "";
}

// Adds the strict check to every integer option of app (call after the options are added).
inline void strict_integers(CLI::App& app) {
  for (CLI::Option* o : app.get_options()) {
    const std::string type = o->get_type_name();
    if (type == "INT")
      o->check(CLI::Validator([](std::string& s) { return check_integer<int64_t>(s); }, "", "integer"));
    else if (type == "UINT")
      o->check(CLI::Validator([](std::string& s) { return check_integer<uint64_t>(s); }, "", "unsigned integer"));
  }
  for (CLI::App* sub : app.get_subcommands({})) strict_integers(*sub);
}

// --config FILE: CLI11 2.1 reads a value it cannot parse as it can ("batch_size = [1, 2" became batch 1), so
// the file is checked first: every "key = value" line needs a value, an opened '[' or quote must close on the
// line. Returns "" or one line naming the file, line and key. A missing file is CLI11's to report.
inline std::string check_config_file(int argc, char** argv) {
  std::string path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--config" && i + 1 < argc) path = argv[i + 1];
    if (a.rfind("--config=", 0) == 0) path = a.substr(9);
  }
  if (path.empty()) return "";
  std::ifstream in(path);
  if (!in.good()) return "";
  auto trim = [](std::string t) {
    const size_t b = t.find_first_not_of(" \t\r");
    if (b == std::string::npos) return std::string();
    return t.substr(b, t.find_last_not_of(" \t\r") - b + 1);
  };
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    line = trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    const size_t eq = line.find('=');
    if (eq == std::string::npos) continue;  // a section header, or a bare flag name
    const std::string key = trim(line.substr(0, eq)), value = trim(line.substr(eq + 1));
    const std::string where = "--config " + path + " line " + std::to_string(n) + ": " + key;
    if (value.empty()) return where + " has no value";
    const char open = value[0];
    const char close = open == '[' ? ']' : (open == '"' || open == '\'') ? open : 0;
    if (close && (value.size() < 2 || value.back() != close))
      return where + " = " + value + ": malformed value ('" + std::string(1, open) + "' is not closed)";
  }
  return "";
}

// The command line of a program: strict integers, the --config file checked first, then CLI11's parse. Returns
// -1 when the program goes on, else the exit status to return at once (a usage error: one line and 2; --help:
// the help and 0).
inline int parse_command_line(CLI::App& app, int argc, char** argv, const char* program) {
  strict_integers(app);
  try {
    const std::string bad_config = check_config_file(argc, argv);
    if (!bad_config.empty()) throw CLI::ConversionError(bad_config);
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return usage_error(app, e, program);
  }
  return -1;
}

// Construct first thing in main, before any thread exists (MPI, OpenMP, the input pipeline): the signals are
// blocked in this thread and so in every thread created later, and one thread of ours receives them with
// sigtimedwait. No handler ever interrupts a computation, and no blocking call anywhere sees EINTR. This is
// the fix of the SIGINT heap corruption ("corrupted size vs. prev_size" in 1 of 10 stopped runs): oneDNN's
// JIT f32 GEMM kernels (the FC layers) point rsp into a heap workspace while they run, so the kernel wrote the
// signal frame of a handler run on that thread into the heap (oneDNN issue #4845, fixed upstream in 3.11).
class StopSignals {
 public:
  explicit StopSignals(const char* program, double grace_seconds = 10.0) : program_(program), grace_(grace_seconds) {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set_, &old_mask_);
    thread_ = std::thread([this] { watch(); });
  }
  ~StopSignals() {
    done_ = true;
    thread_.join();
    pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);  // a signal still pending now gets the default action
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  const std::atomic<bool>* flag() const { return &stop_; }
  int signal_number() const { return first_.load(); }

 private:
  static const char* name(int sig) { return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal"; }

  [[noreturn]] void exit_now(int sig, const char* why) {
    std::fprintf(stderr,
                 "%s: error: %s %s: exiting at once without a checkpoint of the step in progress (the last "
                 "saved checkpoint is intact)\n",
                 program_, why, name(sig));
    std::fflush(stderr);
    ::_exit(128 + sig);
  }

  void watch() {
    using Clock = std::chrono::steady_clock;
    Clock::time_point deadline{}, first_at{};
    while (!done_) {
      const timespec poll{0, 50 * 1000 * 1000};
      const int sig = sigtimedwait(&set_, nullptr, &poll);
      if (done_) return;
      if (sig > 0) {
        if (first_ == 0) {
          first_ = sig;
          stop_ = true;
          first_at = Clock::now();
          deadline = first_at + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(grace_));
          continue;
        }
        // One request often arrives twice: `timeout` signals the command and then its process group, a
        // terminal's Ctrl-C reaches mpirun and its ranks, which mpirun then forwards it to. A second request is
        // one at least a second after the first.
        if (Clock::now() - first_at >= std::chrono::seconds(1)) exit_now(sig, "a second");
      }
      if (first_ != 0 && Clock::now() >= deadline) {
        char why[96];
        std::snprintf(why, sizeof why, "still running %.0f s after", grace_);
        exit_now(first_, why);
      }
    }
  }

  const char* program_;
  double grace_;
  sigset_t set_, old_mask_;
  std::atomic<bool> stop_{false}, done_{false};
  std::atomic<int> first_{0};
  std::thread thread_;
};

}  // namespace tg::apps

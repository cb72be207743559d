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
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
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

#include "terngrad/backend/build_info.h"
#include "terngrad/core/error.h"
#include "terngrad/core/flag_table.h"

namespace tg::apps {

// Markdown of the flag tables' help (`code`, **bold**) as plain text for --help in a terminal.
inline std::string plain_text(std::string s) {
  for (const char* mark : {"**", "`"})
    for (size_t at = s.find(mark); at != std::string::npos; at = s.find(mark, at)) s.erase(at, std::strlen(mark));
  return s;
}

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
              app.add_flag(name, value, plain_text(f.full_help()));
              return;
            }
          }
          CLI::Option* o = app.add_option(name, value, plain_text(f.full_help()));
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

// ---- names the user may have meant ---------------------------------------------------------------------------
// The Levenshtein distance of a and b ('-' and '_' equal).
inline size_t edit_distance(const std::string& a, const std::string& b) {
  auto same = [](char x, char y) { return x == y || ((x == '-' || x == '_') && (y == '-' || y == '_')); };
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (same(a[i - 1], b[j - 1]) ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// The closest of `names` to `typed` (a third of its length or fewer edits, at most 3), or "".
inline std::string closest_name(const std::string& typed, const std::vector<std::string>& names) {
  std::string best;
  size_t best_d = std::min<size_t>(3, std::max<size_t>(1, typed.size() / 3)) + 1;
  for (const std::string& n : names) {
    const size_t d = edit_distance(typed, n);
    if (d < best_d) best = n, best_d = d;
  }
  return best;
}

// Flags of the reference program (TernGrad's TensorFlow trainers) and of other trainers, by what they are here.
struct OtherFlagName {
  const char* name;
  const char* ours;  // our flag, when there is one
  const char* note;  // why not / what differs
};
inline const std::vector<OtherFlagName>& other_flag_names() {
  static const std::vector<OtherFlagName> names = {
      {"learning_rate", "initial_learning_rate", ""},
      {"lr", "initial_learning_rate", ""},
      {"dataset_name", "dataset", ""},
      {"epochs", "max_steps", "steps, not epochs"},
      {"num_epochs", "max_steps", "steps, not epochs"},
      {"input_queue_memory_factor", "shuffle_buffer", "examples, not a factor of 1024"},
      {"floating_grad_epoch", "fp32_warmup_steps", "steps of fp32 exchange before TernGrad"},
      {"gpus", "num_gpus", ""},
      {"log_device_placement", "log_level", "--log_level debug names each worker's device"},
      {"use_encoding", "", "the ternary codes are always sent 2-bit packed: nothing to turn on"},
      {"save_tower", "", "checkpoints hold one copy of the variables, as the reference's --save_tower 0"},
  };
  return names;
}

// The long option names of app and its subcommands, without the dashes.
inline std::vector<std::string> option_names(const CLI::App& app) {
  std::vector<std::string> out;
  for (const CLI::Option* o : app.get_options())
    for (const std::string& n : o->get_lnames()) out.push_back(n);
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    for (const std::string& n : option_names(*sub)) out.push_back(n);
  return out;
}

// What to say of an unknown flag name (no dashes): "did you mean --x?", our name of another program's flag,
// or "".
inline std::string flag_hint(const std::string& name, const std::vector<std::string>& known) {
  auto has = [&](const std::string& n) { return std::find(known.begin(), known.end(), n) != known.end(); };
  for (const OtherFlagName& o : other_flag_names()) {
    if (name != o.name) continue;
    const std::string note = *o.note ? std::string(o.note) : std::string();
    if (*o.ours && has(o.ours)) return "use --" + std::string(o.ours) + (note.empty() ? "" : " (" + note + ")");
    if (!*o.ours && !note.empty()) return note;
  }
  const std::string near = closest_name(name, known);
  return near.empty() ? "" : "did you mean --" + near + "?";
}

// A usage error: one line "<program>: error: <message> (see --help)", exit 2. Unknown flags are named with a
// hint each; an unknown subcommand lists the known ones.
inline int usage_error(const CLI::App& app, const CLI::ParseError& e, const char* program, int argc, char** argv) {
  if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);  // --help
  std::string msg = e.what();
  const std::vector<std::string> known = option_names(app);
  const std::vector<CLI::App*> subs = const_cast<CLI::App&>(app).get_subcommands([](CLI::App*) { return true; });
  std::vector<std::string> unknown, hints;
  bool command_seen = subs.empty();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--", 0) == 0 && a.size() > 2) {
      const std::string name = a.substr(2, a.find('=') == std::string::npos ? std::string::npos : a.find('=') - 2);
      if (std::find(known.begin(), known.end(), name) == known.end() && name != "help" && name != "version") {
        unknown.push_back("--" + name);
        hints.push_back(flag_hint(name, known));
      }
    } else if (!command_seen && !a.empty() && a[0] != '-') {
      command_seen = true;
      std::vector<std::string> names;
      for (const CLI::App* sub : subs) names.push_back(sub->get_name());
      if (std::find(names.begin(), names.end(), a) == names.end()) {
        std::string list;
        for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
        const std::string near = closest_name(a, names);
        msg = "unknown command '" + a + "'" + (near.empty() ? "" : " (did you mean " + near + "?)") +
              "; the commands: " + list;
        unknown.clear();
        break;
      }
    }
  }
  if (!unknown.empty()) {  // before any other complaint (a required flag missing, ...): the likely cause
    msg.clear();
    for (size_t i = 0; i < unknown.size(); ++i)
      msg +=
          (i ? "; " : "") + std::string("unknown flag ") + unknown[i] + (hints[i].empty() ? "" : " (" + hints[i] + ")");
  }
  for (char& c : msg)
    if (c == '\n' || c == '\r') c = ' ';
  std::fprintf(stderr, "%s: error: %s (see --help)\n", program, msg.c_str());
  return 2;
}

// The error line of a failure after the command line was read: "<program>: error: <message>"; exit 2 for a usage
// error (a flag's value fails its check), 1 otherwise. A failed check's expression and place go to the debug log.
// `process`: "process R of N" under mpirun (every failing process says its line once, naming itself), else empty.
inline int report_error(const std::exception& e, const char* program, const std::string& process = "") {
  std::fflush(stdout);
  if (const auto* te = dynamic_cast<const Error*>(&e); te && !te->location().empty())
    spdlog::debug("{}", te->location());
  if (process.empty())
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
  else
    std::fprintf(stderr, "%s (%s): error: %s\n", program, process.c_str(), e.what());
  std::fflush(stderr);
  return dynamic_cast<const UsageError*>(&e) ? 2 : 1;
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

// --config FILE: CLI11 2.1 reads a value it cannot parse as it can ("batch_size = [1, 2" became batch 1) and says
// "INI was not able to parse" of an unknown key, so the file is checked first: every key must be a flag of the
// program (a section only one of its commands'), every "key = value" line needs a value, an opened '[' or quote
// must close on the line. Returns "" or one line naming the file, the line and the key. A missing file is
// CLI11's to report.
inline std::string check_config_file(const CLI::App& app, int argc, char** argv) {
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
  const std::vector<std::string> known = option_names(app);
  std::vector<std::string> sections;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    sections.push_back(sub->get_name());
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    line = trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    const std::string at = "--config " + path + " line " + std::to_string(n) + ": ";
    if (line[0] == '[') {
      const std::string section =
          trim(line.substr(1, line.find(']') == std::string::npos ? std::string::npos : line.find(']') - 1));
      if (section == "default" || std::find(sections.begin(), sections.end(), section) != sections.end()) continue;
      return at + "section [" + section + "]: the keys are the flags' names at the top of the file, without a section";
    }
    const size_t eq = line.find('=');
    const std::string key = trim(line.substr(0, eq));
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      const std::string hint = flag_hint(key, known);
      return at + "unknown key '" + key + "'" + (hint.empty() ? "" : " (" + hint + ")");
    }
    if (eq == std::string::npos) continue;  // a bare switch name
    const std::string value = trim(line.substr(eq + 1));
    const std::string where = at + key;
    if (value.empty()) return where + " has no value";
    const char open = value[0];
    const char close = open == '[' ? ']' : (open == '"' || open == '\'') ? open : 0;
    if (close && (value.size() < 2 || value.back() != close))
      return where + " = " + value + ": malformed value ('" + std::string(1, open) + "' is not closed)";
  }
  return "";
}

// --version: the program, its version, commit, build type and compiler, and the libraries of its compute paths.
inline void add_version(CLI::App& app, const char* program) {
  app.add_flag_callback(
      "--version",
      [program] {
        std::printf("%s %s\n%s\n", program, build_version().c_str(), build_libraries().c_str());
        throw CLI::Success();
      },
      "print the version, the commit, the build type and the libraries, and exit");
}

// The command line of a program: --version, strict integers, the --config file checked first, then CLI11's
// parse. Returns -1 when the program goes on, else the exit status to return at once (a usage error: one line
// and 2; --help, --version: the text and 0).
inline int parse_command_line(CLI::App& app, int argc, char** argv, const char* program) {
  add_version(app, program);
  strict_integers(app);
  try {
    const std::string bad_config = check_config_file(app, argc, argv);
    if (!bad_config.empty()) throw CLI::ConversionError(bad_config);
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return usage_error(app, e, program, argc, argv);
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

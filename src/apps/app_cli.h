// What the command-line front-ends share: the options of a flag table (core/flag_table.h) and --help-markdown,
// one-line usage errors (exit 2) with did-you-mean hints, strict integer flags, the --config file's check and
// --version. The templates are here; the rest is compiled once (app_cli.cc). StopSignals: stop_signals.h.
//
// Usage errors: CLI11 prints its message and a "Run with --help" line and exits 103-114 by kind; ours print
// "<program>: error: <message> (see --help)" on one line and exit 2 for every usage error (bad values that
// parse, checked by the program itself, exit 1).
//
// Integers: CLI11 2.1 reads an int64 flag with strtoll and keeps the saturated value of an out-of-range number
// ("99999999999999999999" became INT64_MAX), and accepts octal/hex prefixes. strict_integers() makes every
// integer flag (command line or config file) accept only a plain decimal number that fits its type.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "terngrad/core/flag_table.h"

namespace tg::apps {

// Markdown of the flag tables' help (`code`, **bold**) as plain text for --help in a terminal.
std::string plain_text(std::string s);

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

// --log_level, in every program's table of its own settings; the programs' settings derive from LogLevel (its
// default written once).
struct LogLevel {
  std::string log_level = "info";
};
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
size_t edit_distance(const std::string& a, const std::string& b);

// The closest of `names` to `typed` (a third of its length or fewer edits, at most 3), or "".
std::string closest_name(const std::string& typed, const std::vector<std::string>& names);

// Flags of the reference program (TernGrad's TensorFlow trainers) and of other trainers, by what they are here.
struct OtherFlagName {
  const char* name;
  const char* ours;  // our flag, when there is one
  const char* note;  // why not / what differs
};
const std::vector<OtherFlagName>& other_flag_names();

// The long option names of app and its subcommands, without the dashes.
std::vector<std::string> option_names(const CLI::App& app);

// What to say of an unknown flag name (no dashes): "did you mean --x?", our name of another program's flag,
// or "".
std::string flag_hint(const std::string& name, const std::vector<std::string>& known);

// A usage error: one line "<program>: error: <message> (see --help)", exit 2. Unknown flags are named with a
// hint each; an unknown subcommand lists the known ones.
int usage_error(const CLI::App& app, const CLI::ParseError& e, const char* program, int argc, char** argv);

// The error line of a failure after the command line was read: "<program>: error: <message>"; exit 2 for a usage
// error (a flag's value fails its check), 1 otherwise. A failed check's expression and place go to the debug log.
// `process`: "process R of N" under mpirun (every failing process says its line once, naming itself), else empty.
int report_error(const std::exception& e, const char* program, const std::string& process = "");

// Adds the strict check to every integer option of app (call after the options are added).
void strict_integers(CLI::App& app);

// --config FILE: CLI11 2.1 reads a value it cannot parse as it can ("batch_size = [1, 2" became batch 1) and says
// "INI was not able to parse" of an unknown key, so the file is checked first: every key must be a flag of the
// program (a section only one of its commands'), every "key = value" line needs a value, an opened '[' or quote
// must close on the line. Returns "" or one line naming the file, the line and the key. A missing file is
// CLI11's to report.
std::string check_config_file(const CLI::App& app, int argc, char** argv);

// --version: the program, its version, commit, build type and compiler, and the libraries of its compute paths.
void add_version(CLI::App& app, const char* program);

// The command line of a program: --version, strict integers, the --config file checked first, then CLI11's
// parse. Returns -1 when the program goes on, else the exit status to return at once (a usage error: one line
// and 2; --help, --version: the text and 0).
int parse_command_line(CLI::App& app, int argc, char** argv, const char* program);

}  // namespace tg::apps

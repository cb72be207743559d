// The compiled part of the front-ends' shared command line (app_cli.h): names the user may have meant, usage and
// error lines, strict integers, the --config file's check, --version and the parse.
#include "app_cli.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <fstream>
#include <limits>

#include "terngrad/backend/build_info.h"
#include "terngrad/core/error.h"

namespace tg::apps {

namespace {

// A plain decimal integer that fits T (no sign for unsigned, no prefix, no spaces).
template <typename T>
std::string check_integer(const std::string& text) {
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

}  // namespace

std::string plain_text(std::string s) {
  for (const char* mark : {"**", "`"})
    for (size_t at = s.find(mark); at != std::string::npos; at = s.find(mark, at)) s.erase(at, std::strlen(mark));
  return s;
}

size_t edit_distance(const std::string& a, const std::string& b) {
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

std::string closest_name(const std::string& typed, const std::vector<std::string>& names) {
  std::string best;
  size_t best_d = std::min<size_t>(3, std::max<size_t>(1, typed.size() / 3)) + 1;
  for (const std::string& n : names) {
    const size_t d = edit_distance(typed, n);
    if (d < best_d) best = n, best_d = d;
  }
  return best;
}

const std::vector<OtherFlagName>& other_flag_names() {
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

std::vector<std::string> option_names(const CLI::App& app) {
  std::vector<std::string> out;
  for (const CLI::Option* o : app.get_options())
    for (const std::string& n : o->get_lnames()) out.push_back(n);
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    for (const std::string& n : option_names(*sub)) out.push_back(n);
  return out;
}

std::string flag_hint(const std::string& name, const std::vector<std::string>& known) {
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

int usage_error(const CLI::App& app, const CLI::ParseError& e, const char* program, int argc, char** argv) {
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

int report_error(const std::exception& e, const char* program, const std::string& process) {
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

void strict_integers(CLI::App& app) {
  for (CLI::Option* o : app.get_options()) {
    const std::string type = o->get_type_name();
    if (type == "INT")
      o->check(CLI::Validator([](std::string& s) { return check_integer<int64_t>(s); }, "", "integer"));
    else if (type == "UINT")
      o->check(CLI::Validator([](std::string& s) { return check_integer<uint64_t>(s); }, "", "unsigned integer"));
  }
  for (CLI::App* sub : app.get_subcommands({})) strict_integers(*sub);
}

std::string check_config_file(const CLI::App& app, int argc, char** argv) {
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

void add_version(CLI::App& app, const char* program) {
  app.add_flag_callback(
      "--version",
      [program] {
        std::printf("%s %s\n%s\n", program, build_version().c_str(), build_libraries().c_str());
        throw CLI::Success();
      },
      "print the version, the commit, the build type and the libraries, and exit");
}

int parse_command_line(CLI::App& app, int argc, char** argv, const char* program) {
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

}  // namespace tg::apps

// HelpFormat: `--help` as a person reads it: options in named groups, in the order given (the common ones first), each
// option's description on its own lines under its name, wrapped at 100 columns, and the program's footer (examples)
// at the end. Options of no listed group come last under "Other". Used by every program (groups: terngrad-train).
#pragma once

#include <CLI/CLI.hpp>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace tg::apps {

// `text` cut into lines of at most `width` characters at spaces (a longer word stands alone).
inline std::vector<std::string> wrap_words(const std::string& text, size_t width) {
  std::vector<std::string> lines;
  std::istringstream words(text);
  std::string word, line;
  while (words >> word) {
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      lines.push_back(line);
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  if (!line.empty()) lines.push_back(line);
  return lines;
}

class HelpFormat : public CLI::Formatter {
 public:
  static constexpr size_t kWidth = 100;
  // groups: (title, option names without "--"), in the order they are printed.
  explicit HelpFormat(std::vector<std::pair<std::string, std::vector<std::string>>> groups = {})
      : groups_(std::move(groups)) {}

  std::string make_option(const CLI::Option* opt, bool is_positional) const override {
    std::string out = "  " + make_option_name(opt, is_positional) + make_option_opts(opt) + "\n";
    for (const std::string& line : wrap_words(make_option_desc(opt), kWidth - 6)) out += "      " + line + "\n";
    return out;
  }

  std::string make_help(const CLI::App* app, std::string name, CLI::AppFormatMode mode) const override {
    if (groups_.empty() || mode != CLI::AppFormatMode::Normal) return CLI::Formatter::make_help(app, name, mode);
    std::string out = make_description(app) + make_usage(app, name);
    std::set<const CLI::Option*> shown;
    auto group = [&](const std::string& title, const std::vector<const CLI::Option*>& opts) {
      if (opts.empty()) return;
      out += "\n" + title + ":\n";
      for (const CLI::Option* o : opts) out += make_option(o, false);
      shown.insert(opts.begin(), opts.end());
    };
    for (const auto& [title, names] : groups_) {
      std::vector<const CLI::Option*> opts;
      for (const std::string& n : names)
        for (const CLI::Option* o : app->get_options())
          if (o->nonpositional() && shown.count(o) == 0 && o->check_lname(n)) opts.push_back(o);
      group(title, opts);
    }
    std::vector<const CLI::Option*> rest;
    for (const CLI::Option* o : app->get_options())
      if (o->nonpositional() && shown.count(o) == 0 && !o->get_group().empty()) rest.push_back(o);
    group("Other", rest);
    return out + make_footer(app);
  }

 private:
  std::vector<std::pair<std::string, std::vector<std::string>>> groups_;
};

}  // namespace tg::apps

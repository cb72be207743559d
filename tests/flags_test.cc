// EnumNames (parse, names, accepted values, aliases, case), the generic flag table (checks and their messages,
// the saved map, the Markdown rows, the CLI11 options with aliases and strict integers) and the tables of
// terngrad-train (what a checkpoint stores and compares, the defaults from the dataset and model tables).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "common/error_of.h"
#include "src/apps/app_cli.h"
#include "terngrad/core/enum_names.h"
#include "terngrad/core/flag_table.h"
#include "terngrad/data/dataset_info.h"
#include "terngrad/data/image_codec.h"
#include "terngrad/data/tfrecord.h"
#include "terngrad/exchange/gradient_exchange.h"
#include "terngrad/optim/lr_schedule.h"
#include "terngrad/optim/optimizer.h"
#include "terngrad/train/train_flags.h"

namespace tg {
namespace {
using testing::error_of;

template <typename E>
void expect_round_trip() {
  for (const EnumName<E>& e : EnumNames<E>::kList) {
    EXPECT_EQ(parse_enum<E>(e.name), e.value) << e.name;
    if (!e.alias) {
      EXPECT_STREQ(enum_name(e.value), e.name);
    }
  }
}

TEST(EnumNames, ParseNameAndAcceptedValuesComeFromOneList) {
  expect_round_trip<OptimizerKind>();
  expect_round_trip<LearningRateDecay>();
  expect_round_trip<ExchangeMode>();
  expect_round_trip<TfRecordCompression>();
  expect_round_trip<JpegDct>();
  expect_round_trip<Dataset>();
  // --exchange: the flat values, then every scheme row's own (from the registry).
  EXPECT_EQ(error_of([] { check_exchange_value("ring"); }),
            "--exchange 'ring' is not one of auto, allgather2, allreduce8, none, powersgd, hierarchical");
  EXPECT_EQ(error_of([] { parse_enum<TfRecordCompression>("bz2", "--compression"); }),
            "--compression 'bz2' is not one of auto, none, gzip, zlib");  // the alias "" is not listed
  EXPECT_EQ(error_of([] { parse_enum<Dataset>("svhn"); }),
            "--dataset 'svhn' is not one of mnist, fashion_mnist, cifar10, imagenet, custom");
  // Case: TF's names ("GZIP") are accepted where the list says so, elsewhere the case must match.
  EXPECT_EQ(parse_enum<TfRecordCompression>("GZIP"), TfRecordCompression::kGzip);
  EXPECT_EQ(parse_enum<JpegDct>("INTEGER_ACCURATE"), JpegDct::kAccurate);
  EXPECT_EQ(enum_accepted<JpegDct>(), "fast, accurate");
  EXPECT_THROW(parse_enum<OptimizerKind>("Adam"), Error);
  EXPECT_STREQ(enum_name(static_cast<OptimizerKind>(42)), "?");
}

struct Toy {
  int64_t n = 1;
  double f = 0.5;
  std::string mode = "gd";
  bool on = false;
  std::string note = "a|b <c> `<d>`";
};

std::vector<Flag<Toy>> toy_table() {
  return {
      {"n", &Toy::n, "a count", at_least(1).max(10)},
      {"f", &Toy::f, "a fraction", in_range(0, 1, "[)")},
      {"mode", &Toy::mode, "the update", one_of<OptimizerKind>(), 0, {{"fast", "adam"}}},
      {"on", &Toy::on, "a switch", no_check(), kFlagSwitch},
      {"note", &Toy::note, "not saved", no_check(), kFlagNotSaved},
  };
}

TEST(FlagTable, ChecksNameTheFlagValueAndBound) {
  const auto table = toy_table();
  auto check = [&](auto mutate) {
    Toy t;
    mutate(t);
    return error_of([&] { check_flags(table, t); });
  };
  EXPECT_EQ(check([](Toy&) {}), "(no error)");
  EXPECT_EQ(check([](Toy& t) { t.n = 0; }), "--n 0 must be at least 1");
  EXPECT_EQ(check([](Toy& t) { t.n = 11; }), "--n 11 is above the limit 10");
  EXPECT_EQ(check([](Toy& t) { t.f = 1; }), "--f 1 is not in [0, 1)");
  EXPECT_EQ(check([](Toy& t) { t.f = std::nan(""); }), "--f nan is not in [0, 1)");
  EXPECT_EQ(check([](Toy& t) { t.mode = "sgd"; }), "--mode 'sgd' is not one of gd, momentum, adam, rmsprop");
  Flag<Toy> pos("f", &Toy::f, "", positive().saying("must be a positive number of MiB"));
  Toy t;
  t.f = 0;
  EXPECT_EQ(error_of([&] { check_flag(pos, t); }), "--f 0 must be a positive number of MiB");
  Flag<Toy> below_one("f", &Toy::f, "", below(1).note("negative: the default"));
  t.f = 1;
  EXPECT_EQ(error_of([&] { check_flag(below_one, t); }), "--f 1 must be below 1 (negative: the default)");
  Flag<Toy> numbers("n", &Toy::n, "", one_of_numbers({1, 16, 32}, "1, 16, 32"));
  t.n = 7;
  EXPECT_EQ(error_of([&] { check_flag(numbers, t); }), "--n 7 is not one of 1, 16, 32");
}

TEST(FlagTable, SavedMapAndMarkdownRows) {
  const auto table = toy_table();
  const auto saved = saved_flags(table, Toy{});
  EXPECT_EQ(saved, (std::map<std::string, std::string>{{"f", "0.5"}, {"mode", "gd"}, {"n", "1"}, {"on", "false"}}));
  const std::string md = flags_markdown_rows(table, Toy{});
  EXPECT_NE(md.find("| `--mode` | gd | gd, momentum, adam, rmsprop: the update |\n"), std::string::npos) << md;
  EXPECT_NE(md.find("| `--fast` | | same as `--mode adam` |\n"), std::string::npos) << md;
  // '|' escaped everywhere, '<' only outside code spans (inside them an entity would show as typed).
  EXPECT_NE(md.find("| `--note` | a\\|b &lt;c&gt; `<d>` | not saved |\n"), std::string::npos) << md;
}

TEST(FlagTable, CommandLineOptionsAliasesAndStrictIntegers) {
  const auto table = toy_table();
  auto parse = [&](std::vector<std::string> args, Toy& t) {
    CLI::App app;
    apps::add_flag_table(app, table, t);
    apps::strict_integers(app);
    args.insert(args.begin(), "prog");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    app.parse(static_cast<int>(argv.size()), argv.data());
  };
  Toy t;
  parse({"--n", "3", "--fast", "--on"}, t);
  EXPECT_EQ(t.n, 3);
  EXPECT_EQ(t.mode, "adam");
  EXPECT_TRUE(t.on);
  Toy u;
  EXPECT_THROW(parse({"--n", "0x10"}, u), CLI::ParseError);
  EXPECT_THROW(parse({"--no_such_flag"}, u), CLI::ParseError);
}

TEST(TrainFlags, DefaultsPassAndTheCheckpointKeepsEveryFlag) {
  const TrainConfig defaults;
  EXPECT_NO_THROW(check_flags(train_flags(), defaults));
  std::set<std::string> names;
  for (const auto& f : train_flags()) EXPECT_TRUE(names.insert(f.name).second) << "twice: " << f.name;
  const auto saved = defaults.to_flags();
  // Nothing of the train table is left out of checkpoints but the two switches about resuming itself, what
  // happens after the last step (--eval_at_end), the one-step debugging dump (--exchange_dump, its step) and what an
  // elastic launcher gives each generation (--generation, --stop_file).
  EXPECT_EQ(saved.size() + 7, names.size());
  EXPECT_EQ(saved.count("allow_topology_change") + saved.count("reset_rank_state") + saved.count("eval_at_end") +
                saved.count("exchange_dump") + saved.count("exchange_dump_step") + saved.count("generation") +
                saved.count("stop_file"),
            0u);
  EXPECT_EQ(saved.at("seed"), "1");
  EXPECT_EQ(saved.at("max_corrupt_fraction"), "0.01");
  EXPECT_EQ(saved.at("moving_average_decay"), "0.9999");
  EXPECT_EQ(saved.at("allow_tf32"), "false");
  EXPECT_EQ(saved.at("num_processes"), "1");
  std::vector<std::string> resume = resume_flag_names();
  std::sort(resume.begin(), resume.end());
  EXPECT_EQ(resume, (std::vector<std::string>{"batch_size", "error_feedback", "num_nodes", "num_processes", "seed",
                                              "shuffle_buffer", "subset"}));
}

TEST(TrainFlags, DefaultsFromTheDatasetAndModelTables) {
  TrainConfig c;
  c.dataset = "imagenet";
  c.net = "inception_v3";
  c.resolve_defaults();
  EXPECT_EQ(c.image_size, 299);
  EXPECT_EQ(c.num_classes, 1001);
  EXPECT_FLOAT_EQ(c.label_smoothing, 0.1f);
  TrainConfig d;
  d.dataset = "cifar10";
  d.net = "cifarnet";
  d.resolve_defaults();
  EXPECT_EQ(d.image_size, 24);
  EXPECT_EQ(d.num_classes, 10);
  EXPECT_EQ(d.label_smoothing, 0.f);
  d.label_smoothing = 0.2f;  // an explicit value stays
  d.resolve_defaults();
  EXPECT_FLOAT_EQ(d.label_smoothing, 0.2f);
  EXPECT_EQ(dataset_info("imagenet").eval_subset, "validation");
  EXPECT_TRUE(dataset_info("imagenet").has_gray_images);
  EXPECT_FALSE(dataset_info("cifar10").has_gray_images);
}

}  // namespace
}  // namespace tg

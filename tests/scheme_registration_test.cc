// A scheme of its own file registers itself (SchemeRegistration) and is then a scheme like the folders' ones: listed,
// made by name, asked its buffers, its --exchange value checked, listed in the flag's help and choosing it; a name or
// an
// --exchange value registered twice, or a scheme claiming a flat value, is refused in one line naming it; the rows
// answer what the trainer asks (replay, compression); the real terngrad-train --help lists every folder's scheme.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/error_of.h"
#include "common/files.h"
#include "terngrad/core/error.h"
#include "terngrad/exchange/scheme_registry.h"

namespace tg {
namespace {

using testing::error_of;

// "identity": the gradients as they are (one compute stage that copies the first worker's average to the other
// targets). A toy: the registry's contract, not an exchange.
class IdentityScheme final : public GradientScheme {
 public:
  explicit IdentityScheme(SchemeContext& ctx) : GradientScheme(ctx) {}
  const char* name() const override { return "identity"; }
  const std::vector<SchemeStage>& stages() const override {
    static const std::vector<SchemeStage> s = {{"identity", StageKind::kCompute, Phase::kDecode}};
    return s;
  }
  void plan(const std::vector<TensorRange>& buckets) override { buckets_ = buckets; }
  void run_stage(int, int bucket) override { ctx_.copy_to_other_targets(buckets_[bucket]); }
  ExchangeStats byte_model() const override { return {}; }

 private:
  std::vector<TensorRange> buckets_;
};

std::unique_ptr<GradientScheme> make_identity(SchemeContext& ctx) { return std::make_unique<IdentityScheme>(ctx); }

const SchemeInfo kIdentity = {
    "identity",
    "the gradients as they are (a test's scheme)",
    make_identity,
    "identity",  // --exchange identity chooses it
    0,
    nullptr,
    [](int) { return std::string(); },
    [](int) { return false; },
    "auto",
    [](bool) -> const char* { return nullptr; },
    [](const SchemeMemoryQuery&) -> size_t { return 0; },
    nullptr,  // no options
};
const SchemeRegistration register_identity(kIdentity);

TEST(SchemeRegistration, AToySchemeRegistersItselfFromItsOwnFile) {
  std::vector<std::string> names;
  for (const SchemeInfo& s : gradient_schemes()) names.push_back(s.name);
  // The folders' rows in folder order (dense, none, powersgd, terngrad), then the registered ones.
  EXPECT_EQ(names,
            (std::vector<std::string>{"fp32", "fp16", "none", "powersgd", "terngrad", "hierarchical", "identity"}));
  SchemeContext ctx;
  EXPECT_STREQ(make_gradient_scheme("identity", ctx)->name(), "identity");
  EXPECT_EQ(gradient_scheme("identity").buffer_bytes(SchemeMemoryQuery{}), 0u);
  // Its row's --exchange value is a value of the flag (checked, listed in the help) and chooses it whatever
  // --grad_bits.
  const std::vector<std::string> values = exchange_values();
  EXPECT_EQ(values, (std::vector<std::string>{"auto", "allgather2", "allreduce8", "none", "powersgd", "hierarchical",
                                              "identity"}));
  check_exchange_value("identity");
  EXPECT_EQ(scheme_name_for(1, "identity", ExchangeLayout{}), "identity");
  EXPECT_EQ(scheme_name_for(32, "identity", ExchangeLayout{}), "identity");
  std::string help;
  for (const Flag<ExchangeConfig>& f : exchange_flags())
    if (std::string(f.name) == "exchange") help = f.full_help();
  EXPECT_NE(help.find("identity: the gradients as they are (a test's scheme)"), std::string::npos) << help;
  EXPECT_EQ(help.rfind("auto, allgather2, allreduce8, none, powersgd, hierarchical, identity: ", 0), 0u) << help;
  // --grad_bits alone never chooses it: --grad_bits 0 is no scheme's.
  EXPECT_NE(
      error_of([] { scheme_name_for(0, "auto", ExchangeLayout{}); }).find("--grad_bits 0 is not one of 1, 16, 32"),
      std::string::npos);
  check_replayable("identity", true);  // its row says it can be replayed
}

TEST(SchemeRegistration, AnExchangeValueTakenTwiceOrAFlatOneIsOneLineNamingIt) {
  std::vector<SchemeInfo> rows = gradient_schemes();
  SchemeInfo other = kIdentity;
  other.name = "identity2";
  rows.push_back(other);
  const std::string e = error_of([&] { check_unique_scheme_names(rows); });
  EXPECT_NE(e.find("--exchange identity would choose two gradient schemes ('identity' and 'identity2')"),
            std::string::npos)
      << e;
  rows.pop_back();
  other.exchange = "allgather2";
  rows.push_back(other);
  const std::string flat = error_of([&] { check_unique_scheme_names(rows); });
  EXPECT_NE(flat.find("gradient scheme 'identity2' claims --exchange allgather2, one of the exchange's own values"),
            std::string::npos)
      << flat;
}

TEST(SchemeRegistration, ANameRegisteredTwiceIsOneLineNamingIt) {
  std::vector<SchemeInfo> rows = gradient_schemes();
  check_unique_scheme_names(rows);
  SchemeInfo again = kIdentity;
  again.description = "another identity";
  rows.push_back(again);
  const std::string e = error_of([&] { check_unique_scheme_names(rows); });
  EXPECT_NE(e.find("gradient scheme 'identity' is registered twice"), std::string::npos) << e;
  EXPECT_NE(e.find("another identity"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

TEST(SchemeRegistration, AnOptionThatClashesWithAnotherFlagIsOneLineNamingIt) {
  // The schemes' options (PowerSGD's --powersgd_rank, from its folder) are in the exchange's table, checked unique.
  bool found = false;
  for (const Flag<ExchangeConfig>& f : exchange_flags()) found = found || std::string(f.name) == "powersgd_rank";
  EXPECT_TRUE(found);
  std::vector<Flag<ExchangeConfig>> t = exchange_flags();
  t.push_back({"bucket_mb", &ExchangeConfig::bucket_mb, "a scheme's bucket size"});
  const std::string e = error_of([&] { check_unique_flag_names(t, "the exchange's flags"); });
  EXPECT_NE(e.find("--bucket_mb is defined twice in the exchange's flags"), std::string::npos) << e;
  EXPECT_NE(e.find("a scheme's bucket size"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

TEST(SchemeRegistration, TheRowsAnswerWhatTheTrainerAsks) {
  EXPECT_TRUE(exchange_compresses(1, "auto"));
  EXPECT_TRUE(exchange_compresses(1, "hierarchical"));
  EXPECT_FALSE(exchange_compresses(32, "hierarchical"));
  EXPECT_FALSE(exchange_compresses(16, "allgather2"));
  EXPECT_FALSE(exchange_compresses(1, "none"));
  EXPECT_EQ(fp32_form("hierarchical"), "hierarchical");
  EXPECT_EQ(fp32_form("none"), "none");
  EXPECT_EQ(fp32_form("allreduce8"), "auto");
  check_replayable("fp32", false);
  check_replayable("terngrad", false);
  const std::string ef = error_of([] { check_replayable("terngrad", true); });
  EXPECT_NE(ef.find("not with --error_feedback"), std::string::npos) << ef;
  const std::string fp16 = error_of([] { check_replayable("fp16", false); });
  EXPECT_NE(fp16.find("cannot replay --grad_bits 16"), std::string::npos) << fp16;
  EXPECT_NE(fp16.find("the fp32, terngrad and identity schemes can be replayed"), std::string::npos) << fp16;
  for (const char* s : {"hierarchical", "powersgd", "none"})
    EXPECT_NE(error_of([s] { check_replayable(s, false); }).find("--exchange " + std::string(s)), std::string::npos)
        << s;
}

// The program's --help (built from the folders' rows, without this test's identity scheme) names every --exchange value
// with its scheme's description.
TEST(SchemeRegistration, TheProgramsHelpListsEveryFoldersScheme) {
  std::string help;
  ASSERT_EQ(testing::run_command(std::string(TG_BINARY_DIR) + "/terngrad-train --help-markdown 2>&1", &help), 0)
      << help;
  for (const SchemeInfo& s : gradient_schemes()) {
    if (std::string(s.name) == "identity") continue;  // this test's own
    if (s.exchange != nullptr) {
      EXPECT_NE(help.find(std::string(s.exchange) + ": " + s.description), std::string::npos)
          << s.name << " not in --help-markdown:\n"
          << help;
    }
  }
  EXPECT_NE(help.find("auto, allgather2, allreduce8, none, powersgd, hierarchical: "), std::string::npos) << help;
}

}  // namespace
}  // namespace tg

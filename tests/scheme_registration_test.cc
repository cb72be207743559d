// A scheme of its own file registers itself (SchemeRegistration) and is then a scheme like the built-in ones: listed,
// made by name, asked its buffers; the flags never choose a scheme registered to be chosen by name only; a name
// registered twice is refused in one line naming it; the rows answer what the trainer asks (replay, compression).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/error_of.h"
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
    ExchangeMode::kAuto,
    0,  // chosen by its name only
    nullptr,
    [](int) { return std::string(); },
    [](int) { return false; },
    ExchangeMode::kAuto,
    [](bool) -> const char* { return nullptr; },
    [](const SchemeMemoryQuery&) -> size_t { return 0; },
    nullptr,  // no options
};
const SchemeRegistration register_identity(kIdentity);

TEST(SchemeRegistration, AToySchemeRegistersItselfFromItsOwnFile) {
  std::vector<std::string> names;
  for (const SchemeInfo& s : gradient_schemes()) names.push_back(s.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"fp32", "fp16", "terngrad", "hierarchical", "powersgd", "none", "identity"}));
  SchemeContext ctx;
  EXPECT_STREQ(make_gradient_scheme("identity", ctx)->name(), "identity");
  EXPECT_EQ(gradient_scheme("identity").buffer_bytes(SchemeMemoryQuery{}), 0u);
  // The flags never choose it: --grad_bits 0 is no scheme's.
  EXPECT_NE(error_of([] {
              scheme_name_for(0, ExchangeMode::kAuto, ExchangeLayout{});
            }).find("--grad_bits 0 is not one of 1, 16, 32"),
            std::string::npos);
  check_replayable("identity", true);  // its row says it can be replayed
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
  EXPECT_TRUE(exchange_compresses(1, ExchangeMode::kAuto));
  EXPECT_TRUE(exchange_compresses(1, ExchangeMode::kHierarchical));
  EXPECT_FALSE(exchange_compresses(32, ExchangeMode::kHierarchical));
  EXPECT_FALSE(exchange_compresses(16, ExchangeMode::kAllgather2));
  EXPECT_FALSE(exchange_compresses(1, ExchangeMode::kNone));
  EXPECT_EQ(fp32_form(ExchangeMode::kHierarchical), ExchangeMode::kHierarchical);
  EXPECT_EQ(fp32_form(ExchangeMode::kNone), ExchangeMode::kNone);
  EXPECT_EQ(fp32_form(ExchangeMode::kAllreduce8), ExchangeMode::kAuto);
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

}  // namespace
}  // namespace tg

// Reading config.json does not depend on the C locale. A library caller may have called
// setlocale(LC_ALL, "de_DE.UTF-8") (decimal comma) or "ps_AF.UTF-8" (decimal point U+066B, two
// bytes): "routed_scaling_factor": 2.5 must still read as 2.5, and messages print "2.5".
//
// The locales are real: when the system has not generated them, the test builds them with
// localedef into a temporary directory and points LOCPATH there (Debian package "locales",
// installed by scripts/setup.sh). A machine that can do neither fails this test, it does not skip.
#include <locale.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "common/json.hpp"
#include "fusedmoe/config.hpp"
#include "tests/test_util.hpp"

using namespace fusedmoe;
using fusedmoe::test::expect_error;

namespace {

struct ForeignLocale {
  const char* name;
  const char* source;         // the i18n source localedef builds it from
  const char* decimal_point;  // its decimal point, checked once it is set
};
const ForeignLocale kLocales[] = {{"de_DE.UTF-8", "de_DE", ","},
                                {"ps_AF.UTF-8", "ps_AF", "\xd9\xab"}};  // U+066B

// Once per process: if the system lacks one of kLocales, builds all of them with localedef into a
// temporary directory and points LOCPATH there (before any lookup there: glibc caches a failed
// one). Returns "" on success, else the reason.
const std::string& prepare_locales() {
  static const std::string why = [] {
    bool all = true;
    for (const ForeignLocale& l : kLocales) all = all && setlocale(LC_ALL, l.name) != nullptr;
    setlocale(LC_ALL, "C");
    if (all) return std::string();
    static const struct TempDir {
      std::string path = testing::TempDir() + "fmoe_locales_" + std::to_string(getpid());
      ~TempDir() { std::filesystem::remove_all(path); }
    } temp;
    const std::string& dir = temp.path;
    mkdir(dir.c_str(), 0700);
    std::string failed;
    for (const ForeignLocale& l : kLocales) {
      const std::string cmd = std::string("localedef -i ") + l.source + " -f UTF-8 '" + dir +
                              "/" + l.name + "' >/dev/null 2>&1";
      const int rc = std::system(cmd.c_str());  // exit 1 = warnings only; setlocale decides
      if (rc != 0 && rc != 256) failed += " `" + cmd + "` exited " + std::to_string(rc) + ";";
    }
    setenv("LOCPATH", dir.c_str(), 1);
    for (const ForeignLocale& l : kLocales)
      if (!setlocale(LC_ALL, l.name))
        return std::string("locale ") + l.name + " is not installed and could not be built with "
               "localedef (" + failed + "): install the Debian package `locales` "
               "(scripts/setup.sh does)";
    setlocale(LC_ALL, "C");
    return std::string();
  }();
  return why;
}

class CLocaleIndependence : public testing::TestWithParam<ForeignLocale> {
 protected:
  void SetUp() override {
    ASSERT_EQ(prepare_locales(), "");
    ASSERT_NE(setlocale(LC_ALL, GetParam().name), nullptr) << GetParam().name;
    // The locale is really in effect: a locale-dependent reader would misread "2.5".
    ASSERT_STREQ(localeconv()->decimal_point, GetParam().decimal_point);
    ASSERT_EQ(std::strtod("2.5", nullptr), 2.0) << "strtod is not locale-dependent here?";
  }
  void TearDown() override { setlocale(LC_ALL, "C"); }
};

const char* kDeepSeek = R"({"model_type": "deepseek_v3", "hidden_size": 7168.0,
    "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1,
    "num_experts_per_tok": 8, "n_group": 8, "topk_group": 4, "routed_scaling_factor": 2.5})";

}  // namespace

TEST_P(CLocaleIndependence, ConfigNumbersReadAsWritten) {
  const MoeConfig d = config_from_hf_json_text(kDeepSeek, "config.json");
  EXPECT_EQ(d.routing.routed_scaling_factor, 2.5f);
  EXPECT_EQ(d.hidden, 7168);
  const MoeConfig k = config_from_hf_json_text(R"({"model_type": "kimi_k2", "hidden_size": 7168,
    "moe_intermediate_size": 2048, "n_routed_experts": 384, "num_experts_per_tok": 8,
    "routed_scaling_factor": 2.827e0})", "config.json");
  EXPECT_EQ(k.routing.routed_scaling_factor, 2.827f);
  const Precision bf16 = Precision::bf16;
  const MoeConfig g = config_from_hf_json_text(R"({"model_type": "gpt_oss", "hidden_size": 2880,
    "intermediate_size": 2880, "num_local_experts": 128, "num_experts_per_tok": 4,
    "swiglu_limit": 7.25})", "config.json", &bf16);
  EXPECT_EQ(g.activation.limit, 7.25f);
  // The JSON layer itself, too.
  EXPECT_EQ(json::parse("[0.5, -1.25e1]", "t.json").root()[1].get<double>(), -12.5);
}

TEST_P(CLocaleIndependence, MessagesPrintNumbersWithAPoint) {
  expect_error([] { config_from_hf_json_text(R"({"model_type": "deepseek_v3",
      "hidden_size": 7168, "moe_intermediate_size": 2048, "n_routed_experts": 256,
      "num_experts_per_tok": 8, "routed_scaling_factor": 1234.5})", "config.json"); },
      "\"routed_scaling_factor\" = 1234.5 is out of range: expected a number in [0.001, 1000]");
  MoeConfig c = find_preset("gpt-oss-120b");
  c.activation.limit = 0.005f;
  expect_error([&] { c.validate(); }, "limit 0.005");
}

TEST_P(CLocaleIndependence, CallerLocaleIsRestoredAndOtherThreadsUnaffected) {
  config_from_hf_json_text(kDeepSeek, "config.json");
  EXPECT_STREQ(localeconv()->decimal_point, GetParam().decimal_point);
  EXPECT_EQ(uselocale(locale_t(0)), LC_GLOBAL_LOCALE);
  // While this thread reads, another keeps the caller's locale.
  {
    const json::ScopedCLocale c_here;
    EXPECT_STREQ(localeconv()->decimal_point, ".");
    std::string other;
    std::thread([&] { other = localeconv()->decimal_point; }).join();
    EXPECT_EQ(other, GetParam().decimal_point);
  }
  EXPECT_STREQ(localeconv()->decimal_point, GetParam().decimal_point);
  // Restored on an exception as well.
  expect_error([] { config_from_hf_json_text("{", "config.json"); }, "malformed JSON");
  EXPECT_EQ(uselocale(locale_t(0)), LC_GLOBAL_LOCALE);
}

INSTANTIATE_TEST_SUITE_P(
    Locales, CLocaleIndependence,
    testing::ValuesIn(kLocales),
    [](const testing::TestParamInfo<ForeignLocale>& info) {
      return std::string(info.param.source);
    });

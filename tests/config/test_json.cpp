// The JSON wrapper (src/common/json.hpp over nlohmann-json): strict RFC 8259, exact integers,
// overflow kept visible, duplicates recorded, bounded depth and size, safe error messages.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>

#include "common/json.hpp"
#include "fusedmoe/config.hpp"
#include "tests/test_util.hpp"

using namespace fusedmoe;
using fusedmoe::test::expect_error;

namespace {

json::Document parse(const std::string& text) { return json::parse(text, "t.json"); }

// The message of the Error that parse(text) throws ("" if none).
std::string parse_error(const std::string& text) {
  try {
    parse(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool all_printable(const std::string& s) {
  for (unsigned char c : s)
    if (c < 0x20 || c >= 0x7F) return false;
  return true;
}

}  // namespace

TEST(Json, RejectsWhatRfc8259Rejects) {
  // Each is accepted by a lenient reader (Python's json: the first three).
  for (const char* bad : {"[NaN]", "[Infinity]", "[-Infinity]", "[1,]", "{\"a\":1,}", "[01]",
                          "[1.]", "[.5]", "[+1]", "['a']", "[1] x", "[1] [2]", "// c\n[1]",
                          "[\"a\tb\"]", "[\"\\x41\"]", "[tru]", "", "   "}) {
    SCOPED_TRACE(bad);
    const std::string msg = parse_error(bad);
    EXPECT_NE(msg.find("t.json:"), std::string::npos) << msg;
    EXPECT_NE(msg.find("malformed JSON"), std::string::npos) << msg;
  }
  EXPECT_NE(parse_error("").find("t.json:1:1: malformed JSON"), std::string::npos);
  EXPECT_NE(parse_error("").find("unexpected end of input"), std::string::npos);
  EXPECT_NE(parse_error("{\n  \"a\": 1,\n  \"b\" 2}").find("t.json:3:"), std::string::npos);
}

TEST(Json, StringsMustBeValidUtf8WithPairedSurrogates) {
  for (const char* bad : {"[\"\\udc00\"]",          // lone low surrogate
                          "[\"\\ud800\"]",          // lone high surrogate
                          "[\"\\ud800\\u0041\"]",   // high surrogate, then not a low one
                          "[\"\xff\"]",             // not UTF-8
                          "[\"\xc0\xaf\"]",         // overlong '/'
                          "[\"\xed\xa0\x80\"]",     // a surrogate encoded in UTF-8
                          "[\"\xe2\x82\"]",         // truncated sequence
                          "[\"\xf4\x90\x80\x80\"]"  // above U+10FFFF
                         }) {
    SCOPED_TRACE(bad);
    const std::string msg = parse_error(bad);
    EXPECT_NE(msg.find("malformed JSON"), std::string::npos) << msg;
    EXPECT_TRUE(all_printable(msg)) << msg;  // the bad bytes are not echoed raw
  }
  const json::Document ok = parse("[\"\\ud83d\\ude00 \xc3\xa9\"]");
  EXPECT_EQ(ok.root()[0].get<std::string>(), "\xf0\x9f\x98\x80 \xc3\xa9");
}

TEST(Json, NumbersKeepTheirKindAndIntegersAreExact) {
  const json::Document d = parse(
      "[9007199254740993, -9223372036854775808, 18446744073709551615, 2048.0, 1e308, -1e308, "
      "1e-400, 2.5, 18446744073709551616]");
  const json::Value& v = d.root();
  ASSERT_TRUE(v[0].is_number_unsigned());
  EXPECT_EQ(v[0].get<uint64_t>(), 9007199254740993ull);  // 2^53 + 1: a double would round it
  ASSERT_TRUE(v[1].is_number_integer());
  EXPECT_EQ(v[1].get<int64_t>(), INT64_MIN);
  EXPECT_EQ(v[2].get<uint64_t>(), UINT64_MAX);
  EXPECT_TRUE(v[3].is_number_float());  // kind by spelling; the config reader judges the value
  EXPECT_EQ(v[3].get<double>(), 2048.0);
  EXPECT_EQ(v[4].get<double>(), 1e308);
  EXPECT_EQ(v[5].get<double>(), -1e308);
  EXPECT_EQ(v[6].get<double>(), 0.0);  // underflow rounds to 0, as strtod does
  EXPECT_EQ(v[7].get<double>(), 2.5);
  EXPECT_TRUE(v[8].is_number_float());  // beyond 64 bits: a double
}

TEST(Json, NumbersBeyondADoubleAreRefusedWithTheirPlace) {
  // The issue: 1e400 became inf and flowed on.
  EXPECT_NE(parse_error("[1e400]").find("t.json:1:2: field \"[0]\": the number 1e400 is beyond "
                                        "the range of a double"), std::string::npos)
      << parse_error("[1e400]");
  const std::string m = parse_error("{\"a\": {\"b\": [0, -2e308]}}");
  EXPECT_NE(m.find("field \"a.b[1]\": the number -2e308 is beyond"), std::string::npos) << m;
  EXPECT_NE(parse_error("1e400").find("t.json:1:1: the number 1e400"), std::string::npos);
}

TEST(Json, DuplicateKeysLastWinsAndAreRecorded) {
  const json::Document d = parse(R"({"a": 1, "b": {"x": 1, "x": 2}, "a": 3, "c": 4})");
  const json::Value& r = d.root();
  EXPECT_EQ(r["a"].get<int>(), 3);  // as Python's json
  EXPECT_TRUE(d.duplicated(r, "a"));
  EXPECT_FALSE(d.duplicated(r, "c"));
  EXPECT_FALSE(d.duplicated(r, "x"));
  EXPECT_TRUE(d.duplicated(r["b"], "x"));
  EXPECT_EQ(r["b"]["x"].get<int>(), 2);
  // A discarded object's duplicates do not leak onto a later object (no address reuse).
  const json::Document e = parse(R"({"o": {"k": 1, "k": 2}, "o": {"k": 3}})");
  EXPECT_TRUE(e.duplicated(e.root(), "o"));
  EXPECT_FALSE(e.duplicated(e.root()["o"], "k"));
}

TEST(Json, DepthAndValueCountAreBounded) {
  json::Limits lim;
  lim.max_depth = 8;
  lim.max_values = 100;
  EXPECT_NO_THROW(json::parse(std::string(8, '[') + std::string(8, ']'), "t.json", lim));
  expect_error([&] { json::parse(std::string(9, '[') + std::string(9, ']'), "t.json", lim); },
               "nested deeper than 8 levels");
  expect_error([] { parse(std::string(100000, '[')); }, "nested deeper than 64 levels");
  std::string arr = "[0";
  for (int i = 0; i < 99; ++i) arr += ",0";
  lim.max_values = 101;  // 100 zeros and the array
  EXPECT_NO_THROW(json::parse(arr + "]", "t.json", lim));
  lim.max_values = 100;
  expect_error([&] { json::parse(arr + "]", "t.json", lim); }, "more than 100 values");
  // The config reader's limit: 2^18 values.
  std::string many = "{\"model_type\": \"mixtral\", \"x\": [0";
  for (int i = 0; i < (1 << 18); ++i) many += ",0";
  expect_error([&] { config_from_hf_json_text(many + "]}", "config.json"); },
               "config.json: JSON document with more than 262144 values");
}

TEST(Json, ErrorMessagesEscapeAndBoundWhatTheyQuote) {
  // A raw C1/ESC byte and a 100 KB token: the message stays printable and short.
  const std::string esc = parse_error("[\"\x1b]0;PWNED\x07\"]");
  EXPECT_TRUE(all_printable(esc)) << esc;
  const std::string big = parse_error("[\"" + std::string(100000, 'a'));  // unterminated
  EXPECT_NE(big.find("malformed JSON"), std::string::npos) << big;
  EXPECT_NE(big.find("(100001 bytes)"), std::string::npos) << big;
  EXPECT_LT(big.size(), 1000u) << big.size();
  const std::string digits = parse_error("[" + std::string(100000, '1') + "]");  // beyond a double
  EXPECT_NE(digits.find("beyond the range of a double"), std::string::npos) << digits;
  EXPECT_LT(digits.size(), 1000u) << digits.size();
  const std::string lit = parse_error("[tr\xc2\x9b]");
  EXPECT_TRUE(all_printable(lit)) << lit;
  // The origin is user text too.
  try {
    json::parse("[", std::string("evil\x1b]0;x\x07.json"));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_TRUE(all_printable(e.what())) << e.what();
    EXPECT_NE(std::string(e.what()).find("evil\\x1B]0;x\\x07.json"), std::string::npos) << e.what();
  }
}

TEST(Json, FormatDoubleIsShortestAndExact) {
  EXPECT_EQ(json::format_number(2.5), "2.5");
  EXPECT_EQ(json::format_number(2.827), "2.827");
  EXPECT_EQ(json::format_number(9.2e18), "9.2e+18");
  EXPECT_EQ(json::format_number(0.005f), "0.005");
  EXPECT_EQ(json::format_number(2.827f), "2.827");
  EXPECT_EQ(json::printable("config.json"), "config.json");
  EXPECT_EQ(json::printable("a\"b"), "\"a\\\"b\"");
  EXPECT_EQ(json::printable(""), "\"\"");
}

// Peak memory of parsing a 4 MiB config text, measured in a child process: the worst shape for a
// DOM ("[{},{},...]": 3 bytes of text, ~90 bytes of DOM per value) must stay a small multiple of
// the text. The hand-written reader took ~90x; nlohmann without the value limit ~35x.
TEST(Json, ParsingMemoryStaysBounded) {
  const long long n = ConfigLimits::kMaxConfigJsonBytes;
  for (const char* unit : {"{},", "[],", "0,", "\"\","}) {
    std::string text = "[";
    while ((long long)(text.size() + 8) < n) text += unit;
    text += "0]";
    std::fflush(nullptr);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      struct rusage before {};
      getrusage(RUSAGE_SELF, &before);
      try {
        config_from_hf_json_text(text, "big.json");
      } catch (const Error&) {
      }
      struct rusage after {};
      getrusage(RUSAGE_SELF, &after);
      const long long grown_mb = (after.ru_maxrss - before.ru_maxrss) / 1024;
      _exit(int(std::min<long long>(grown_mb, 250)));
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status)) << unit;
    const int grown_mb = WEXITSTATUS(status);
    // 4 MiB of text; 16x = 64 MB. Measured: ~25 MB.
    EXPECT_LE(grown_mb, 64) << "parsing 4 MiB of \"" << unit << "\" grew the peak RSS by "
                            << grown_mb << " MB";
  }
}

// The rank processes of `run --ep` / `bench --op ep_layer` (tools/ep_launch.*), without a GPU:
// the hidden --ep-child value round trip and its refusals, and the launcher itself starting
// /bin/sh as the "ranks" (each exits by a rule of its rank), so that starting R processes, the
// id they get, NCCL_NVLS_ENABLE in their environment, exit statuses, signals and the timeout are
// checked here. (The real ranks, on GPUs: tests/cli/test_cli.cpp Cli.RunEpOneRankPassesOnAGpu.)
#include <unistd.h>

#include <chrono>
#include <functional>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "common/env.hpp"
#include "tests/test_util.hpp"
#include "tools/cli.hpp"
#include "tools/ep_launch.hpp"

using namespace fusedmoe;
using namespace fusedmoe::cli;

namespace {

std::vector<unsigned char> some_id() {
  std::vector<unsigned char> id(128);
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<unsigned char>(i * 37 + 11);
  return id;
}

void expect_usage(const std::function<void()>& f, const std::string& want) {
  try {
    f();
    ADD_FAILURE() << "no UsageError; want: " << want;
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what() << "\nwant: " << want;
  }
}

// Each "rank" is `sh -c SCRIPT sh --ep-child VALUE`: it writes its argument and NCCL_NVLS_ENABLE
// to DIR/rank<r>, then does what MODE says for its rank.
const char* kScript =
    "v=$2; r=${v%%,*}; printf '%s %s %s\\n' \"$1\" \"$v\" \"${NCCL_NVLS_ENABLE-unset}\" > \"$DIR/rank$r\"; "
    "case \"$MODE\" in "
    "  ok) exit 0 ;; "
    "  fail1) [ \"$r\" = 1 ] && exit 3; exit 0 ;; "
    "  kill0) [ \"$r\" = 0 ] && kill -9 $$; exit 0 ;; "
    "  hang1) [ \"$r\" = 1 ] && exec sleep 60; exit 0 ;; "
    "esac; exit 7";

struct Launch {
  int rc = 0;
  std::string err;
  std::vector<std::string> lines;  // what each rank wrote
};

Launch launch(const std::string& mode, int ranks) {
  const std::string dir = testing::TempDir() + "ep_launch_" + mode;
  std::system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str());
  setenv("DIR", dir.c_str(), 1);
  setenv("MODE", mode.c_str(), 1);
  Launch l;
  testing::internal::CaptureStderr();
  l.rc = launch_ranks_of("test", "/bin/sh", ranks, {"-c", kScript, "sh"});
  l.err = testing::internal::GetCapturedStderr();
  for (int r = 0; r < ranks; ++r) {
    std::ifstream in(dir + "/rank" + std::to_string(r));
    std::string line;
    std::getline(in, line);
    l.lines.push_back(line);
  }
  return l;
}

bool has(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

}  // namespace

TEST(EpLaunch, ChildOptionRoundTripsAndRefusesMalformedValues) {
  EpChild c;
  c.rank = 2;
  c.ranks = 4;
  c.device = 2;
  c.id = some_id();
  const std::string text = format_ep_child(c);
  EXPECT_EQ(text.size(), std::string("2,4,2,").size() + 256) << text;
  const EpChild back = parse_ep_child(text, 4);
  EXPECT_EQ(back.rank, 2);
  EXPECT_EQ(back.ranks, 4);
  EXPECT_EQ(back.device, 2);
  EXPECT_EQ(back.id, c.id);
  expect_usage([&] { parse_ep_child(text, 3); }, "--ep-child says 4 ranks but --ep says 3");
  const std::string hex = text.substr(6);
  expect_usage([&] { parse_ep_child("4,4,0," + hex, 4); }, "--ep-child must be in [0, 3], got \"4\"");
  expect_usage([&] { parse_ep_child("-1,4,0," + hex, 4); }, "--ep-child must be in [0, 3], got \"-1\"");
  expect_usage([&] { parse_ep_child("0,4,x," + hex, 4); }, "--ep-child expects an integer, got \"x\"");
  expect_usage([&] { parse_ep_child("0,4,0", 4); }, "expects RANK,RANKS,DEVICE,ID");
  expect_usage([&] { parse_ep_child("0,4,0," + hex + ",1", 4); }, "expects RANK,RANKS,DEVICE,ID");
  expect_usage([&] { parse_ep_child("0,4,0," + hex.substr(1), 4); }, "the id must be 256 hex digits, got 255");
  std::string upper = hex;
  upper[0] = 'A';
  expect_usage([&] { parse_ep_child("0,4,0," + upper, 4); }, "the id must be lower-case hex digits");
}

TEST(EpLaunch, StartsEveryRankWithItsRankTheSameIdAndNvlsOff) {
  unsetenv("NCCL_NVLS_ENABLE");
  const Launch l = launch("ok", 3);
  EXPECT_EQ(l.rc, 0) << l.err;
  EXPECT_EQ(l.err, "");
  std::string id;
  for (int r = 0; r < 3; ++r) {
    const std::string& line = l.lines[size_t(r)];
    // "--ep-child r,3,r,<256 hex> 0"
    ASSERT_EQ(line.rfind("--ep-child " + std::to_string(r) + ",3," + std::to_string(r) + ",", 0), 0u)
        << "rank " << r << ": " << line;
    EXPECT_EQ(line.substr(line.size() - 2), " 0") << "NCCL_NVLS_ENABLE in rank " << r << ": " << line;
    const std::string mine = line.substr(line.find(',', line.find(',', line.find(',') + 1) + 1) + 1, 256);
    if (r == 0) id = mine;
    EXPECT_EQ(mine, id) << "every rank gets the same NCCL id";
    EXPECT_EQ(parse_ep_child(line.substr(11, line.size() - 13), 3).rank, r) << line;
  }
  // A user's own setting wins.
  setenv("NCCL_NVLS_ENABLE", "1", 1);
  const Launch mine = launch("ok", 1);
  unsetenv("NCCL_NVLS_ENABLE");
  EXPECT_EQ(mine.rc, 0);
  EXPECT_EQ(mine.lines[0].substr(mine.lines[0].size() - 2), " 1") << mine.lines[0];
}

TEST(EpLaunch, ReportsTheRankThatFailedOrWasKilled) {
  Launch l = launch("fail1", 3);
  EXPECT_EQ(l.rc, 1);
  EXPECT_TRUE(has(l.err, "fusedmoe test: rank 1 (GPU 1) exited with status 3\n")) << l.err;
  EXPECT_TRUE(has(l.err, "fusedmoe test: 1 of 3 ranks failed")) << l.err;
  EXPECT_FALSE(has(l.err, "rank 0 ")) << l.err;
  EXPECT_FALSE(has(l.err, "rank 2 ")) << l.err;

  l = launch("kill0", 2);
  EXPECT_EQ(l.rc, 1);
  EXPECT_TRUE(has(l.err, "rank 0 (GPU 0) was killed by signal 9")) << l.err;
  EXPECT_TRUE(has(l.err, "1 of 2 ranks failed")) << l.err;
}

TEST(EpLaunch, EndsARankThatOutlivesTheTimeout) {
  const detail::ScopedKnob<int> timeout(&detail::Knobs::ep_timeout_s, 1);
  const auto t0 = std::chrono::steady_clock::now();
  const Launch l = launch("hang1", 2);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(l.rc, 1);
  EXPECT_TRUE(has(l.err, "rank 1 (GPU 1) did not finish within FMOE_EP_TIMEOUT=1 s and was ended"))
      << l.err;
  EXPECT_FALSE(has(l.err, "rank 0 ")) << l.err;
  EXPECT_LT(s, 20.0) << "the hung rank was not ended on time";
}

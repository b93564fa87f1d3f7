// The rank processes of `run --ep` and `bench --op ep_layer` (ep_launch.hpp).
#include "tools/ep_launch.hpp"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/env.hpp"
#include "fusedmoe/device.hpp"
#include "fusedmoe/error.hpp"
#include "tools/cli.hpp"

#if defined(FMOE_HAS_NCCL)
#include "fusedmoe/ep_layer.hpp"
#endif

extern char** environ;

namespace fusedmoe::cli {
namespace {

constexpr size_t kIdBytes = 128;  // ncclUniqueId
// After one rank fails, the others wait in NCCL for it forever: they are ended this long after.
constexpr double kGraceSeconds = 30;

std::string to_hex(const std::vector<unsigned char>& bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string s;
  for (unsigned char b : bytes) {
    s.push_back(kDigits[b >> 4]);
    s.push_back(kDigits[b & 15]);
  }
  return s;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return strf("exited with status %d", WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return strf("was killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return strf("ended with wait status 0x%x", status);
}

}  // namespace

EpChild parse_ep_child(const std::string& text, int ranks) {
  std::vector<std::string> f;
  size_t b = 0;
  for (;;) {
    const size_t e = text.find(',', b);
    f.push_back(text.substr(b, e == std::string::npos ? std::string::npos : e - b));
    if (e == std::string::npos) break;
    b = e + 1;
  }
  if (f.size() != 4)
    throw UsageError(strf("--%s (internal: set by --ep's parent process) expects RANK,RANKS,DEVICE,"
                          "ID, got %s", kEpChildOption, cli::quoted(text).c_str()));
  EpChild c;
  c.ranks = int(parse_int(kEpChildOption, f[1], 1, 1 << 10));
  if (c.ranks != ranks)
    throw UsageError(strf("--%s says %d ranks but --ep says %d", kEpChildOption, c.ranks, ranks));
  c.rank = int(parse_int(kEpChildOption, f[0], 0, c.ranks - 1));
  c.device = int(parse_int(kEpChildOption, f[2], 0, 1 << 10));
  if (f[3].size() != 2 * kIdBytes)
    throw UsageError(strf("--%s: the id must be %zu hex digits, got %zu", kEpChildOption,
                          2 * kIdBytes, f[3].size()));
  for (size_t i = 0; i < kIdBytes; ++i) {
    const int hi = hex_digit(f[3][2 * i]), lo = hex_digit(f[3][2 * i + 1]);
    if (hi < 0 || lo < 0)
      throw UsageError(strf("--%s: the id must be lower-case hex digits", kEpChildOption));
    c.id.push_back(static_cast<unsigned char>(hi * 16 + lo));
  }
  return c;
}

std::string format_ep_child(const EpChild& c) {
  return strf("%d,%d,%d,", c.rank, c.ranks, c.device) + to_hex(c.id);
}

std::string rank_message(const EpChild& c, const std::string& what) {
  const std::string prefix = "fusedmoe: ";
  const std::string rest = what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what;
  return strf("fusedmoe: rank %d (GPU %d): %s", c.rank, c.device, rest.c_str());
}

void require_nccl_build() {
#if !defined(FMOE_HAS_CUDA)
  FMOE_REQUIRE(false, "--ep: this build has no CUDA kernels (built without nvcc), so no "
               "expert-parallel layer; build with CUDA and NCCL to run it");
#elif !defined(FMOE_HAS_NCCL)
  FMOE_REQUIRE(false, "--ep: this build has no expert-parallel layer (NCCL was not found when it "
               "was configured); install NCCL (apt: libnccl-dev) or set NCCL_ROOT, and "
               "configure again");
#endif
}

void require_gpus_for_ranks(int ranks) {
  const DeviceReport r = query_devices();
  if (r.devices.empty())
    FMOE_REQUIRE(false, "--ep %d needs %d GPU%s (one per rank), but this machine has none: %s",
                 ranks, ranks, ranks == 1 ? "" : "s", r.why_none.c_str());
  int usable = 0;
  for (const DeviceInfo& d : r.devices) usable += d.supported() ? 1 : 0;
  FMOE_REQUIRE(ranks <= int(r.devices.size()),
               "--ep %d needs %d GPUs (one per rank), but %d %s visible", ranks, ranks,
               int(r.devices.size()), r.devices.size() == 1 ? "is" : "are");
  for (int i = 0; i < ranks; ++i)
    FMOE_REQUIRE(r.devices[size_t(i)].supported(),
                 "--ep %d: rank %d would run on GPU %d (%s, sm_%d%d), but the kernels need sm_90 "
                 "(%d of the %d visible GPUs are sm_90)", ranks, i, i,
                 r.devices[size_t(i)].name.c_str(), r.devices[size_t(i)].cc_major,
                 r.devices[size_t(i)].cc_minor, usable, int(r.devices.size()));
}

int launch_ranks(const char* what, int ranks, const std::vector<std::string>& argv) {
  return launch_ranks_of(what, "/proc/self/exe", ranks, argv);
}

int launch_ranks_of(const char* what, const char* exe, int ranks, const std::vector<std::string>& argv) {
#if !defined(FMOE_HAS_NCCL)
  (void)what;
  (void)exe;
  (void)ranks;
  (void)argv;
  require_nccl_build();
  return 1;
#else
  // The id's bootstrap root is a thread of this process: it must live until every rank joined.
  const EpUniqueId uid = ep_unique_id();  // also sets NCCL_NVLS_ENABLE=0 here unless set
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);  // inherited by the ranks
  EpChild child;
  child.ranks = ranks;
  child.id.assign(uid.bytes, uid.bytes + sizeof(uid.bytes));

  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids(size_t(ranks), -1);
  for (int r = 0; r < ranks; ++r) {
    child.rank = r;
    child.device = r;
    std::vector<std::string> args = {"fusedmoe"};
    args.insert(args.end(), argv.begin(), argv.end());
    args.push_back(std::string("--") + kEpChildOption);
    args.push_back(format_ep_child(child));
    std::vector<char*> cargv;
    for (std::string& a : args) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    pid_t pid = -1;
    const int rc = posix_spawn(&pid, exe, nullptr, nullptr, cargv.data(), environ);
    if (rc != 0) {
      for (int s = 0; s < r; ++s) kill(pids[size_t(s)], SIGKILL);
      for (int s = 0; s < r; ++s) waitpid(pids[size_t(s)], nullptr, 0);
      FMOE_REQUIRE(false, "%s: could not start rank %d (posix_spawn of %s: %s)", what, r, exe,
                   std::strerror(rc));
    }
    pids[size_t(r)] = pid;
  }

  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  const double timeout_s = detail::knobs().ep_timeout_s;
  std::vector<int> status(size_t(ranks), 0);
  std::vector<char> done(size_t(ranks), 0), ended(size_t(ranks), 0);
  int left = ranks, first_failed = -1;
  auto first_failure = Clock::time_point{};
  bool timed_out = false;
  while (left > 0) {
    for (int r = 0; r < ranks; ++r) {
      if (done[size_t(r)]) continue;
      int st = 0;
      const pid_t got = waitpid(pids[size_t(r)], &st, WNOHANG);
      if (got == 0) continue;
      done[size_t(r)] = 1;
      --left;
      status[size_t(r)] = got < 0 ? -1 : st;
      const bool ok = got > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
      if (!ok && first_failed < 0 && !ended[size_t(r)]) {
        first_failed = r;
        first_failure = Clock::now();
      }
    }
    if (left == 0) break;
    const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
    const bool grace_over = first_failed >= 0 &&
        std::chrono::duration<double>(Clock::now() - first_failure).count() > kGraceSeconds;
    if (elapsed > timeout_s || grace_over) {
      timed_out = timed_out || elapsed > timeout_s;
      for (int r = 0; r < ranks; ++r)
        if (!done[size_t(r)] && !ended[size_t(r)]) {
          ended[size_t(r)] = 1;
          kill(pids[size_t(r)], SIGKILL);  // our own child, by its pid
        }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }

  std::fflush(stdout);
  int failed = 0;
  for (int r = 0; r < ranks; ++r) {
    const int st = status[size_t(r)];
    if (!ended[size_t(r)] && WIFEXITED(st) && WEXITSTATUS(st) == 0) continue;
    ++failed;
    if (ended[size_t(r)] && timed_out)
      std::fprintf(stderr, "fusedmoe %s: rank %d (GPU %d) did not finish within FMOE_EP_TIMEOUT=%.0f "
                   "s and was ended\n", what, r, r, timeout_s);
    else if (ended[size_t(r)])
      std::fprintf(stderr, "fusedmoe %s: rank %d (GPU %d) was ended %.0f s after rank %d failed "
                   "(it would wait for that rank in NCCL)\n", what, r, r, kGraceSeconds, first_failed);
    else
      std::fprintf(stderr, "fusedmoe %s: rank %d (GPU %d) %s\n", what, r, r,
                   st == -1 ? "could not be waited for" : describe_status(st).c_str());
  }
  if (failed)
    std::fprintf(stderr, "fusedmoe %s: %d of %d rank%s failed\n", what, failed, ranks,
                 ranks == 1 ? "" : "s");
  return failed ? 1 : 0;
#endif
}

}  // namespace fusedmoe::cli

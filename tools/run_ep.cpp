// fusedmoe run --ep R: the expert-parallel layer over R processes on one host (one GPU each),
// each rank's output checked against the single-GPU MoeLayer on the same tokens (ep_case.hpp).
// The parent checks the command line, the build, the GPUs and the config, then starts the ranks
// (ep_launch.hpp); each rank prints one line and exits 1 on FAIL.
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "fusedmoe/ep_layer.hpp"
#include "fusedmoe/error.hpp"
#include "tools/cli.hpp"
#include "tools/ep_launch.hpp"

#if defined(FMOE_HAS_NCCL)
#include "bench/harness.hpp"
#include "dist/ep_plan.hpp"
#include "tools/ep_case.hpp"
#endif

namespace fusedmoe::cli {
namespace {

#if defined(FMOE_HAS_NCCL)
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// One rank: build, forward once, check, one line. Exit status 0 on PASS, 1 on FAIL.
int run_rank_on(const MoeConfig& cfg, int T, uint64_t seed, ReductionMode mode, int chunks,
                bool fp8_rows, const EpChild& ch, cudaStream_t stream) {
  const int H = cfg.hidden, k = cfg.top_k;
  const auto t0 = std::chrono::steady_clock::now();
  set_activity("building this rank's layer and joining the communicator");
  EpRank r(ch, cfg, seed, stream);
  const EpMoeLayer& ep = r.make_layer(T);
  const double setup_s = seconds_since(t0);

  set_activity("running the EP forward");
  const EpTokens tokens = ep_tokens(cfg, r.host, T, seed, ch.rank);
  const std::vector<uint16_t> want = ep_reference(r, tokens, H, k, mode);
  const EpCombine combine = ep_combine_for(mode);
  DeviceBuffer y(std::max<size_t>(size_t(T) * H * 2, 16));
  y.fill(0xFF);  // NaN: every element must be written
  chunks = std::min(chunks, std::max(T, 1));  // at most one chunk per token (cap = T)
  DeviceBuffer ws(ep.workspace_size(combine, mode, chunks));
  EpForwardArgs a = ep_forward_args(tokens, y.get(), H, k, ch.device, mode);
  a.chunks = chunks;
  a.fp8_rows = fp8_rows;
  ep.forward(a, ws.get(), ws.bytes(), reinterpret_cast<Stream>(stream));
  wait_or_die(stream, 120, strf("EpMoeLayer::forward on rank %d", ch.rank));
  const EpStats st = ep.stats(ws.get(), combine, mode, reinterpret_cast<Stream>(stream), chunks);
  std::vector<uint16_t> got = y.to_host<uint16_t>();
  got.resize(size_t(T) * H);
  // Chunks split the local layer's rows over several calls (another config choice can change
  // the last bits), so they are checked by relative L2; the bitwise claim is unchunked.
  const bool det = mode == ReductionMode::deterministic;
  const bool bitwise = det && chunks == 1;
  const EpCheck chk = check_ep_output(got, want, bitwise);
  const bool corrupt = st.overflow_rows || st.received_bad_slots || st.received_bad_counts;

  // The step captured in a CUDA graph (NCCL's calls included) and replayed: timed, and the output
  // after the replays checked again (deterministic: the first call's bits). Every rank replays
  // the same number of times, so the all-to-alls pair up.
  std::string timing;
  bool replays_ok = true;
  if (T > 0) {
    set_activity("timing the EP step");
    const bench::Stats t = bench::time_graph([&](cudaStream_t s, int) {
      ep.forward(a, ws.get(), ws.bytes(), reinterpret_cast<Stream>(s));
    }, stream, 10);
    std::vector<uint16_t> last = y.to_host<uint16_t>();
    last.resize(got.size());
    replays_ok = det ? last == got : check_ep_output(last, want, false).ok();  // det: same bits
    timing = strf("; step %.1f us median (p10 %.1f, p90 %.1f) over CUDA-graph replays, output "
                  "after them %s", t.median_us, t.p10_us, t.p90_us,
                  replays_ok ? (det ? "bit-identical" : "within the bound")
                             : (det ? "NOT bit-identical" : "OUT of the bound"));
  }
  const bool pass = chk.ok() && !corrupt && replays_ok;
  std::printf("  rank %d/%d : GPU %d (%s), experts [%d, %d), %d tokens, %lld rows and %lld routes "
              "received, set up in %.1f s; %s combine%s: %s%s%s -> %s\n", ch.rank, ch.ranks,
              ch.device, r.device_name.c_str(), r.first, r.first + r.count, T,
              (long long)st.received_rows, (long long)st.received_routes, setup_s,
              ep_combine_name(combine), chunks > 1 ? strf(", %d chunks", chunks).c_str() : "",
              describe_ep_check(chk, got, want, H).c_str(),
              corrupt ? strf(" (overflow rows %lld, bad slots %lld, bad counts %lld)",
                             (long long)st.overflow_rows, (long long)st.received_bad_slots,
                             (long long)st.received_bad_counts).c_str()
                      : "",
              timing.c_str(), pass ? "PASS" : "FAIL");
  std::fflush(stdout);
  return pass ? 0 : 1;
}

int run_rank(const MoeConfig& cfg, int T, uint64_t seed, ReductionMode mode, int chunks,
             bool fp8_rows, const EpChild& ch) {
  FMOE_CUDA(cudaSetDevice(ch.device));
  cudaStream_t stream = nullptr;
  FMOE_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  // The layers and the communicator go before the stream they were made on.
  const int rc = run_rank_on(cfg, T, seed, mode, chunks, fp8_rows, ch, stream);
  FMOE_CUDA(cudaStreamDestroy(stream));
  return rc;
}
#endif

}  // namespace

int run_ep(const Args& args, const std::vector<std::string>& argv, const MoeConfig& cfg, int T,
           uint64_t seed, const std::string& mode) {
  const int R = int(args.integer("ep", 1, 1, 1 << 10));
  const int chunks = int(args.integer("chunks", 1, 1, kEpMaxChunks));
  const bool fp8_rows = args.choice("rows", "bf16", {"bf16", "fp8"}) == "fp8";
  if (args.has(kEpChildOption)) {
    const EpChild ch = parse_ep_child(args.str(kEpChildOption, ""), R);  // usage errors first
#if defined(FMOE_HAS_NCCL)
    try {
      return run_rank(cfg, T, seed, parse_reduction_mode(mode), chunks, fp8_rows, ch);
    } catch (const Error& e) {
      throw Error(rank_message(ch, e.what()));
    }
#else
    (void)ch;
    (void)chunks;
    (void)fp8_rows;
    require_nccl_build();
    return 1;
#endif
  }
  set_activity("checking --ep");
  require_nccl_build();
  require_gpus_for_ranks(R);
#if defined(FMOE_HAS_NCCL)
  detail::ep_check_config(cfg, R);  // the EP layer's own refusals, before any process starts
#endif
  std::printf("fusedmoe run --ep %d\n", R);
  std::printf("  config   : %s\n", cfg.summary().c_str());
  std::printf("  tokens   : %d per rank   seed: %llu   mode: %s (%s combine), checked against the "
              "single-GPU MoeLayer on each rank's tokens (%s)\n", T, (unsigned long long)seed,
              mode.c_str(), mode == "deterministic" ? "choice-order" : "rank-order",
              mode == "deterministic" && chunks == 1 ? "bitwise" : "relative L2");
  if (chunks > 1) std::printf("  chunks   : %d, pipelined\n", chunks);
  if (fp8_rows) std::printf("  rows     : fp8 codes + 1x128 scales, quantized on the token's rank\n");
  std::printf("  ranks    : %d processes, rank r on GPU r, NCCL_NVLS_ENABLE=0 unless set\n", R);
  std::fflush(stdout);
  std::vector<std::string> child_argv = {"run"};
  child_argv.insert(child_argv.end(), argv.begin(), argv.end());
  set_activity("waiting for the ranks");
  const int rc = launch_ranks("run --ep", R, child_argv);
  std::printf("  result   : %s\n", rc == 0 ? "PASS" : "FAIL");
  return rc;
}

}  // namespace fusedmoe::cli

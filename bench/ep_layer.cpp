// fusedmoe bench --op ep_layer --ep R: the expert-parallel layer (EpMoeLayer) over R processes on
// one host, one GPU each (tools/ep_launch.hpp), each rank checked first against the single-GPU
// MoeLayer on its tokens (tools/ep_case.hpp: bitwise in deterministic mode), then timed.
//
// Rows, per rank, each over CUDA-graph replays of that piece alone (bench::time_graph: warm-up,
// median, p10/p90), the pieces being the steps of ep_layer_steps.hpp:
//   ep_layer           the whole step (EpMoeLayer::forward)
//   ep_layer.dispatch  dispatch kernels (plan + pack) + the counts and rows all-to-alls
//   ep_layer.local     receive + the local MoeLayer on R * cap rows + return to the slots
//   ep_layer.combine   the results all-to-all + the combine kernel
//   ep_layer.single    the single-GPU MoeLayer on this rank's T tokens with all E experts (what
//                      the rank would run alone; the weak-scaling baseline)
//   nccl.all_to_all    NCCL's all-to-all alone on the same buffers (counts, rows, results): the
//                      ceilings of the dispatch and combine rows (their floor column), and the
//                      small-message latency of the decode target (step <= single + 2 x counts)
//   ep_layer.shared    (shared experts) the shared experts alone: routing + one-expert layer
//   ep_layer.serial    (shared experts) the whole step with them first on the caller's stream
//                      instead of on the side stream beside the exchanges (overlap_shared=false)
//   ep_layer.chunked   (--chunks N > 1) the whole step split into N pipelined chunks (the
//                      exchanges of one beside the local layer of another; --local-sms S leaves
//                      the GEMMs S SMs), checked against MoeLayer by relative L2 first
// Every rank replays the same graphs the same number of times, so the NCCL calls pair up; a
// piece's time includes waiting for the slowest rank at its all-to-alls. The EP layer is built
// for each T with max_tokens_per_rank = T (every rank has T tokens), and the all-to-alls move
// fixed chunks of cap rows per peer, own chunk included: the GB/s of the dispatch and combine
// rows are those bytes, sent by this rank, over the row's time (the issue's target compares them
// with NCCL's all_to_all bandwidth). One prepared layer per rank: warm L2 where it fits. Rank 0
// gathers every rank's numbers over the communicator and prints the table.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench/registry.hpp"
#include "common/cuda_check.hpp"
#include "fusedmoe/ep_layer.hpp"
#include "tools/ep_launch.hpp"

#if defined(FMOE_HAS_NCCL)
#include "dist/ep_comm.hpp"
#include "dist/ep_layer_steps.hpp"
#include "dist/ep_plan.hpp"
#include "layer/layer_plan.hpp"
#include "tools/ep_case.hpp"
#endif

namespace fusedmoe::bench {
namespace {

constexpr int kLaunchesPerGraph = 10;
const std::vector<long long> kDefaultTokens = {128, 8192};

MoeConfig config_of(const cli::Args& args) {
  MoeConfig cfg = find_preset(args.str("preset", "qwen3-30b-a3b"));
  const std::string p = args.str("precision", "fp8");
  cfg.weight_precision = p == "bf16" ? Precision::bf16 : Precision::fp8_block;
  cfg.activation_precision = cfg.weight_precision;
  if (args.str("shared", "keep") == "drop") {
    cfg.num_shared_experts = 0;
    cfg.shared_intermediate = 0;
    cfg.shared_expert_gate = false;
  }
  return cfg;
}

std::vector<ReductionMode> modes_of(const cli::Args& args) {
  const std::string m = args.str("mode", "both");
  std::vector<ReductionMode> out;
  if (m == "fast" || m == "both") out.push_back(ReductionMode::fast);
  if (m == "deterministic" || m == "both") out.push_back(ReductionMode::deterministic);
  return out;
}

// The parent process: what needs the machine, then the ranks.
int launch_ep_layer(const cli::Args& args, const std::vector<std::string>& argv) {
  const int R = int(args.integer("ep", 1, 1, 1 << 10));
  cli::set_activity("checking --ep");
  cli::require_nccl_build();
  cli::require_gpus_for_ranks(R);
#if defined(FMOE_HAS_NCCL)
  detail::ep_check_config(config_of(args), R);
#endif
  std::vector<std::string> child_argv = {"bench"};
  child_argv.insert(child_argv.end(), argv.begin(), argv.end());
  std::printf("bench --op ep_layer: %d rank process%s, rank r on GPU r; rank 0 prints the table\n",
              R, R == 1 ? "" : "es");
  std::fflush(stdout);
  cli::set_activity("waiting for the ranks");
  return cli::launch_ranks("bench --op ep_layer", R, child_argv);
}

#if defined(FMOE_HAS_NCCL)
// What one rank reports to rank 0 for one (T, mode): four timings and the check.
constexpr int kStats = 11;
constexpr int kVals = kStats * 3 + 4;
enum Slot { kWhole, kDispatch, kLocal, kCombine, kSingle, kA2aCounts, kA2aRows, kA2aResults,
            kShared, kSerial, kChunked };
const char* const kSlotOp[kStats] = {"ep_layer", "ep_layer.dispatch", "ep_layer.local",
                                     "ep_layer.combine", "ep_layer.single", "nccl.all_to_all",
                                     "nccl.all_to_all", "nccl.all_to_all", "ep_layer.shared",
                                     "ep_layer.serial", "ep_layer.chunked"};

void run_rank(const Context& ctx, const cli::Args& args, const cli::EpChild& ch);

void run_ep_layer(const Context& ctx, const cli::Args& args) {
  const int R = int(args.integer("ep", 1, 1, 1 << 10));
  const cli::EpChild ch = cli::parse_ep_child(args.str(cli::kEpChildOption, ""), R);
  try {
    run_rank(ctx, args, ch);
  } catch (const Error& e) {
    throw Error(cli::rank_message(ch, e.what()));
  }
}

// n values of T at device pointer p, on the host (after the stream's work: the caller synchronizes).
template <class T>
std::vector<T> device_to_host(const void* p, size_t n) {
  std::vector<T> out(n);
  if (n) FMOE_CUDA(cudaMemcpy(out.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
  return out;
}

// A failed check, taken apart on this rank (every rank runs it): after the step that just ran
// on (a, ws), (1) what arrived against the host plan of every rank's tokens (ep_plan.hpp), (2)
// the local layer's prepared weights against the single-GPU layer's for the same experts, (3) the
// local layer's output against the same layer run again and a freshly built one on the rows that
// arrived. Prints one line per part to stderr.
void diagnose_failed_step(const cli::EpRank& r, const MoeConfig& cfg, const EpMoeLayer& ep,
                          const EpForwardArgs& a, void* ws, int T, uint64_t seed, bool use_bias,
                          cudaStream_t stream) {
  const int R = r.child.ranks, rank = r.child.rank, cap = ep.max_tokens_per_rank();
  const int H = cfg.hidden, k = cfg.top_k;
  const detail::ExpertPartition part(cfg.num_experts, R);
  const detail::EpStepViews v = detail::ep_step_views(ep, a, ws);
  FMOE_CUDA(cudaStreamSynchronize(stream));
  const MoeForwardArgs& la = v.local_args;
  const auto counts = device_to_host<int32_t>(v.recv_counts, size_t(R));
  const auto slots = device_to_host<int32_t>(v.row_slot, size_t(v.rows));
  const auto ids = device_to_host<int32_t>(la.topk_ids.data, size_t(v.rows) * k);
  const auto wts = device_to_host<float>(la.topk_weights.data, size_t(v.rows) * k);
  const auto x = a.fp8_rows ? std::vector<uint16_t>() : device_to_host<uint16_t>(la.x.data, size_t(v.rows) * H);
  const auto y_local = device_to_host<uint16_t>(la.y.data, size_t(v.rows) * H);

  // (1) What arrived, against the host plan.
  std::string want_counts, got_counts;
  int64_t bad_slot = 0, bad_x = 0, bad_ids = 0, bad_w = 0, first_bad_x = -1;
  int off = 0;
  for (int s = 0; s < R; ++s) {
    const cli::EpTokens ts = cli::ep_tokens(cfg, r.host, T, seed, s, use_bias);
    const detail::DispatchPlan pl = detail::plan_dispatch(ts.routing.ids.data(),
        ts.routing.weights.data(), T, k, part, s, cap);
    const std::vector<uint16_t> xs = ts.x.to_host<uint16_t>();
    const int n = pl.send_counts[size_t(rank)];
    want_counts += strf("%s%d", s ? "," : "", n);
    got_counts += strf("%s%d", s ? "," : "", counts[size_t(s)]);
    for (int i = 0; i < n && off + i < v.rows; ++i) {
      const int64_t row = off + i, sent = int64_t(rank) * cap + i;
      const int t = pl.row_token[size_t(sent)];
      bad_slot += slots[size_t(row)] != s * cap + i;
      if (!x.empty() && std::memcmp(&x[size_t(row) * H], &xs[size_t(t) * H], size_t(H) * 2) != 0) {
        if (bad_x++ == 0) first_bad_x = row;
      }
      for (int j = 0; j < k; ++j) {
        bad_ids += ids[size_t(row) * k + j] != pl.row_local_ids[size_t(sent) * k + j];
        bad_w += wts[size_t(row) * k + j] != pl.row_weights[size_t(sent) * k + j];
      }
    }
    off += n;
  }
  for (int64_t row = off; row < v.rows; ++row)
    for (int j = 0; j < k; ++j) bad_ids += ids[size_t(row) * k + j] != -1;
  std::fprintf(stderr, "fusedmoe: rank %d: diagnose (1) arrived: counts %s (plan %s); of %d rows: "
               "%lld wrong slots, %lld wrong x rows%s (first %lld), %lld wrong ids, %lld wrong "
               "weights\n", rank, got_counts.c_str(), want_counts.c_str(), off,
               (long long)bad_slot, (long long)bad_x, x.empty() ? " (fp8 rows: not compared)" : "",
               (long long)first_bad_x, (long long)bad_ids, (long long)bad_w);

  // (2) The prepared weights, expert by expert, against the single-GPU layer's.
  const MoeLayer::Impl& Ll = v.local->impl();
  const MoeLayer::Impl& Lw = r.whole.layer->impl();
  if (!Ll.e2m1) {
    const int64_t eb = Ll.fp8 ? 1 : 2, KBh = (H + 127) / 128, KB2 = (Ll.I_pad + 127) / 128;
    struct Part { const char* name; const DeviceBuffer* local; const DeviceBuffer* whole; int64_t per; };
    std::vector<Part> parts = {{"w13", &Ll.w13, &Lw.w13, int64_t(Ll.NT1) * 128 * H * eb},
                               {"w2", &Ll.w2, &Lw.w2, int64_t(H) * Ll.I_pad * eb}};
    if (Ll.fp8) {
      parts.push_back({"w13_scale", &Ll.w13_scale, &Lw.w13_scale, int64_t(Ll.NT1) * KBh * 16 * 4});
      parts.push_back({"w2_scale", &Ll.w2_scale, &Lw.w2_scale, int64_t(Ll.NB2) * KB2 * 4});
    }
    std::string line;
    for (const Part& p : parts) {
      int bad = 0, first_bad = -1;
      std::vector<uint8_t> hl(size_t(p.per)), hw(size_t(p.per));
      for (int e = 0; e < Ll.E; ++e) {
        FMOE_CUDA(cudaMemcpy(hl.data(), p.local->get<uint8_t>() + e * p.per, size_t(p.per), cudaMemcpyDeviceToHost));
        FMOE_CUDA(cudaMemcpy(hw.data(), p.whole->get<uint8_t>() + (r.first + e) * p.per, size_t(p.per), cudaMemcpyDeviceToHost));
        if (std::memcmp(hl.data(), hw.data(), size_t(p.per)) != 0 && bad++ == 0) first_bad = e;
      }
      line += strf("%s: %d of %d experts differ (first %d); ", p.name, bad, Ll.E, first_bad);
    }
    std::fprintf(stderr, "fusedmoe: rank %d: diagnose (2) prepared vs the single-GPU layer's "
                 "experts [%d, %d): %stwo_scales %d / %d\n", rank, r.first, r.first + Ll.E,
                 line.c_str(), int(Ll.w13_two_scales), int(Lw.w13_two_scales));
  }

  // (3) The local layer on the rows as they arrived: again (its own workspace) and freshly built.
  const ReductionMode mode = la.mode;
  const int dev = r.child.device, rows = v.rows;
  auto run_local = [&](const MoeLayer& layer) {
    DeviceBuffer yb(size_t(rows) * H * 2), wsb(std::max<size_t>(layer.workspace_size(rows, mode), 256));
    yb.fill(0xFF);
    MoeForwardArgs args = la;
    args.y = TensorRef::contiguous(yb.get(), DType::bf16, {rows, H}, Device::cuda, dev);
    layer.forward(args, wsb.get(), wsb.bytes(), reinterpret_cast<Stream>(stream));
    cli::wait_or_die(stream, 120, "the local layer again (diagnostics)");
    return yb.to_host<uint16_t>();
  };
  const std::vector<uint16_t> again = run_local(*v.local);
  std::vector<uint16_t> fresh;
  {
    const MoeLayer built(v.local->config(),
                         detail::ep_routed_weights(cli::rank_weights(r.whole.weights, r.first, r.count)),
                         reinterpret_cast<Stream>(stream));
    fresh = run_local(built);
  }
  const bool det = mode == ReductionMode::deterministic;
  const cli::EpCheck c1 = cli::check_ep_output(y_local, again, det);
  const cli::EpCheck c2 = cli::check_ep_output(y_local, fresh, det);
  const cli::EpCheck c3 = cli::check_ep_output(again, fresh, det);
  std::fprintf(stderr, "fusedmoe: rank %d: diagnose (3) the step's local y vs the local layer "
               "again: rel L2 %.2e (%lld differ); vs a fresh layer: %.2e (%lld differ); again vs "
               "fresh: %.2e (%lld differ)\n", rank, c1.rel_l2, (long long)c1.differing, c2.rel_l2,
               (long long)c2.differing, c3.rel_l2, (long long)c3.differing);
}

void run_rank(const Context& ctx, const cli::Args& args, const cli::EpChild& ch) {
  const int R = ch.ranks;
  const MoeConfig cfg = config_of(args);
  const std::vector<long long> tokens = args.int_list("tokens", kDefaultTokens, 0, 65536);
  const std::vector<ReductionMode> modes = modes_of(args);
  const uint64_t seed = uint64_t(args.integer("seed", 1, 0, 1ll << 62));
  const int chunks = int(args.integer("chunks", 1, 1, kEpMaxChunks));
  const int local_sms = int(args.integer("local-sms", 0, 0, 1 << 10));
  const int shared_sms = int(args.integer("shared-sms", 0, 0, 1 << 10));
  const bool fp8_rows = args.str("rows", "bf16") == "fp8";
  const int H = cfg.hidden, k = cfg.top_k;
  const int max_t = int(*std::max_element(tokens.begin(), tokens.end()));
  const bool print = ch.rank == 0;
  cudaStream_t stream = ctx.stream;

  cli::set_activity("building this rank's layer and joining the communicator");
  cli::EpRank r(ch, cfg, seed, stream);
  DeviceBuffer y(std::max<size_t>(size_t(max_t) * H * 2, 16));
  DeviceBuffer gather_send(size_t(R) * kVals * sizeof(double)), gather_recv(size_t(R) * kVals * sizeof(double));
  if (print)
    std::printf("# %s, %d ranks: rank r owns experts [first, first + E/R) and T tokens; the EP "
                "layer is built for each T with max_tokens_per_rank = T\n", cfg.summary().c_str(), R);
  std::fflush(stdout);

  // One workspace for every T, sized for the largest, allocated and poisoned once (a step must
  // not read what it did not write) and kept to the end: the buffers the captured all-to-alls
  // used are never freed under NCCL (it registers those of captured calls by address,
  // NCCL_GRAPH_REGISTER). The workspace needs no initialization.
  auto ws_need = [&](const EpMoeLayer& ep, int T) {
    size_t b = 0;
    for (ReductionMode m : modes)
      b = std::max({b, ep.workspace_size(cli::ep_combine_for(m), m),
                    ep.workspace_size(cli::ep_combine_for(m), m, std::min(chunks, std::max(T, 1)))});
    return b;
  };
  DeviceBuffer ws(ws_need(r.make_layer(max_t), max_t));
  ws.fill(0xFF);  // poisoned: a step must not read what it did not write

  // Whether any rank's check failed, learnt by every rank, so that all take the same path (a rank
  // that went on alone would wait in NCCL for the others until the launcher ended it).
  auto any_rank = [&](bool mine) {
    const std::vector<double> send(size_t(R), mine ? 1.0 : 0.0);
    std::vector<double> all(static_cast<size_t>(R));
    FMOE_CUDA(cudaMemcpyAsync(gather_send.get(), send.data(), send.size() * sizeof(double),
                              cudaMemcpyHostToDevice, stream));
    detail::ep_all_to_all(r.comm->impl(), gather_send.get(), gather_recv.get(), sizeof(double), stream);
    FMOE_CUDA(cudaMemcpyAsync(all.data(), gather_recv.get(), all.size() * sizeof(double),
                              cudaMemcpyDeviceToHost, stream));
    FMOE_CUDA(cudaStreamSynchronize(stream));
    return std::any_of(all.begin(), all.end(), [](double v) { return v != 0.0; });
  };

  cli::set_activity("benchmarking the EP layer");
  for (const long long T_ll : tokens) {
    const int T = int(T_ll);
    const EpMoeLayer& ep = r.make_layer(T);
    FMOE_REQUIRE(ws_need(ep, T) <= ws.bytes(), "bench ep_layer: internal: T=%d needs a workspace of "
                 "%zu bytes, more than the %zu sized for T=%d", T, ws_need(ep, T), ws.bytes(), max_t);
    size_t single_ws_bytes = 256;
    for (ReductionMode m : modes)
      single_ws_bytes = std::max(single_ws_bytes, r.whole.layer->workspace_size(T, m));
    DeviceBuffer single_ws(single_ws_bytes);
    const cli::EpTokens tok = cli::ep_tokens(cfg, r.host, T, seed, ch.rank,
                                             args.str("routing", "model") == "model");
    const cli::LayerCost cost = cli::layer_cost(cfg, tok.routing, T);
    for (const ReductionMode mode : modes) {
      const EpCombine combine = cli::ep_combine_for(mode);
      EpForwardArgs a = cli::ep_forward_args(tok, y.get(), H, k, ch.device, mode);
      a.shared_sms = shared_sms;
      a.fp8_rows = fp8_rows;
      // Checked first: the single-GPU layer on the same tokens and routing.
      const std::vector<uint16_t> want = cli::ep_reference(r, tok, H, k, mode);
      y.fill(0xFF);
      ep.forward(a, ws.get(), ws.bytes(), reinterpret_cast<Stream>(stream));
      cli::wait_or_die(stream, 120, strf("EpMoeLayer::forward on rank %d, T=%d", ch.rank, T));
      const EpStats st = ep.stats(ws.get(), combine, mode, reinterpret_cast<Stream>(stream));
      std::vector<uint16_t> got = y.to_host<uint16_t>();
      got.resize(size_t(T) * H);
      const cli::EpCheck chk = cli::check_ep_output(got, want, mode == ReductionMode::deterministic);
      const bool failed_somewhere = any_rank(!chk.ok());
      if (failed_somewhere) {
        // What the failure depends on, before giving up, on every rank: the step's counts, the
        // same step again, the shared experts serial, and the reference again.
        auto again = [&](const EpForwardArgs& args) {
          y.fill(0xFF);
          ep.forward(args, ws.get(), ws.bytes(), reinterpret_cast<Stream>(stream));
          cli::wait_or_die(stream, 120, strf("EpMoeLayer::forward on rank %d, T=%d", ch.rank, T));
          std::vector<uint16_t> g = y.to_host<uint16_t>();
          g.resize(size_t(T) * H);
          return cli::check_ep_output(g, want, mode == ReductionMode::deterministic).rel_l2;
        };
        const double repeat = again(a);
        EpForwardArgs serial = a;
        serial.overlap_shared = false;
        const double serial_l2 = again(serial);
        const cli::EpCheck ref2 = cli::check_ep_output(cli::ep_reference(r, tok, H, k, mode), want, false);
        std::fprintf(stderr, "fusedmoe: rank %d: check at T=%d %s (rel L2 %.2e): stats: %lld dropped routes, "
                     "%lld overflow rows, %lld rows / %lld routes received, %lld bad slots, %lld bad "
                     "counts; rel L2 of a repeat %.2e, with the shared experts serial %.2e; the "
                     "reference again vs the first %.2e\n", ch.rank, T,
                     chk.ok() ? "passed" : "FAILED", chk.rel_l2,
                     (long long)st.dropped_routes, (long long)st.overflow_rows,
                     (long long)st.received_rows, (long long)st.received_routes,
                     (long long)st.received_bad_slots, (long long)st.received_bad_counts, repeat,
                     serial_l2, ref2.rel_l2);
        diagnose_failed_step(r, cfg, ep, serial, ws.get(), T, seed,
                             args.str("routing", "model") == "model", stream);
      }
      FMOE_REQUIRE(chk.ok(), "bench ep_layer: rank %d, %s T=%d %s: %s (seed %llu)", ch.rank,
                   cfg.name.c_str(), T, reduction_mode_name(mode),
                   cli::describe_ep_check(chk, got, want, H).c_str(), (unsigned long long)seed);
      FMOE_REQUIRE(!failed_somewhere, "bench ep_layer: rank %d, %s T=%d %s: passed, but another "
                   "rank's check failed (its line says why)", ch.rank, cfg.name.c_str(), T,
                   reduction_mode_name(mode));

      const detail::EpExchanges x = detail::ep_check_forward(ep, a, ws.get(), ws.bytes());
      const EpCommunicator::Impl& comm = r.comm->impl();
      void* w = ws.get();
      Stats t[kStats];
      t[kWhole] = time_graph([&](cudaStream_t s, int) {
        ep.forward(a, w, ws.bytes(), reinterpret_cast<Stream>(s));
      }, stream, kLaunchesPerGraph);
      t[kDispatch] = time_graph([&](cudaStream_t s, int) {
        detail::ep_dispatch(ep, a, w, s);
        detail::ep_all_to_all(comm, x.counts.send, x.counts.recv, x.counts.bytes_per_peer, s);
        detail::ep_all_to_all(comm, x.rows.send, x.rows.recv, x.rows.bytes_per_peer, s);
      }, stream, kLaunchesPerGraph);
      t[kLocal] = time_graph([&](cudaStream_t s, int) { detail::ep_local(ep, a, w, s); }, stream,
                             kLaunchesPerGraph);
      t[kCombine] = time_graph([&](cudaStream_t s, int) {
        detail::ep_all_to_all(comm, x.results.send, x.results.recv, x.results.bytes_per_peer, s);
        detail::ep_combine(ep, a, w, s);
      }, stream, kLaunchesPerGraph);
      const MoeForwardArgs single = cli::ep_single_args(r, tok, y.get(), H, k, mode);
      t[kSingle] = time_graph([&](cudaStream_t s, int) {
        r.whole.layer->forward(single, single_ws.get(), single_ws.bytes(), reinterpret_cast<Stream>(s));
      }, stream, kLaunchesPerGraph);
      const bool shared = cfg.num_shared_experts > 0;
      if (shared) {
        t[kShared] = time_graph([&](cudaStream_t s, int) { detail::ep_shared(ep, a, w, s); }, stream,
                                kLaunchesPerGraph);
        EpForwardArgs serial = a;
        serial.overlap_shared = false;
        t[kSerial] = time_graph([&](cudaStream_t s, int) {
          ep.forward(serial, w, ws.bytes(), reinterpret_cast<Stream>(s));
        }, stream, kLaunchesPerGraph);
      }
      const bool chunked = chunks > 1 && T >= chunks;
      if (chunked) {
        // Checked first (another split of the rows over the local layer's calls, so by
        // relative L2), then timed.
        EpForwardArgs c = a;
        c.chunks = chunks;
        c.local_sms = local_sms;
        y.fill(0xFF);
        ep.forward(c, w, ws.bytes(), reinterpret_cast<Stream>(stream));
        cli::wait_or_die(stream, 120, strf("EpMoeLayer::forward (chunks=%d) on rank %d", chunks, ch.rank));
        std::vector<uint16_t> cgot = y.to_host<uint16_t>();
        cgot.resize(size_t(T) * H);
        const cli::EpCheck cchk = cli::check_ep_output(cgot, want, false);
        const bool chunks_failed_somewhere = any_rank(!cchk.ok());
        FMOE_REQUIRE(cchk.ok(), "bench ep_layer: rank %d, %s T=%d %s chunks=%d: %s (seed %llu)",
                     ch.rank, cfg.name.c_str(), T, reduction_mode_name(mode), chunks,
                     cli::describe_ep_check(cchk, cgot, want, H).c_str(), (unsigned long long)seed);
        FMOE_REQUIRE(!chunks_failed_somewhere, "bench ep_layer: rank %d, %s T=%d chunks=%d: passed, "
                     "but another rank's check failed (its line says why)", ch.rank,
                     cfg.name.c_str(), T, chunks);
        t[kChunked] = time_graph([&](cudaStream_t s, int) {
          ep.forward(c, w, ws.bytes(), reinterpret_cast<Stream>(s));
        }, stream, kLaunchesPerGraph);
      }
      const detail::EpExchange* ex[3] = {&x.counts, &x.rows, &x.results};
      for (int i = 0; i < 3; ++i)
        t[kA2aCounts + i] = time_graph([&](cudaStream_t s, int) {
          detail::ep_all_to_all(comm, ex[i]->send, ex[i]->recv, ex[i]->bytes_per_peer, s);
        }, stream, kLaunchesPerGraph);

      // Every rank's numbers to rank 0 (the same vector in each of this rank's R chunks).
      std::vector<double> mine(kVals, 0.0);
      for (int i = 0; i < kStats; ++i) {
        mine[size_t(3 * i)] = t[i].median_us;
        mine[size_t(3 * i + 1)] = t[i].p10_us;
        mine[size_t(3 * i + 2)] = t[i].p90_us;
      }
      mine[3 * kStats] = double(st.received_rows);
      mine[3 * kStats + 1] = double(st.received_routes);
      mine[3 * kStats + 2] = chk.rel_l2;
      mine[3 * kStats + 3] = double(cost.flops);
      std::vector<double> send(size_t(R) * kVals);
      for (int p = 0; p < R; ++p) std::copy(mine.begin(), mine.end(), send.begin() + ptrdiff_t(p) * kVals);
      FMOE_CUDA(cudaMemcpyAsync(gather_send.get(), send.data(), send.size() * sizeof(double),
                                cudaMemcpyHostToDevice, stream));
      detail::ep_all_to_all(comm, gather_send.get(), gather_recv.get(), kVals * sizeof(double), stream);
      std::vector<double> all(size_t(R) * kVals);
      FMOE_CUDA(cudaMemcpyAsync(all.data(), gather_recv.get(), all.size() * sizeof(double),
                                cudaMemcpyDeviceToHost, stream));
      FMOE_CUDA(cudaStreamSynchronize(stream));
      if (!print) continue;

      const double dispatch_bytes = double(R) * double(x.counts.bytes_per_peer + x.rows.bytes_per_peer);
      const double combine_bytes = double(R) * double(x.results.bytes_per_peer);
      const char* const a2a_name[3] = {"counts", "rows", "results"};
      for (int s = 0; s < R; ++s) {
        const double* v = all.data() + size_t(s) * kVals;
        const double a2a_dispatch = v[3 * kA2aCounts] + v[3 * kA2aRows];
        const double a2a_combine = v[3 * kA2aResults];
        const std::string check = mode == ReductionMode::deterministic
            ? std::string("bitwise = MoeLayer")
            : strf("rel L2 %.1e vs MoeLayer", v[3 * kStats + 2]);
        for (int i = 0; i < kStats; ++i) {
          if ((i == kShared || i == kSerial) && cfg.num_shared_experts == 0) continue;
          if (i == kChunked && !chunked) continue;
          Row row;
          row.op = kSlotOp[i];
          row.shape = strf("%s %s R=%d rank %d", cfg.name.c_str(),
                           precision_name(cfg.weight_precision), R, s);
          row.config = cli::ep_combine_name(combine);
          row.mode = reduction_mode_name(mode);
          row.tokens = T;
          row.t.median_us = v[3 * i];
          row.t.p10_us = v[3 * i + 1];
          row.t.p90_us = v[3 * i + 2];
          row.t.samples = t[i].samples;  // the same on every rank: the replays pair up
          std::string note;
          if (i == kShared) {
            row.floor_kind.push_back('-');
            note = strf("%.0f%% of the step (on the side stream, beside the dispatch)",
                        100.0 * v[3 * i] / v[0]);
          } else if (i == kWhole || i == kLocal || i == kSingle || i == kSerial || i == kChunked) {
            row.flops = v[3 * kStats + 3];  // this rank's tokens' routes (the local layer's share varies)
            set_floor(row, *ctx.ceil, cfg.weight_precision == Precision::fp8_block ? "fp8" : "bf16");
            if (i == kWhole)
              note = strf("%s, %.0f rows / %.0f routes received; dispatch + combine at %.0f%% of "
                          "NCCL's all_to_all alone on their bytes; the single-GPU layer is %.0f%% "
                          "of this step (weak scaling); step / (single + 2 x small all_to_all) = "
                          "%.2f", check.c_str(), v[3 * kStats], v[3 * kStats + 1],
                          100.0 * (a2a_dispatch + a2a_combine) / (v[3 * kDispatch] + v[3 * kCombine]),
                          100.0 * v[3 * kSingle] / v[0],
                          v[0] / (v[3 * kSingle] + 2 * v[3 * kA2aCounts]));
            else if (i == kLocal)
              note = strf("%.0f%% of the step", 100.0 * v[3 * i] / v[0]);
            else if (i == kChunked)
              note = strf("%d chunks%s: %.2fx the unchunked step; the single-GPU layer is %.0f%% "
                          "of it", chunks, local_sms ? strf(", GEMMs on %d SMs", local_sms).c_str() : "",
                          v[3 * i] / v[0], 100.0 * v[3 * kSingle] / v[3 * i]);
            else if (i == kSerial)
              note = strf("the shared experts first, on the step's stream: %.2fx the overlapped step",
                          v[3 * i] / v[0]);
            else
              note = "MoeLayer on this rank's T tokens, all E experts on one GPU";
          } else if (i == kDispatch || i == kCombine) {
            row.bytes = i == kDispatch ? dispatch_bytes : combine_bytes;
            // The floor: NCCL's all-to-all alone on the same buffers, measured just before.
            row.floor_us = i == kDispatch ? a2a_dispatch : a2a_combine;
            row.floor_kind = "nccl";
            note = strf("%.0f%% of the step; GB/s: %.1f MB sent in fixed chunks of cap=%d rows, "
                        "own chunk included", 100.0 * v[3 * i] / v[0], row.bytes / 1e6,
                        ep.max_tokens_per_rank());
          } else {
            const detail::EpExchange& e = *ex[i - kA2aCounts];
            row.bytes = double(R) * double(e.bytes_per_peer);
            row.config = a2a_name[i - kA2aCounts];
            row.mode.clear();
            row.floor_kind.push_back('-');  // (push_back, not = "-": g++ 12 warns falsely, -Wrestrict)
            note = strf("NCCL's all-to-all alone: %zu bytes per peer", e.bytes_per_peer);
          }
          row.note = note;
          print_row(row, *ctx.ceil);
          ctx.rows->push_back(std::move(row));
        }
      }
    }
  }
}
#else
void run_ep_layer(const Context&, const cli::Args&) { cli::require_nccl_build(); }
#endif

using Kind = BenchOption::Kind;
const std::vector<BenchOption> kOptions = {
    {"ep", "R", "ranks: processes on this host, rank r on GPU r (default 1; needs R sm_90 GPUs)",
     Kind::integer, {}, 1, 1 << 10},
    {"preset", "NAME", "model preset (default qwen3-30b-a3b)",
     Kind::preset},
    {"tokens", "LIST", "comma-separated tokens per rank in [0, 65536] (default 128,8192)",
     Kind::int_list, {}, 0, 65536},
    {"precision", "fp8|bf16", "weight precision (default fp8)", Kind::choice, {"fp8", "bf16"}},
    {"mode", "fast|deterministic|both", "fast: rank-order combine, deterministic: choice-order "
     "combine (default both)", Kind::choice, {"fast", "deterministic", "both"}},
    {"shared", "keep|drop", "drop: leave the preset's shared experts out (default keep: every "
     "rank runs them on its own tokens)", Kind::choice, {"keep", "drop"}},
    {"seed", "N", "seed of the random weights and inputs (default 1)", Kind::integer, {}, 0, 1ll << 62},
    {"routing", "model|unbiased", "unbiased: route without the seeded layer's random correction / "
     "router bias, which loads some ranks far more than others (default model)", Kind::choice,
     {"model", "unbiased"}},
    {"chunks", "N", "also time the step split into N pipelined chunks (default 1: not)",
     Kind::integer, {}, 1, kEpMaxChunks},
    {"local-sms", "S", "with --chunks: the local layer's GEMMs on at most S SMs (default 0: all)",
     Kind::integer, {}, 0, 1 << 10},
    {"rows", "bf16|fp8", "how the token rows travel: bf16, or fp8 codes + 1x128 scales quantized on "
     "the token's rank (fp8 layers; default bf16)", Kind::choice, {"bf16", "fp8"}},
    {"shared-sms", "S", "the shared experts' GEMMs on at most S SMs in every row (default 0: all)",
     Kind::integer, {}, 0, 1 << 10},
};

const Register kEpLayer{BenchOp{
    "ep_layer", "the expert-parallel layer over --ep R processes: whole step, dispatch, local, "
    "combine per rank, checked against MoeLayer first", kOptions, run_ep_layer, nullptr,
    launch_ep_layer}};

}  // namespace
}  // namespace fusedmoe::bench

// Progress of the weight generation: the reference reports it without changing a single weight,
// and the CLI's ProgressLine prints it at a bounded rate.
#include <cstdio>
#include <string>
#include <vector>

#include "common/env.hpp"
#include "ref/ref.hpp"
#include "tests/test_util.hpp"
#include "tools/progress.hpp"
#include "tools/projection_case.hpp"

namespace fusedmoe {
namespace {

MoeConfig small_layer(Precision p) {
  MoeConfig c = find_preset("qwen3.5-35b-a3b");  // shared expert with a gate
  c.hidden = 256;
  c.intermediate = 64;
  c.num_experts = 8;
  c.top_k = 2;
  c.shared_intermediate = 192;
  c.weight_precision = p;
  c.activation_precision = p == Precision::nvfp4 ? Precision::bf16 : p;
  c.validate();
  return c;
}

bool same_weights(const ref::WeightSet& a, const ref::WeightSet& b) {
  return a.bf16 == b.bf16 && a.q == b.q && a.scale == b.scale && a.block_scale == b.block_scale &&
         a.global_scale == b.global_scale;
}

bool same_layer(const ref::LayerWeights& a, const ref::LayerWeights& b) {
  return same_weights(a.w13, b.w13) && same_weights(a.w2, b.w2) &&
         same_weights(a.shared_w13, b.shared_w13) && same_weights(a.shared_w2, b.shared_w2) &&
         a.route_bias == b.route_bias && a.shared_gate == b.shared_gate;
}

TEST(WeightProgress, CountsEveryElementOnceAndChangesNoWeight) {
  for (const Precision p : {Precision::fp8_block, Precision::bf16, Precision::nvfp4}) {
    const MoeConfig c = small_layer(p);
    const uint64_t seed = test::run_seed();
    const int64_t total =
        3 * int64_t(c.hidden) * (int64_t(c.num_experts) * c.intermediate + c.shared_intermediate);
    std::vector<std::pair<int64_t, int64_t>> calls;
    ref::LayerWeights with;
    {
      const detail::ScopedKnob<int> threads(&detail::Knobs::threads, 3);
      with = ref::make_random_layer(c, seed, [&](int64_t done, int64_t all) {
        calls.emplace_back(done, all);
      });
    }
    // One call per expert matrix: E for w13, E for w2, one each for the shared pair.
    ASSERT_EQ(calls.size(), size_t(2 * c.num_experts + 2)) << precision_name(p);
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(calls[i].second, total);
      if (i > 0) {
        EXPECT_GT(calls[i].first, calls[i - 1].first);
      }
    }
    EXPECT_EQ(calls.back().first, total);
    // The same seed gives the same weights with or without a callback, on 1 or 3 threads.
    const detail::ScopedKnob<int> one(&detail::Knobs::threads, 1);
    EXPECT_TRUE(same_layer(with, ref::make_random_layer(c, seed))) << precision_name(p);
  }
}

TEST(WeightProgress, ProjectionCodesDoNotDependOnTheSlabs) {
  // The codes are drawn per 8-code word of the whole tensor: reports every 8000 codes (slab
  // edges inside experts and rows, a partial last slab) must give the codes of one pass.
  cli::ProjectionShape s{};
  s.E = 3;
  s.N = 130;
  s.K = 136;
  s.k = 1;
  const int64_t n = int64_t(s.E) * s.N * s.K, per = 8000;
  std::vector<int64_t> done;
  const uint64_t seed = test::run_seed();
  const ref::WeightSet sliced = cli::random_fp8_weights(s, seed, [&](int64_t d, int64_t all) {
    EXPECT_EQ(all, n);
    done.push_back(d);
  }, per);
  ASSERT_EQ(done.size(), size_t((n + per - 1) / per));
  for (size_t i = 0; i < done.size(); ++i)
    EXPECT_EQ(done[i], std::min(n, int64_t(i + 1) * per));
  const ref::WeightSet whole = cli::random_fp8_weights(s, seed);
  EXPECT_TRUE(same_weights(sliced, whole));
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t code = uint8_t(ref::hash3(seed, cli::kStreamCodes, uint64_t(i / 8)) >> (8 * (i % 8)));
    ASSERT_EQ(sliced.q[size_t(i)], (code & 0x7F) == 0x7F ? uint8_t(code ^ 1) : code) << "code " << i;
  }
  test::expect_error([&] { cli::random_fp8_weights(s, seed, {}, 12); }, "multiple of 8");
}

// ProgressLine against a clock the test moves.
struct FakeClock {
  double now = 100.0;
};

std::string read_all(std::FILE* f) {
  std::rewind(f);
  std::string s;
  char buf[256];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) s.append(buf, n);
  return s;
}

int count_lines(const std::string& s) {
  int n = 0;
  for (const char c : s) n += c == '\n';
  return n;
}

TEST(ProgressLine, PrintsAtMostOneLinePerInterval) {
  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  FakeClock clock;
  cli::ProgressLine line("weights  ", 2.0, out, [&] { return clock.now; });
  // 10 s of work reported 640 times (steps of 1/64 s, exact in binary): lines at 2, 4, 6 and
  // 8 s, none at the end (the caller prints its own summary then).
  for (int i = 1; i <= 640; ++i) {
    clock.now = 100.0 + i / 64.0;
    line(i, 640);
  }
  const std::string text = read_all(out);
  std::fclose(out);
  EXPECT_EQ(line.lines(), 4) << text;
  EXPECT_EQ(count_lines(text), 4) << text;
  EXPECT_EQ(text.rfind("  weights  : 20% after 2 s, about 8 s left\n", 0), 0u) << text;
  EXPECT_NE(text.find("  weights  : 80% after 8 s, about 2 s left\n"), std::string::npos) << text;
}

TEST(ProgressLine, EstimatesTheRestFromTheRateSinceTheFirstReport) {
  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  FakeClock clock;
  cli::ProgressLine line("weights  ", 2.0, out, [&] { return clock.now; });
  clock.now += 19;  // a large allocation before the first unit of work
  line(1, 100);     // no rate yet: no estimate
  clock.now += 1;
  line(2, 100);     // 1 s after the last line: silent
  clock.now += 2;
  line(4, 100);     // 1 unit per second since the first report: 96 s left, not 19 * 24
  EXPECT_EQ(read_all(out), "  weights  : 1% after 19 s\n"
                           "  weights  : 4% after 22 s, about 96 s left\n");
  std::fclose(out);
}

TEST(ProgressLine, BytesShowAmountsAndTheRate) {
  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  FakeClock clock;
  cli::ProgressLine line("reading  ", 2.0, out, [&] { return clock.now; });
  line.in_bytes();
  line(0, 3400000000);  // the first report: the rate is measured from here
  clock.now += 2;
  line(1200000000, 3400000000);  // 0.6 GB/s: 2.2 GB in about 4 s
  clock.now += 2;
  line(1800000000, 3400000000);  // 0.45 GB/s since the first report
  clock.now += 2;
  line(3400000000, 3400000000);  // done: the caller prints the summary
  // Percentages are floored (52.9% reads 52%): a line while work remains never reads 100%.
  EXPECT_EQ(read_all(out), "  reading  : 1.20 GB of 3.40 GB (35%) after 2 s, 600.0 MB/s, about 4 s left\n"
                           "  reading  : 1.80 GB of 3.40 GB (52%) after 4 s, 450.0 MB/s, about 4 s left\n");
  std::fclose(out);
  EXPECT_EQ(cli::ProgressLine::amount(5.12e8), "512.0 MB");
  EXPECT_EQ(cli::ProgressLine::amount(3.4e9), "3.40 GB");
}

TEST(ProgressLine, SilentForAShortStep) {
  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  FakeClock clock;
  cli::ProgressLine line("weights  ", 2.0, out, [&] { return clock.now; });
  for (int i = 1; i <= 10; ++i) {
    clock.now += 0.19;
    line(i, 10);
  }
  EXPECT_EQ(line.lines(), 0);
  EXPECT_EQ(read_all(out), "");
  std::fclose(out);
}

}  // namespace
}  // namespace fusedmoe

// Build (with docs/wip/cluster_multicast.diff's src/gemm/cluster_walk.hpp extracted under /tmp/clw/src):
//   g++ -std=c++17 -O2 -I/tmp/clw/src -Isrc -Iinclude -I. -I/usr/local/cuda/include docs/wip/cluster_walk_count.cpp \
//     build/libfusedmoe_ref.a build/libfusedmoe.a -L/usr/local/cuda/lib64 -lcudart -lpthread -o /tmp/clw/walk
//   /tmp/clw/walk deepseek-v3 8192
// Session 35: what the 2-CTA cluster walk (cluster_walk.hpp) hands its CTA slots under the bench's
// routing (bench/layer.cpp: logits and the seeded correction bias, seed 1), against the base walk.
#include <cstdio>
#include <vector>
#include <algorithm>
#include "fusedmoe/config.hpp"
#include "ref/ref.hpp"
#include "ref/random.hpp"
#include "gemm/cluster_walk.hpp"
using namespace fusedmoe;
namespace cw = fusedmoe::detail::cluster_walk;
int main(int argc, char** argv) {
  const char* preset = argc > 1 ? argv[1] : "deepseek-v3";
  const int T = argc > 2 ? atoi(argv[2]) : 8192;
  const MoeConfig& c = find_preset(preset);
  const int E = c.num_experts, k = c.top_k;
  std::vector<float> logits(size_t(T) * E);
  ref::fill_uniform(logits.data(), int64_t(logits.size()), 1, 0x6C, 3.0f);
  std::vector<float> bias;
  if (c.routing.correction_bias) bias = ref::random_bf16(E, 1, 0x135, 0.05f);
  if (c.routing.router_bias) bias = ref::random_bf16(E, 1, 0x135, 0.5f);
  const ref::Routing r = ref::route(c.routing, logits.data(), T, E, k, bias.empty() ? nullptr : bias.data());
  std::vector<int> counts(E, 0);
  for (int id : r.ids) counts[id]++;
  for (int s = 0; s < c.num_shared_experts; ++s) counts.push_back(T);  // shared chunks: every token
  const int nb = 2 * c.intermediate / 256;  // two-wave weight tiles of the gate/up
  long rounds = 0, mc = 0, half_slots = 0, full_slots = 0, useful_rows = 0, hit = 0;
  long base_full = 0, base_half = 0;
  for (int cnt : counts) {
    if (!cnt) continue;
    ++hit;
    useful_rows += long(cnt) * nb;
    const int n = cw::rounds(cnt, nb);
    rounds += n;
    for (int l = 0; l < n; ++l) {
      const cw::Round rd = cw::round(l, cnt, nb);
      mc += rd.multicast;
      for (auto& w : rd.w) (w.height == 128 ? full_slots : half_slots)++;
    }
    const int m = (cnt + 127) / 128, tail = cnt % 128;
    base_full += long(nb) * (tail > 0 && tail <= 64 ? m - 1 : m);
    base_half += (tail > 0 && tail <= 64) ? nb : 0;  // run as interleaved pairs: nb/2 slots
  }
  const double cl_slots = 2.0 * rounds, base_slots = base_full + base_half / 2.0;
  std::printf("%s T=%d: %ld experts hit (of %zu incl. shared), nb=%d, routes/hit %.1f\n", preset, T, hit,
              counts.size(), nb, double(useful_rows) / nb / hit);
  std::printf("cluster: %ld rounds (%ld multicast = %.1f%%), CTA slots %.0f: full %ld, half %ld; "
              "rows per slot %.1f of 128\n", rounds, mc, 100.0 * mc / rounds, cl_slots, full_slots,
              half_slots, useful_rows / cl_slots);
  std::printf("base: tile slots %.0f (full %ld + half pairs %.0f); rows per slot %.1f of 128\n",
              base_slots, base_full, base_half / 2.0, useful_rows / base_slots);
  std::printf("slots cluster / base %.3f; per SM (132): cluster %.1f, base %.1f\n", cl_slots / base_slots,
              cl_slots / 132, base_slots / 132);
}

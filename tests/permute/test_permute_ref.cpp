// Permutation reference checked by its invariants (not against another implementation).
#include <algorithm>

#include "ref/ref.hpp"
#include "tests/test_util.hpp"

using namespace fusedmoe;

namespace {

void check_invariants(const std::vector<int32_t>& ids, int T, int k, int E, uint64_t seed) {
  const ref::Permutation p = ref::permute(ids.data(), T, k, E);
  const int R = T * k;
  ASSERT_EQ(int(p.counts.size()), E);
  ASSERT_EQ(int(p.offsets.size()), E + 1);
  ASSERT_EQ(p.offsets[0], 0);
  ASSERT_EQ(p.offsets[size_t(E)], R) << "seed " << seed;
  std::vector<int> seen(size_t(R), 0);
  for (int e = 0; e < E; ++e) {
    ASSERT_EQ(p.offsets[size_t(e) + 1] - p.offsets[size_t(e)], p.counts[size_t(e)]);
    int expect = 0;
    for (int r = 0; r < R; ++r) expect += ids[size_t(r)] == e;
    ASSERT_EQ(p.counts[size_t(e)], expect) << "expert " << e << " seed " << seed;
    for (int s = p.offsets[size_t(e)]; s < p.offsets[size_t(e) + 1]; ++s) {
      const int route = p.sorted_route_ids[size_t(s)];
      ASSERT_EQ(ids[size_t(route)], e) << "slot " << s << " holds a route of another expert";
      ASSERT_EQ(p.route_slot[size_t(route)], s);
      if (s > p.offsets[size_t(e)]) {
        ASSERT_LT(p.sorted_route_ids[size_t(s) - 1], route);
      }
      ++seen[size_t(route)];
    }
  }
  for (int r = 0; r < R; ++r) ASSERT_EQ(seen[size_t(r)], 1) << "route " << r;
}

}  // namespace

TEST(PermuteRef, Invariants) {
  struct C { int T, k, E; };
  for (const C c : {C{0, 8, 256}, C{1, 8, 256}, C{2, 1, 8}, C{7, 4, 8}, C{128, 8, 256},
                    C{1000, 8, 384}, C{300, 16, 512}})
    for (uint64_t seed : test::seeds_for(test::hash_ints({c.T, c.k, c.E}))) {
      ref::Rng rng(seed);
      std::vector<int32_t> ids(size_t(c.T) * c.k);
      // Distinct experts per token, as routing produces.
      for (int t = 0; t < c.T; ++t)
        for (int j = 0; j < c.k; ++j) {
          int e;
          do {
            e = rng.below(c.E);
          } while (std::find(ids.begin() + t * c.k, ids.begin() + t * c.k + j, e) !=
                   ids.begin() + t * c.k + j);
          ids[size_t(t * c.k + j)] = e;
        }
      check_invariants(ids, c.T, c.k, c.E, seed);
    }
}

TEST(PermuteRef, AllTokensToOneExpertAndEmptyExperts) {
  const int T = 64, k = 1, E = 32;
  std::vector<int32_t> ids(size_t(T), 5);
  check_invariants(ids, T, k, E, 0);
  const ref::Permutation p = ref::permute(ids.data(), T, k, E);
  EXPECT_EQ(p.counts[5], T);
  for (int e = 0; e < E; ++e)
    if (e != 5) {
      EXPECT_EQ(p.counts[size_t(e)], 0);
    }
}

TEST(PermuteRef, RejectsOutOfRangeIds) {
  std::vector<int32_t> ids = {0, 1, 8};
  test::expect_error([&] { ref::permute(ids.data(), 3, 1, 8); }, "expert id 8, valid [0, 8)");
  ids[2] = -1;
  test::expect_error([&] { ref::permute(ids.data(), 3, 1, 8); }, "expert id -1");
}

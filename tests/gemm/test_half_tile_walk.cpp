// The tile walk's order for an expert with a half-height tail (src/gemm/half_tile_walk.hpp, used
// by the grouped GEMM's TileScheduler), on the CPU: every (weight tile, token tile) handed out
// exactly once, a pair item holding the two tails of weight tiles 2j and 2j + 1 between their full
// tiles, the plain order without a half tail, and which experts have one.
#include <gtest/gtest.h>

#include <vector>

#include "gemm/half_tile_walk.hpp"

namespace hw = fusedmoe::detail::half_walk;

TEST(HalfTileWalk, WhichExpertsHaveAHalfTail) {
  for (int count = 0; count <= 400; ++count) {
    const int tiles = (count + 127) / 128;
    const int tail = count % 128;
    EXPECT_EQ(hw::has_half_tail(count, tiles, 128, true), tail > 0 && tail <= 64) << count;
    EXPECT_FALSE(hw::has_half_tail(count, tiles, 128, false)) << count;
    // With static tiles the walk's dynamic part lacks tile 0: one tile of routes has none there.
    EXPECT_EQ(hw::has_half_tail(count, tiles - 1, 128, true), tiles > 1 && tail > 0 && tail <= 64) << count;
  }
}

TEST(HalfTileWalk, EveryTileOnceAndPairsBetweenTheirFullTiles) {
  for (int nb = 1; nb <= 9; ++nb)
    for (int tiles = 1; tiles <= 6; ++tiles)
      for (bool half : {false, true}) {
        const int n = hw::items(tiles, nb, half);
        std::vector<int> seen(size_t(nb) * tiles, 0);
        std::vector<int> pair_at(size_t(nb), -1);  // item index of the pair holding wb's tail
        std::vector<int> last_full(size_t(nb), -1), first_full(size_t(nb), n);
        int pairs = 0, prev_wb = 0;
        for (int local = 0; local < n; ++local) {
          const hw::Item it = hw::item(local, tiles, nb, half);
          const std::string ctx = "nb=" + std::to_string(nb) + " tiles=" + std::to_string(tiles) +
                                  " half=" + std::to_string(half) + " item " + std::to_string(local);
          ASSERT_GE(it.wb, 0) << ctx;
          ASSERT_LT(it.wb + it.pair, nb) << ctx;
          ASSERT_GE(it.tb, 0) << ctx;
          ASSERT_LT(it.tb, tiles) << ctx;
          EXPECT_GE(it.wb, prev_wb) << ctx << ": weight tiles out of order";
          prev_wb = it.wb;
          if (!half) {
            EXPECT_EQ(it.wb, local / tiles) << ctx;
            EXPECT_EQ(it.tb, local % tiles) << ctx;
            EXPECT_EQ(it.pair, 0) << ctx;
          }
          if (it.pair) {
            ++pairs;
            EXPECT_EQ(it.wb % 2, 0) << ctx;
            EXPECT_EQ(it.tb, tiles - 1) << ctx << ": a pair holds the tails";
            ++seen[size_t(it.wb + 1) * tiles + it.tb];
            pair_at[size_t(it.wb)] = pair_at[size_t(it.wb + 1)] = local;
          } else if (!(half && it.tb == tiles - 1)) {
            last_full[size_t(it.wb)] = std::max(last_full[size_t(it.wb)], local);
            first_full[size_t(it.wb)] = std::min(first_full[size_t(it.wb)], local);
          }
          ++seen[size_t(it.wb) * tiles + it.tb];
        }
        for (size_t i = 0; i < seen.size(); ++i)
          EXPECT_EQ(seen[i], 1) << "nb=" << nb << " tiles=" << tiles << " half=" << half
                                << ": tile (" << i / tiles << ", " << i % tiles << ") handed out " << seen[i] << " times";
        EXPECT_EQ(pairs, half ? nb / 2 : 0) << "nb=" << nb << " tiles=" << tiles;
        if (!half) continue;
        for (int j = 0; 2 * j + 1 < nb; ++j) {
          // The pair item runs next to both weight tiles' full tiles: after 2j's, before 2j + 1's.
          EXPECT_GT(pair_at[size_t(2 * j)], last_full[size_t(2 * j)]) << "nb=" << nb << " tiles=" << tiles << " j=" << j;
          EXPECT_LT(pair_at[size_t(2 * j)], first_full[size_t(2 * j + 1)]) << "nb=" << nb << " tiles=" << tiles << " j=" << j;
        }
      }
}

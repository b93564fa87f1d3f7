// The order in which the grouped GEMM's tile walk hands out one expert's tiles when its last
// token tile is a half-height tail (HalfTile, sm90_gemm_scheduler.cuh): plain integer functions,
// shared by the GPU walk and its CPU test (tests/gemm/test_half_tile_walk.cpp).
//
// An expert with `tiles` token tiles (in the walk's dynamic part) and nb weight tiles has, per two
// weight tiles 2j, 2j + 1: the tiles - 1 full tiles of 2j, one pair item (both tails, k-blocks
// interleaved), the tiles - 1 full tiles of 2j + 1; an odd last weight tile keeps its `tiles`
// tiles, its tail alone. Without a half tail: nb * tiles items, token tiles innermost.
#pragma once

#if defined(__CUDACC__)
#define FMOE_WALK_HD __host__ __device__ __forceinline__
#else
#define FMOE_WALK_HD inline
#endif

namespace fusedmoe::detail::half_walk {

// Whether an expert of `count` routes has a half tail among its `tiles` dynamic token tiles (the
// tail's routes fit half of block_t; `on`: the config runs half tiles and the knob allows them).
FMOE_WALK_HD bool has_half_tail(int count, int tiles, int block_t, bool on) {
  const int tail = count % block_t;
  return on && tiles > 0 && tail > 0 && tail <= block_t / 2;
}

// Work items of the expert.
FMOE_WALK_HD int items(int tiles, int nb, bool half_tail) {
  return half_tail ? nb / 2 * (2 * tiles - 1) + nb % 2 * tiles : nb * tiles;
}

// Item `local` of the expert: weight tile, token tile (of the dynamic part), and whether it is a
// pair (weight tiles wb and wb + 1, the tail tb = tiles - 1).
struct Item {
  int wb, tb, pair;
};
FMOE_WALK_HD Item item(int local, int tiles, int nb, bool half_tail) {
  if (!half_tail) return {local / tiles, local % tiles, 0};
  const int group = 2 * tiles - 1, pairs = nb / 2;
  const int j = local / group, r = local % group;
  if (j >= pairs) return {nb - 1, local - pairs * group, 0};  // an odd last weight tile
  if (r < tiles - 1) return {2 * j, r, 0};                     // 2j's full tiles
  if (r == tiles - 1) return {2 * j, r, 1};                    // the pair
  return {2 * j + 1, r - tiles, 0};                            // 2j + 1's full tiles
}

}  // namespace fusedmoe::detail::half_walk

#undef FMOE_WALK_HD

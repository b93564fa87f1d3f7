// The status words every pipeline keeps at the start of its workspace: zeroed by the first stage
// of each call, counted into by the stages that drop a route.
#pragma once

namespace fusedmoe::detail {

enum StatusWord : int {
  kStatusDropped = 0,  ///< routes dropped (expert id out of range, or repeated within a token)
  kStatusDone = 1,     ///< the schedule kernel's done-CTA counter
  kStatusUpItems = 2,    ///< the gate/up GEMM's next work item (dynamic fetching), reset by its last CTA
  kStatusUpDone = 3,     ///< the gate/up GEMM's CTAs done fetching
  kStatusDownItems = 4,  ///< the same two words for the down GEMM
  kStatusDownDone = 5,
  kStatusWords = 6,
};

}  // namespace fusedmoe::detail

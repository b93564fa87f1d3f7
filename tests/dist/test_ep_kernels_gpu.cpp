// The expert-parallel kernels (src/dist/sm90_ep_kernels.cuh) against the host plan
// (src/dist/ep_plan.hpp), bit for bit: the dispatch (counts, rows, inverse maps, packed bytes,
// counters) on random routings with bad and repeated ids, overflow past cap, empty ranks, T = 0
// and 1 and several scan tiles; the receive on chunks made from R sources' host plans, with
// corrupt counts and slots; the return of the local layer's rows to their slots; both combines
// on values whose sums are exact, so the host plan's double sums are the fp32 ones.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>

#include "common/device_buffer.hpp"
#include "dist/ep_kernels.hpp"
#include "dist/ep_plan.hpp"
#include "fusedmoe/formats.hpp"
#include "tests/test_util.hpp"

using namespace fusedmoe;
using detail::DispatchPlan;
using detail::EpCounters;
using detail::EpRowLayout;
using detail::ExpertPartition;
using detail::ReceivePlan;

namespace {

constexpr uint8_t kPoison = 0xAB;

detail::EpPartitionArgs part_args(int E, int R) { return {E, R, E / R, E % R}; }

// Random ids [T, k]: distinct valid ids, bad ids and repeats at `bad_rate`; `only_rank0` keeps
// every valid id on rank 0's experts (the other ranks get nothing). Weights are random floats.
void random_routes(ref::Rng& rng, int T, int k, int E, int rank0_count, float bad_rate,
                   bool only_rank0, std::vector<int32_t>& ids, std::vector<float>& w) {
  ids.assign(size_t(T) * k, 0);
  w.assign(size_t(T) * k, 0.0f);
  const int32_t bad[] = {-1, E, E + 5, INT32_MIN, INT32_MAX};
  const int range = only_rank0 ? rank0_count : E;
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < k; ++j) {
      int32_t e;
      if (rng.uniform() < bad_rate || j >= range) {  // more choices than rank 0's experts: repeats
        e = j > 0 && rng.below(2) ? ids[size_t(t) * k + size_t(rng.below(j))] : bad[rng.below(5)];
      } else {
        do {
          e = rng.below(range);
        } while (std::find(ids.begin() + ptrdiff_t(t) * k, ids.begin() + ptrdiff_t(t) * k + j, e) !=
                 ids.begin() + ptrdiff_t(t) * k + j);
      }
      ids[size_t(t) * k + j] = e;
      w[size_t(t) * k + j] = rng.uniform() - 0.25f;
    }
}

std::vector<uint8_t> random_bytes(ref::Rng& rng, size_t n) {
  std::vector<uint8_t> b(n);
  for (uint8_t& v : b) v = uint8_t(rng.below(256));
  return b;
}

template <class T>
T read_at(const std::vector<uint8_t>& bytes, size_t offset) {
  T v;
  std::memcpy(&v, bytes.data() + offset, sizeof(T));
  return v;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

struct DispatchCase {
  int E, R, T, k, cap, source;
  int64_t payload_bytes;
  float bad_rate;
  bool only_rank0;
  std::string describe() const {
    return strf("E=%d R=%d T=%d k=%d cap=%d source=%d payload=%lld bad=%.2f rank0_only=%d", E, R,
                T, k, cap, source, (long long)payload_bytes, double(bad_rate), int(only_rank0));
  }
};

void check_dispatch(const DispatchCase& c, uint64_t seed) {
  const std::string ctx = c.describe() + strf(" seed %llu", (unsigned long long)seed);
  ref::Rng rng(seed);
  const ExpertPartition part(c.E, c.R);
  std::vector<int32_t> ids;
  std::vector<float> w;
  random_routes(rng, c.T, c.k, c.E, part.count(0), c.bad_rate, c.only_rank0, ids, w);
  const std::vector<uint8_t> x = random_bytes(rng, size_t(c.T) * size_t(c.payload_bytes));
  const DispatchPlan plan = detail::plan_dispatch(ids.data(), w.data(), c.T, c.k, part, c.source, c.cap);

  const EpRowLayout row = detail::ep_row_layout(c.payload_bytes, c.k);
  const size_t rows = size_t(c.R) * size_t(c.cap);
  DeviceBuffer d_ids = DeviceBuffer::from(ids), d_w = DeviceBuffer::from(w), d_x = DeviceBuffer::from(x);
  auto poisoned = [](size_t bytes) {
    DeviceBuffer b(std::max<size_t>(bytes, 16));
    b.fill(kPoison);
    return b;
  };
  DeviceBuffer route_dest = poisoned(size_t(c.T) * c.k * 4), goes_to = poisoned(size_t(c.T) * c.R * 4),
               token_row = poisoned(size_t(c.T) * c.R * 4), route_row = poisoned(size_t(c.T) * c.k * 4),
               row_token = poisoned(rows * 4), send_counts = poisoned(size_t(c.R) * 4),
               send = poisoned(rows * size_t(row.row_bytes)), counters = poisoned(sizeof(EpCounters));
  detail::EpDispatchParams p;
  p.part = part_args(c.E, c.R);
  p.T = c.T;
  p.k = c.k;
  p.cap = c.cap;
  p.source_rank = c.source;
  p.topk_ids = d_ids.get<int32_t>();
  p.topk_weights = d_w.get<float>();
  p.x = d_x.get<uint8_t>();
  p.x_ld_bytes = c.payload_bytes;
  p.row = row;
  p.route_dest = route_dest.get<int32_t>();
  p.goes_to = goes_to.get<int32_t>();
  p.token_row = token_row.get<int32_t>();
  p.route_row = route_row.get<int32_t>();
  p.row_token = row_token.get<int32_t>();
  p.send_counts = send_counts.get<int32_t>();
  p.send = send.get<uint8_t>();
  p.counters = counters.get<EpCounters>();
  detail::launch_ep_dispatch(p, nullptr);
  FMOE_CUDA(cudaDeviceSynchronize());

  const std::vector<int32_t> got_counts = send_counts.to_host<int32_t>();
  for (int d = 0; d < c.R; ++d) ASSERT_EQ(got_counts[size_t(d)], plan.send_counts[size_t(d)]) << ctx << " rank " << d;
  if (c.T > 0) {
    std::vector<int32_t> got_token_row = token_row.to_host<int32_t>(), got_route_row = route_row.to_host<int32_t>();
    got_token_row.resize(plan.token_row.size());
    got_route_row.resize(plan.route_row.size());
    EXPECT_EQ(got_token_row, plan.token_row) << ctx;
    EXPECT_EQ(got_route_row, plan.route_row) << ctx;
  }
  EpCounters cnt;
  FMOE_CUDA(cudaMemcpy(&cnt, counters.get(), sizeof(cnt), cudaMemcpyDeviceToHost));
  EXPECT_EQ(int64_t(cnt.dropped_routes), plan.dropped_routes) << ctx;
  EXPECT_EQ(int64_t(cnt.overflow_rows), plan.overflow_rows) << ctx;
  EXPECT_EQ(int64_t(cnt.overflow_routes), plan.overflow_routes) << ctx;

  // Rows below the counts: the plan's token, its payload and slots, zero tail; rows past them
  // untouched (the contract: nothing written past a chunk's count).
  const std::vector<int32_t> got_row_token = row_token.to_host<int32_t>();
  const std::vector<uint8_t> got_send = send.to_host<uint8_t>();
  int32_t poison_i32;
  std::memset(&poison_i32, kPoison, 4);
  for (int d = 0; d < c.R; ++d)
    for (int i = 0; i < c.cap; ++i) {
      const size_t slot = size_t(d) * c.cap + size_t(i);
      const uint8_t* r = got_send.data() + slot * size_t(row.row_bytes);
      if (i >= plan.send_counts[size_t(d)]) {
        ASSERT_EQ(got_row_token[slot], poison_i32) << ctx << " slot " << slot << " written past the count";
        for (int64_t b = 0; b < row.row_bytes; ++b)
          ASSERT_EQ(r[b], kPoison) << ctx << " slot " << slot << " byte " << b << " written past the count";
        continue;
      }
      const int t = plan.row_token[slot];
      ASSERT_EQ(got_row_token[slot], t) << ctx << " slot " << slot;
      ASSERT_EQ(0, std::memcmp(r, x.data() + size_t(t) * size_t(c.payload_bytes), size_t(c.payload_bytes)))
          << ctx << " slot " << slot << ": payload";
      for (int j = 0; j < c.k; ++j) {
        ASSERT_EQ(read_at<int32_t>(got_send, slot * size_t(row.row_bytes) + size_t(row.ids_offset) + 4 * size_t(j)),
                  plan.row_local_ids[slot * c.k + size_t(j)]) << ctx << " slot " << slot << " choice " << j;
        ASSERT_EQ(bits(read_at<float>(got_send, slot * size_t(row.row_bytes) + size_t(row.weights_offset) + 4 * size_t(j))),
                  bits(plan.row_weights[slot * c.k + size_t(j)])) << ctx << " slot " << slot << " choice " << j;
      }
      for (int64_t b = row.weights_offset + 4 * c.k; b < row.row_bytes; ++b) ASSERT_EQ(r[b], 0) << ctx;
    }
}

}  // namespace

TEST(EpKernelsGpu, DispatchMatchesThePlan) {
  FMOE_SKIP_WITHOUT_GPU();
  struct Shape { int E, R; };
  const Shape shapes[] = {{8, 1}, {8, 2}, {10, 3}, {16, 4}, {5, 5}, {64, 8}};
  for (const Shape& s : shapes)
    for (int T : {0, 1, 5, 37, 300, 600})  // 300, 600: several 256-token scan tiles
      for (int k : {1, 2, 4, 8}) {
        if (k > s.E) continue;
        for (int cap : {T, T / 3 + 1, 1, 0}) {  // cap 0: every row overflows
          for (float bad : {0.0f, 0.2f})
            for (bool rank0 : {false, true}) {
              const DispatchCase c{s.E, s.R, T, k, cap, int(T % s.R), k == 2 ? 48 : 64, bad, rank0};
              for (uint64_t seed : test::seeds_for(test::hash_ints({s.E, s.R, T, k, cap, int(bad * 10), rank0}))) {
                check_dispatch(c, seed);
                if (testing::Test::HasFatalFailure()) return;
              }
            }
        }
      }
}

namespace {

struct ReceiveCase {
  int E, R, dest, k, cap, T;
  bool corrupt;  // counts outside [0, cap] and bad slots
  std::string describe() const {
    return strf("E=%d R=%d dest=%d k=%d cap=%d T=%d corrupt=%d", E, R, dest, k, cap, T, int(corrupt));
  }
};

// The chunks R sources would send to `dest`, from their host plans, plus garbage past the counts.
struct Arrived {
  std::vector<int32_t> counts;        // [R]
  std::vector<uint8_t> rows;          // [R * cap, row_bytes]
  std::vector<int32_t> ids;           // [R * cap, k]: the slots as the rows hold them
  std::vector<float> weights;         // [R * cap, k]
};

Arrived make_arrived(const ReceiveCase& c, const EpRowLayout& row, ref::Rng& rng) {
  const ExpertPartition part(c.E, c.R);
  const size_t rows = size_t(c.R) * c.cap;
  Arrived a;
  a.counts.assign(size_t(c.R), 0);
  a.rows = random_bytes(rng, rows * size_t(row.row_bytes));  // garbage everywhere first
  for (int s = 0; s < c.R; ++s) {
    std::vector<int32_t> ids;
    std::vector<float> w;
    random_routes(rng, c.T, c.k, c.E, part.count(0), 0.1f, false, ids, w);
    const DispatchPlan p = detail::plan_dispatch(ids.data(), w.data(), c.T, c.k, part, s, c.cap);
    a.counts[size_t(s)] = p.send_counts[size_t(c.dest)];
    for (int i = 0; i < a.counts[size_t(s)]; ++i) {
      const size_t from = size_t(c.dest) * c.cap + size_t(i), to = size_t(s) * c.cap + size_t(i);
      uint8_t* r = a.rows.data() + to * size_t(row.row_bytes);
      std::memcpy(r + row.ids_offset, p.row_local_ids.data() + from * c.k, 4 * size_t(c.k));
      std::memcpy(r + row.weights_offset, p.row_weights.data() + from * c.k, 4 * size_t(c.k));
    }
  }
  const int E_local = part.count(c.dest);
  if (c.corrupt) {
    const int32_t bad_counts[] = {-3, c.cap + 1, INT32_MAX, INT32_MIN};
    a.counts[size_t(rng.below(c.R))] = bad_counts[rng.below(4)];
    for (size_t slot = 0; slot < rows; ++slot)  // garbage rows past the counts stay garbage
      if (rng.below(4) == 0) {
        const int j = rng.below(c.k);
        const int32_t bad_ids[] = {E_local, -2, INT32_MIN, 0};  // 0 may repeat an earlier slot
        const int32_t v = bad_ids[rng.below(4)];
        std::memcpy(a.rows.data() + slot * size_t(row.row_bytes) + size_t(row.ids_offset) + 4 * size_t(j), &v, 4);
      }
  } else {
    // Rows past the counts hold slots that would be wrong to read: -2 ids.
    for (int s = 0; s < c.R; ++s)
      for (int i = a.counts[size_t(s)]; i < c.cap; ++i)
        for (int j = 0; j < c.k; ++j) {
          const int32_t v = -2;
          std::memcpy(a.rows.data() + (size_t(s) * c.cap + size_t(i)) * size_t(row.row_bytes) +
                          size_t(row.ids_offset) + 4 * size_t(j), &v, 4);
        }
  }
  a.ids.resize(rows * size_t(c.k));
  a.weights.resize(rows * size_t(c.k));
  for (size_t slot = 0; slot < rows; ++slot) {
    std::memcpy(a.ids.data() + slot * c.k, a.rows.data() + slot * size_t(row.row_bytes) + size_t(row.ids_offset), 4 * size_t(c.k));
    std::memcpy(a.weights.data() + slot * c.k, a.rows.data() + slot * size_t(row.row_bytes) + size_t(row.weights_offset), 4 * size_t(c.k));
  }
  return a;
}

struct DeviceReceive {
  DeviceBuffer recv_offsets, row_slot, local_ids, local_weights, x, expert_counts, counters;
};

DeviceReceive run_receive(const ReceiveCase& c, const EpRowLayout& row, const Arrived& a,
                          const DeviceBuffer& d_counts, const DeviceBuffer& d_rows) {
  const size_t rows = size_t(c.R) * c.cap;
  const ExpertPartition part(c.E, c.R);
  auto poisoned = [](size_t bytes) {
    DeviceBuffer b(std::max<size_t>(bytes, 16));
    b.fill(kPoison);
    return b;
  };
  DeviceReceive r{poisoned(size_t(c.R + 1) * 4), poisoned(rows * 4), poisoned(rows * c.k * 4),
                  poisoned(rows * c.k * 4), poisoned(rows * size_t(row.payload_bytes)),
                  poisoned(size_t(part.count(c.dest)) * 4), poisoned(sizeof(EpCounters))};
  detail::EpReceiveParams p;
  p.part = part_args(c.E, c.R);
  p.dest_rank = c.dest;
  p.k = c.k;
  p.cap = c.cap;
  p.row = row;
  p.recv_counts = d_counts.get<int32_t>();
  p.recv = d_rows.get<uint8_t>();
  p.recv_offsets = r.recv_offsets.get<int32_t>();
  p.row_slot = r.row_slot.get<int32_t>();
  p.local_ids = r.local_ids.get<int32_t>();
  p.local_weights = r.local_weights.get<float>();
  p.x = r.x.get<uint8_t>();
  p.x_ld_bytes = row.payload_bytes;
  p.expert_counts = r.expert_counts.get<int32_t>();
  p.counters = r.counters.get<EpCounters>();
  detail::launch_ep_receive(p, nullptr);
  FMOE_CUDA(cudaDeviceSynchronize());
  return r;
}

void check_receive(const ReceiveCase& c, uint64_t seed) {
  const std::string ctx = c.describe() + strf(" seed %llu", (unsigned long long)seed);
  ref::Rng rng(seed);
  const ExpertPartition part(c.E, c.R);
  const EpRowLayout row = detail::ep_row_layout(64, c.k);
  const Arrived a = make_arrived(c, row, rng);
  const ReceivePlan plan = detail::plan_receive(a.counts.data(), a.ids.data(), a.weights.data(),
                                                c.k, part, c.dest, c.cap);
  const DeviceBuffer d_counts = DeviceBuffer::from(a.counts), d_rows = DeviceBuffer::from(a.rows);
  const DeviceReceive r = run_receive(c, row, a, d_counts, d_rows);

  const std::vector<int32_t> offsets = r.recv_offsets.to_host<int32_t>();
  for (int s = 0; s <= c.R; ++s) ASSERT_EQ(offsets[size_t(s)], plan.recv_offsets[size_t(s)]) << ctx << " s " << s;
  const std::vector<int32_t> row_slot = r.row_slot.to_host<int32_t>(), ids = r.local_ids.to_host<int32_t>();
  const std::vector<float> weights = r.local_weights.to_host<float>();
  const std::vector<uint8_t> x = r.x.to_host<uint8_t>();
  const int rows = plan.num_rows();
  for (int q = 0; q < c.R * c.cap; ++q) {
    const size_t pb = size_t(row.payload_bytes);
    if (q >= rows) {  // padding rows: no routes, zero activations
      ASSERT_EQ(row_slot[size_t(q)], -1) << ctx << " row " << q;
      for (int j = 0; j < c.k; ++j) {
        ASSERT_EQ(ids[size_t(q) * c.k + j], -1) << ctx << " row " << q;
        ASSERT_EQ(bits(weights[size_t(q) * c.k + j]), 0u) << ctx << " row " << q;
      }
      for (size_t b = 0; b < pb; ++b) ASSERT_EQ(x[size_t(q) * pb + b], 0) << ctx << " row " << q;
      continue;
    }
    const int32_t slot = plan.row_slot[size_t(q)];
    ASSERT_EQ(row_slot[size_t(q)], slot) << ctx << " row " << q;
    for (int j = 0; j < c.k; ++j) {
      ASSERT_EQ(ids[size_t(q) * c.k + j], plan.local_ids[size_t(q) * c.k + j]) << ctx << " row " << q << " choice " << j;
      ASSERT_EQ(bits(weights[size_t(q) * c.k + j]), bits(plan.local_weights[size_t(q) * c.k + j])) << ctx;
    }
    ASSERT_EQ(0, std::memcmp(x.data() + size_t(q) * pb, a.rows.data() + size_t(slot) * size_t(row.row_bytes), pb))
        << ctx << " row " << q << ": payload";
  }
  const std::vector<int32_t> expert_counts = r.expert_counts.to_host<int32_t>();
  for (int e = 0; e < part.count(c.dest); ++e)
    ASSERT_EQ(expert_counts[size_t(e)], plan.expert_counts[size_t(e)]) << ctx << " local expert " << e;
  EpCounters cnt;
  FMOE_CUDA(cudaMemcpy(&cnt, r.counters.get(), sizeof(cnt), cudaMemcpyDeviceToHost));
  EXPECT_EQ(int64_t(cnt.recv_dropped), plan.dropped_routes) << ctx;
  EXPECT_EQ(int64_t(cnt.recv_clamped), plan.clamped_counts) << ctx;
  EXPECT_EQ(int64_t(cnt.recv_routes), plan.num_routes) << ctx;
}

}  // namespace

TEST(EpKernelsGpu, ReceiveMatchesThePlan) {
  FMOE_SKIP_WITHOUT_GPU();
  struct Shape { int E, R; };
  const Shape shapes[] = {{8, 1}, {8, 2}, {10, 3}, {16, 4}, {64, 8}};
  for (const Shape& s : shapes)
    for (int k : {1, 2, 4}) {
      if (k > s.E / s.R) continue;
      for (int T : {0, 1, 9, 40})
        for (int cap : {0, 1, 7, 40})
          for (bool corrupt : {false, true}) {
            const ReceiveCase c{s.E, s.R, s.R - 1, k, cap, T, corrupt};
            for (uint64_t seed : test::seeds_for(test::hash_ints({s.E, s.R, k, T, cap, corrupt}))) {
              check_receive(c, seed);
              if (testing::Test::HasFatalFailure()) return;
            }
          }
    }
}

namespace {

// A dyadic value m / 64 with |m| < 128: exact in bf16, and sums of up to 32 are exact in fp32,
// so the plan's double sums and the kernel's fp32 sums are the same number.
float dyadic(ref::Rng& rng) { return float(rng.below(255) - 127) / 64.0f; }

void check_return_and_combine(int E, int R, int T, int k, int cap, int H, bool choice, uint64_t seed) {
  const std::string ctx = strf("E=%d R=%d T=%d k=%d cap=%d H=%d %s seed %llu", E, R, T, k, cap, H,
                               choice ? "choice" : "rank", (unsigned long long)seed);
  ref::Rng rng(seed);
  const ExpertPartition part(E, R);
  std::vector<int32_t> ids;
  std::vector<float> w;
  random_routes(rng, T, k, E, part.count(0), 0.1f, false, ids, w);
  const DispatchPlan plan = detail::plan_dispatch(ids.data(), w.data(), T, k, part, 0, cap);
  const size_t rows = size_t(R) * cap, per_row = choice ? size_t(k) : 1;

  // What came back: values where the plan reads, NaN elsewhere (a read there shows in y).
  std::vector<double> back(rows * per_row * size_t(H), 0.0);
  std::vector<float> back_f32(back.size(), std::nanf(""));
  std::vector<uint16_t> back_bf16(back.size(), 0x7FC0);
  for (int t = 0; t < T; ++t) {
    if (choice) {
      for (int j = 0; j < k; ++j) {
        const int32_t slot = plan.route_row[size_t(t) * k + j];
        if (slot < 0) continue;
        for (int h = 0; h < H; ++h) {
          const size_t at = (size_t(slot) * k + size_t(j)) * H + size_t(h);
          back_f32[at] = dyadic(rng);
          back[at] = back_f32[at];
        }
      }
    } else {
      for (int d = 0; d < R; ++d) {
        const int32_t i = plan.token_row[size_t(t) * R + d];
        if (i < 0) continue;
        for (int h = 0; h < H; ++h) {
          const size_t at = (size_t(d) * cap + size_t(i)) * H + size_t(h);
          const float v = dyadic(rng);
          back_bf16[at] = fmt::bf16_from_float(v);
          back[at] = v;
        }
      }
    }
  }
  std::vector<double> want(size_t(T) * H);
  if (choice) detail::combine_choice_order(plan, back.data(), H, want.data());
  else detail::combine_rank_order(plan, back.data(), H, want.data());

  DeviceBuffer d_ret = choice ? DeviceBuffer::from(back_f32) : DeviceBuffer::from(back_bf16);
  DeviceBuffer d_token_row = DeviceBuffer::from(plan.token_row), d_route_row = DeviceBuffer::from(plan.route_row);
  DeviceBuffer d_y(std::max<size_t>(size_t(T) * H * 2, 16));
  d_y.fill(0xFF);
  detail::EpCombineParams p;
  p.T = T;
  p.R = R;
  p.k = k;
  p.cap = cap;
  p.H = H;
  p.choice_order = choice;
  p.token_row = d_token_row.get<int32_t>();
  p.route_row = d_route_row.get<int32_t>();
  p.ret = d_ret.get();
  p.y = d_y.get<__nv_bfloat16>();
  p.ldy = H;
  detail::launch_ep_combine(p, nullptr);
  FMOE_CUDA(cudaDeviceSynchronize());
  const std::vector<uint16_t> y = d_y.to_host<uint16_t>();
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_EQ(y[i], fmt::bf16_from_float(float(want[i])))
        << ctx << " token " << i / size_t(H) << " column " << i % size_t(H) << " want " << want[i];
}

}  // namespace

TEST(EpKernelsGpu, CombineMatchesThePlan) {
  FMOE_SKIP_WITHOUT_GPU();
  for (bool choice : {false, true})
    for (int R : {1, 2, 4})
      for (int T : {0, 1, 7, 100})
        for (int cap : {T, T / 2 + 1}) {
          const int E = 16, k = 4, H = 48;  // six 8-column groups per row
          for (uint64_t seed : test::seeds_for(test::hash_ints({choice, R, T, cap}))) {
            check_return_and_combine(E, R, T, k, cap, H, choice, seed);
            if (testing::Test::HasFatalFailure()) return;
          }
        }
}

namespace {

// The return kernel after a real receive: route rows (choice) or row sums (rank) of the local
// layer land at the rows' slots; nothing else is written.
void check_return(int E, int R, int k, int cap, int T, int H, bool choice, uint64_t seed) {
  const ReceiveCase c{E, R, R - 1, k, cap, T, false};
  const std::string ctx = c.describe() + strf(" H=%d %s seed %llu", H, choice ? "choice" : "rank",
                                              (unsigned long long)seed);
  ref::Rng rng(seed);
  const EpRowLayout row = detail::ep_row_layout(64, k);
  const Arrived a = make_arrived(c, row, rng);
  const DeviceBuffer d_counts = DeviceBuffer::from(a.counts), d_rows = DeviceBuffer::from(a.rows);
  const DeviceReceive r = run_receive(c, row, a, d_counts, d_rows);
  const size_t rows = size_t(R) * cap, per_row = choice ? size_t(k) : 1, eb = choice ? 4 : 2;
  const std::vector<uint8_t> local = random_bytes(rng, rows * per_row * H * eb);
  const DeviceBuffer d_local = DeviceBuffer::from(local);
  DeviceBuffer d_ret(rows * per_row * H * eb);
  d_ret.fill(kPoison);
  detail::EpReturnParams p;
  p.R = R;
  p.k = k;
  p.cap = cap;
  p.H = H;
  p.choice_order = choice;
  p.recv_offsets = r.recv_offsets.get<int32_t>();
  p.row_slot = r.row_slot.get<int32_t>();
  p.local_ids = r.local_ids.get<int32_t>();
  p.local = d_local.get();
  p.ld_local = H;
  p.ret = d_ret.get();
  detail::launch_ep_return(p, nullptr);
  FMOE_CUDA(cudaDeviceSynchronize());

  const std::vector<int32_t> offsets = r.recv_offsets.to_host<int32_t>(), row_slot = r.row_slot.to_host<int32_t>(),
                             ids = r.local_ids.to_host<int32_t>();
  std::vector<uint8_t> want(rows * per_row * H * eb, kPoison);
  const size_t row_bytes = size_t(H) * eb;
  for (int q = 0; q < offsets[size_t(R)]; ++q)
    for (size_t j = 0; j < per_row; ++j) {
      if (choice && ids[size_t(q) * k + j] < 0) continue;
      std::memcpy(want.data() + (size_t(row_slot[size_t(q)]) * per_row + j) * row_bytes,
                  local.data() + (size_t(q) * per_row + j) * row_bytes, row_bytes);
    }
  const std::vector<uint8_t> got = d_ret.to_host<uint8_t>();
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(got[i], want[i]) << ctx << " byte " << i << " (returned row " << i / row_bytes << ")";
}

}  // namespace

TEST(EpKernelsGpu, ReturnPutsRowsAtTheirSlots) {
  FMOE_SKIP_WITHOUT_GPU();
  for (bool choice : {false, true})
    for (int R : {1, 3})
      for (int T : {0, 1, 30})
        for (uint64_t seed : test::seeds_for(test::hash_ints({choice, R, T}))) {
          check_return(12, R, 2, 16, T, 32, choice, seed);
          if (testing::Test::HasFatalFailure()) return;
        }
}

// Small shapes for compute-sanitizer (scripts/gpu_check.sh): every kernel, overflow and
// corruption included, two scan tiles.
TEST(EpKernelsSanitizer, SmallCases) {
  FMOE_SKIP_WITHOUT_GPU();
  check_dispatch({10, 3, 300, 4, 90, 1, 64, 0.2f, false}, 7);
  check_dispatch({8, 2, 1, 2, 1, 0, 48, 0.0f, true}, 8);
  check_receive({10, 3, 2, 2, 7, 9, true}, 9);
  check_return_and_combine(16, 2, 7, 4, 4, 48, true, 10);
  check_return_and_combine(16, 2, 7, 4, 4, 48, false, 11);
  check_return(12, 3, 2, 16, 30, 32, true, 12);
}

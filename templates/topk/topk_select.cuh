// The exact tail select of one row: its top k from the CandidateBuffer, or from re-scored
// keys when the buffer lost some (the exact fallback, counted).
#pragma once
#include "topk/key_tile_loop.cuh"
#include "select/radix_select.cuh"
#include "select/rank_order.cuh"
#include "topk/topk_params.cuh"
#include "topk/topk_smem.cuh"

namespace winnow {

// Selects row r's top k (of its part of the window) into sel: RankKeys, zero after the
// st.selected chosen ones.
template <class C, class S>
__device__ void select_row(const TopkParams& p, const TopkSmem<C>& s, int r, u64* buf, u64* sel) {
  constexpr int K = C::kTopK, KP = next_pow2(C::kTopK);
  RowState& st = s.rows[r];
  const int start = st.start, end = st.end;
  const u32 n_window = u32(end - start);
  if (threadIdx.x == 0) st.selected = 0;
  for (int i = threadIdx.x; i < KP; i += C::kThreads) sel[i] = 0ull;
  __syncthreads();
  auto emit_from = [&](u64 kth) {
    return [&, kth](u64 v) {
      if (v >= kth) sel[atomicAdd(&st.selected, 1u)] = v;
    };
  };
  if (st.overflow) {
    // Exact fallback: the buffer lost keys, so re-score the window for every pass.
    auto rescan = [&](auto f) {
      score_range<C, S>(p, s, start, end, [&](int rr, int key, float sc) {
        if (rr == r) f(rank_key(order_key(sc), key));
      });
    };
    u64 kth = n_window <= u32(K) ? 0ull : radix_kth<C>(s, K, rescan);
    rescan(emit_from(kth));
    if (threadIdx.x == 0) atomicAdd(&p.counters[0], 1u);
  } else {
    const u32 n = st.count;
    auto scan = [&](auto f) {
      for (u32 i = threadIdx.x; i < n; i += C::kThreads) f(buf[i]);
    };
    u64 kth = n <= u32(K) ? 0ull : radix_kth<C>(s, K, scan);
    scan(emit_from(kth));
  }
  __syncthreads();
}

}  // namespace winnow

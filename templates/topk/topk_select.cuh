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
#if WINNOW_FILTER_SEGMENTS  // (defined in topk_kernel.cuh after this header; undefined: 0)
    // The hint keys [0, c0), then each visitor warp's segment (topk_block).
    constexpr int NW = visitor_threads<C>() / 32;
    const u32* segn = s.hist + r * C::kBins;
    const u32 c0 = segn[NW], seg = (u32(C::kCapacity) - c0) / NW;
    auto scan = [&](auto f) {
      for (u32 i = threadIdx.x; i < c0; i += C::kThreads) f(buf[i]);
      for (int w = 0; w < NW; ++w) {
        const u32 nw = segn[w];
        const u64* b = buf + c0 + u32(w) * seg;
        for (u32 i = threadIdx.x; i < nw; i += C::kThreads) f(b[i]);
      }
    };
#else
    auto scan = [&](auto f) {
      for (u32 i = threadIdx.x; i < n; i += C::kThreads) f(buf[i]);
    };
#endif
    u64 kth = n <= u32(K) ? 0ull : radix_kth<C>(s, K, scan);
    scan(emit_from(kth));
  }
  __syncthreads();
}

}  // namespace winnow

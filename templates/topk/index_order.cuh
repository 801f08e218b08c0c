// The fused top-k kernel's index-ordered rows without a sort (index_rank.cuh places them):
// for index order (outputs not sorted by score) this replaces the bitonic sort of
// next_pow2(k) entries, about 25 barriers and 66 passes for k = 2048, by five barriers.
#pragma once
#include "select/index_rank.cuh"
#include "select/rank_order.cuh"
#include "topk/topk_params.cuh"
#include "topk/topk_smem.cuh"
#include "ptx/wgmma_tiles.cuh"

// Index-ordered rows go through the bitmap where the span fits (the default: faster than
// the sort at dsa-prefill 64K); -DWINNOW_INDEX_ORDER_BITMAP=0 (through
// WINNOW_NVRTC_OPTIONS) takes the bitonic sort by index instead. Same outputs, bit for bit.
#ifndef WINNOW_INDEX_ORDER_BITMAP
#define WINNOW_INDEX_ORDER_BITMAP 1
#endif

namespace winnow {

// Writes row r's outputs in ascending key index from the `chosen` RankKeys in sel, when
// the span of their indices fits the key-tile stages (free at this point) as a bitmap and
// a 16-bit count per word (a span of 256K keys in 48 KB); returns false, having written
// nothing, when it does not. Called by the whole CTA; ends with a CTA barrier either way.
// `base` turns a key index into the output index (as write_row computes it).
template <class C>
__device__ bool write_row_in_index_order(const TopkParams& p, const TopkSmem<C>& s, int row,
                                         const u64* sel, u32 chosen, int base) {
  constexpr int K = C::kTopK, WARPS = C::kThreads / 32;
  static_assert(WARPS + 2 <= 256, "the scan's warp totals fit the radix bins");
  static_assert(K <= 0xFFFF, "a word's count of marks below it fits 16 bits");
  const u32 n = min(chosen, u32(K));
  // The radix bins are free after the select.
  const bool placed = index_order_place<C::kThreads>(
      sel, n, reinterpret_cast<u32*>(s.k), layout_of<C>().k_words(), s.radix, [&](u32 slot, u64 v) {
        p.out_indices[row * p.out_indices_stride + slot] = rank_key_index(v) - base;
        if (p.out_scores) p.out_scores[row * p.out_scores_stride + slot] = output_score(v, true, p.negate_scores);
      });
  if (!placed) return false;
  for (int i = int(n) + int(threadIdx.x); i < K; i += C::kThreads) {
    p.out_indices[row * p.out_indices_stride + i] = -1;
    if (p.out_scores) p.out_scores[row * p.out_scores_stride + i] = output_score(0, false, p.negate_scores);
  }
  // On the wgmma path the copy engine (async proxy) rewrites these stages next.
  if constexpr (C::kWgmma) fence_async_smem();
  __syncthreads();
  return true;
}

}  // namespace winnow

// Writing one row's outputs: the chosen RankKeys sorted (by score or by index), as indices
// (relative or absolute, -1 padded) and optional scores.
#pragma once
#include "select/bitonic_sort.cuh"
#include "topk/index_order.cuh"
#include "select/rank_order.cuh"
#include "topk/topk_params.cuh"
#include "topk/topk_smem.cuh"
#include "ptx/wgmma_tiles.cuh"

namespace winnow {

// Sorts the chosen RankKeys of row r (in sel) and writes the row's outputs (index order
// through a bitmap instead where the span fits, unless WINNOW_INDEX_ORDER_BITMAP is 0).
template <class C>
__device__ void write_row(const TopkParams& p, const TopkSmem<C>& s, int r, int row, u64* sel) {
  constexpr int K = C::kTopK, KP = next_pow2(C::kTopK);
  if constexpr (!C::kSorted && WINNOW_INDEX_ORDER_BITMAP) {
    const int base = C::kAbsolute ? -p.key_offset : s.rows[r].origin;  // as below
    if (write_row_in_index_order<C>(p, s, row, sel, s.rows[r].selected, base)) return;
  }
  // The key-tile stages are free now: sort there when the selection fits (each bitonic
  // step is then a shared-memory pass, not a round trip through L2).
  constexpr bool kInShared = long(KP) * 8 <= layout_of<C>().k_words() * 4;
  if constexpr (kInShared) {
    u64* v = reinterpret_cast<u64*>(s.k);
    for (int i = threadIdx.x; i < KP; i += C::kThreads) v[i] = sel[i];
    __syncthreads();
    sel = v;
  }
  sort_desc<C>(sel, KP, !C::kSorted);
  // On the wgmma path the copy engine (async proxy) rewrites these stages next.
  if constexpr (kInShared && C::kWgmma) fence_async_smem();
  const u32 chosen = s.rows[r].selected;
  // Absolute: the global key number (shard offset + local); relative: from the window's
  // start (RowState::origin, in local numbers).
  const int base = C::kAbsolute ? -p.key_offset : s.rows[r].origin;
  for (int i = threadIdx.x; i < K; i += C::kThreads) {
    bool real = u32(i) < chosen;
    u64 v = sel[i];
    p.out_indices[row * p.out_indices_stride + i] = real ? rank_key_index(v) - base : -1;
    if (p.out_scores) p.out_scores[row * p.out_scores_stride + i] = output_score(v, real, p.negate_scores);
  }
  __syncthreads();
}

}  // namespace winnow

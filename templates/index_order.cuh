// Index-ordered outputs without a sort: the chosen keys of a row marked in a bitmap over
// the span of their indices, a count of the marks before each word, and each chosen key
// written straight to its slot (its rank among the chosen by index). For index order
// (outputs not sorted by score) this replaces the bitonic sort of next_pow2(k) entries,
// about 25 barriers and 66 passes for k = 2048, by five barriers.
#pragma once
#include "winnow/cta_scan.cuh"
#include "winnow/rank_order.cuh"
#include "winnow/topk_params.cuh"
#include "winnow/topk_smem.cuh"
#include "winnow/wgmma_tiles.cuh"

// Experiment switch: -DWINNOW_INDEX_ORDER_BITMAP=1 writes index-ordered rows through the
// bitmap (default 0: the bitonic sort by index). Same outputs, bit for bit.
#ifndef WINNOW_INDEX_ORDER_BITMAP
#define WINNOW_INDEX_ORDER_BITMAP 0
#endif

namespace winnow {

// Writes row r's outputs in ascending key index from the `chosen` RankKeys in sel, when
// the span of their indices fits the key-tile stages (free at this point) as a bitmap and
// a 16-bit count per word (a span of 256K keys in 48 KB); returns false, having written nothing, when it does not. Called by
// the whole CTA; ends with a CTA barrier either way. `base` turns a key index into the
// output index (as write_row computes it).
template <class C>
__device__ bool write_row_in_index_order(const TopkParams& p, const TopkSmem<C>& s, int row,
                                         const u64* sel, u32 chosen, int base) {
  constexpr int K = C::kTopK, WARPS = C::kThreads / 32;
  constexpr long long kWords = layout_of<C>().k_words();  // 32-bit words of the stages
  static_assert(WARPS + 2 <= 256, "the scan's warp totals fit the radix bins");
  const u32 n = min(chosen, u32(K));
  // 1. The span [lo, hi] of the chosen indices (the radix bins are free after the select).
  u32* span = s.radix;
  if (threadIdx.x == 0) {
    span[0] = 0xFFFFFFFFu;
    span[1] = 0u;
  }
  __syncthreads();
  u32 lo_t = 0xFFFFFFFFu, hi_t = 0u;
  for (u32 i = threadIdx.x; i < n; i += C::kThreads) {
    const u32 key = u32(rank_key_index(sel[i]));
    lo_t = min(lo_t, key);
    hi_t = max(hi_t, key);
  }
  if (lo_t <= hi_t) {
    atomicMin(&span[0], lo_t);
    atomicMax(&span[1], hi_t);
  }
  __syncthreads();
  const u32 lo = span[0];
  const long long words = n == 0 ? 0 : (static_cast<long long>(span[1] - lo) + 32) / 32;
  static_assert(K <= 0xFFFF, "a word's count of marks below it fits 16 bits");
  if (words + (words + 1) / 2 > kWords) {
    __syncthreads();  // span is read before a later step rewrites the bins
    return false;
  }
  // 2. The bitmap, then the marks of the chosen keys.
  u32* bits = reinterpret_cast<u32*>(s.k);
  unsigned short* before = reinterpret_cast<unsigned short*>(bits + words);  // marks below each word
  for (long long w = threadIdx.x; w < words; w += C::kThreads) bits[w] = 0u;
  __syncthreads();
  for (u32 i = threadIdx.x; i < n; i += C::kThreads) {
    const u32 at = u32(rank_key_index(sel[i])) - lo;
    atomicOr(&bits[at >> 5], 1u << (at & 31));
  }
  __syncthreads();
  // 3. An exclusive scan of the words' mark counts: thread t counts a run of words, the
  // runs in thread order.
  const long long per = (words + C::kThreads - 1) / C::kThreads;
  const long long w0 = min(static_cast<long long>(threadIdx.x) * per, words);
  const long long w1 = min(w0 + per, words);
  u32 mine = 0;
  for (long long w = w0; w < w1; ++w) mine += u32(__popc(bits[w]));
  u32 marks = 0;
  u32 run = cta_exclusive_sum<C::kThreads>(mine, s.radix + 2, marks);
  for (long long w = w0; w < w1; ++w) {
    before[w] = static_cast<unsigned short>(run);
    run += u32(__popc(bits[w]));
  }
  __syncthreads();
  // 4. Each chosen key to its slot; the padding after them.
  for (u32 i = threadIdx.x; i < n; i += C::kThreads) {
    const u64 v = sel[i];
    const int key = rank_key_index(v);
    const u32 at = u32(key) - lo;
    const u32 slot = before[at >> 5] + u32(__popc(bits[at >> 5] & ((1u << (at & 31)) - 1u)));
    p.out_indices[row * p.out_indices_stride + slot] = key - base;
    if (p.out_scores) p.out_scores[row * p.out_scores_stride + slot] = output_score(v, true, p.negate_scores);
  }
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

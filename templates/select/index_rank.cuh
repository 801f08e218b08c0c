// Index-ordered placement without a sort: the chosen keys of a row marked in a bitmap over
// the span of their indices, a count of the marks before each word, and each chosen key
// put straight at its slot (its rank among the chosen by index). The fused top-k kernel's
// index-ordered rows (index_order.cuh) and the retrieval mode's and paged decode's selects
// (knn_select.cuh) place their unsorted outputs so.
#pragma once
#include "common/cta_scan.cuh"
#include "select/rank_order.cuh"

namespace winnow {

// Places the n chosen RankKeys of sel (distinct indices) in ascending index order: calls
// put(slot, v) for each, slot its rank among them by index, when the span of their indices
// fits `words_cap` 32-bit words of shared scratch as a bitmap and a 16-bit count per word
// (6 bytes per 32 keys of span); returns false, having put nothing, when it does not.
// radix: 2 + kThreads / 32 free words of shared memory. Called by the whole CTA; ends with
// a CTA barrier either way (put's writes to shared memory are then visible).
template <int kThreads, class Put>
__device__ bool index_order_place(const u64* sel, u32 n, u32* scratch, long long words_cap,
                                  u32* radix, Put put) {
  static_assert(kThreads % 32 == 0, "whole warps");
  // 1. The span [lo, hi] of the chosen indices.
  u32* span = radix;
  if (threadIdx.x == 0) {
    span[0] = 0xFFFFFFFFu;
    span[1] = 0u;
  }
  __syncthreads();
  u32 lo_t = 0xFFFFFFFFu, hi_t = 0u;
  for (u32 i = threadIdx.x; i < n; i += kThreads) {
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
  if (n > 0xFFFFu || words + (words + 1) / 2 > words_cap) {  // counts fit 16 bits
    __syncthreads();  // span is read before a later step rewrites it
    return false;
  }
  // 2. The bitmap, then the marks of the chosen keys.
  u32* bits = scratch;
  unsigned short* before = reinterpret_cast<unsigned short*>(bits + words);  // marks below each word
  for (long long w = threadIdx.x; w < words; w += kThreads) bits[w] = 0u;
  __syncthreads();
  for (u32 i = threadIdx.x; i < n; i += kThreads) {
    const u32 at = u32(rank_key_index(sel[i])) - lo;
    atomicOr(&bits[at >> 5], 1u << (at & 31));
  }
  __syncthreads();
  // 3. An exclusive scan of the words' mark counts: thread t counts a run of words, the
  // runs in thread order.
  const long long per = (words + kThreads - 1) / kThreads;
  const long long w0 = min(static_cast<long long>(threadIdx.x) * per, words);
  const long long w1 = min(w0 + per, words);
  u32 mine = 0;
  for (long long w = w0; w < w1; ++w) mine += u32(__popc(bits[w]));
  u32 marks = 0;
  u32 run = cta_exclusive_sum<kThreads>(mine, radix + 2, marks);
  for (long long w = w0; w < w1; ++w) {
    before[w] = static_cast<unsigned short>(run);
    run += u32(__popc(bits[w]));
  }
  __syncthreads();
  // 4. Each chosen key to its slot.
  for (u32 i = threadIdx.x; i < n; i += kThreads) {
    const u64 v = sel[i];
    const u32 at = u32(rank_key_index(v)) - lo;
    put(before[at >> 5] + u32(__popc(bits[at >> 5] & ((1u << (at & 31)) - 1u))), v);
  }
  __syncthreads();
  return true;
}

}  // namespace winnow

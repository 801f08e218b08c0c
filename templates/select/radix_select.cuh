// The k-th largest of a set of distinct RankKeys by radix select (8 bits a pass), by the
// whole CTA.
#pragma once
#include "common/cta_scan.cuh"
#include "topk/topk_smem.cuh"

namespace winnow {

// A threshold t with exactly k of the distinct RankKeys that for_each yields at or above
// it (k >= 1, and at least k of them exist) and t's order key (high 32 bits) that of the
// k-th largest: the k-th largest itself, or, when the digits found so far already admit
// exactly k, their prefix with the lower index bits zero. Radix select, 8 bits a pass from
// the top; called by the whole CTA.
// Smem: any view with `u32* radix` (256 bins + the kScratchRadix* slots): TopkSmem<C> or
// the knn select kernels' (templates/knn/knn_select.cuh). LowestShift 32: the passes stop after
// the order key (the high 32 bits), and the result is the order key of the k-th largest
// with the index bits zero (at least k at or above it; more where it ties).
template <class C, int LowestShift = 0, class Smem, class ForEach>
__device__ u64 radix_kth(const Smem& s, u32 k, ForEach for_each) {
  static_assert(LowestShift == 0 || LowestShift == 32, "whole RankKeys or their order keys");
  u32* hist = s.radix;
  u64* prefix_slot = reinterpret_cast<u64*>(s.radix + kScratchRadixPrefix);
  u32* remaining_slot = s.radix + kScratchRadixRemaining;
  u32* done_slot = s.radix + kScratchRadixDone;
  if (threadIdx.x == 0) {
    *prefix_slot = 0;
    *remaining_slot = k;
    *done_slot = 0;
  }
  for (int shift = 56; shift >= LowestShift; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += C::kThreads) hist[i] = 0;
    __syncthreads();
    const u64 prefix = *prefix_slot;
    const u32 need = *remaining_slot;  // read by every thread before warp 0 rewrites it
    const u64 high = shift == 56 ? 0ull : (~0ull << (shift + 8));
    // One shared atomic per key of the prefix. A warp-aggregated count (__match_any_sync
    // per key) is slower wherever most keys a pass scans lie outside the prefix, as in the
    // topk kernel's knn path at large k and the retrieval select.
    for_each([&](u64 v) {
      if ((v & high) == prefix) atomicAdd(&hist[u32(v >> shift) & 255u], 1u);
    });
    __syncthreads();
    if (threadIdx.x < 32) {
      // Lane l holds digits 255 - 8l .. 248 - 8l; the lane whose range holds the need-th
      // largest entry picks the digit.
      const int lane = threadIdx.x;
      u32 cnt[8], sum = 0;
#pragma unroll
      for (int i = 0; i < 8; ++i) sum += (cnt[i] = hist[255 - 8 * lane - i]);
      u32 upto = sum;  // entries in this lane's digits and every higher one
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        u32 v = __shfl_up_sync(0xFFFFFFFFu, upto, o);
        if (lane >= o) upto += v;
      }
      u32 above = upto - sum;
      if (above < need && need <= upto) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          if (above + cnt[i] >= need) {
            *prefix_slot = prefix | (u64(255 - 8 * lane - i) << shift);
            *remaining_slot = need - above;
            // Every entry of this digit is needed and the order key (the high 32 bits) is
            // known: the prefix, lower bits zero, admits exactly the k largest (v >= it).
            if (above + cnt[i] == need && shift <= 32) *done_slot = 1;
            break;
          }
          above += cnt[i];
        }
      }
    }
    __syncthreads();
    if (*done_slot) break;
  }
  const u64 kth = *prefix_slot;
  __syncthreads();  // every thread has read it before a later call resets it
  return kth;
}

// The `need` largest of the `count` distinct nonzero RankKeys that `scan` yields (all of
// them when count <= need), gathered into sel[0, kp) (zeros after them) by the whole CTA,
// counted in *taken: the one exact select of the key-split merge, the retrieval mode's
// select and the shard merge (templates/shard/shard_merge.cuh). A scan that yields a key twice
// (inputs breaking the contract) may take more than need: sel keeps at most kp, and
// *taken, read after the call, says so. `scan` runs twice and must yield each thread the
// same entries in the same order both times: the first counts each thread's chosen
// entries, a CTA scan of the counts gives each thread its first slot, the second places
// them (one shared atomic per chosen entry on one word would put k atomics a row in one
// queue).
template <class C, class Smem, class Scan>
__device__ void gather_best(const Smem& s, u32 need, u32 count, Scan scan, u64* sel, int kp,
                            u32* taken) {
  const u64 kth = count <= need ? 1ull : radix_kth<C>(s, need, scan);
  for (int i = threadIdx.x; i < kp; i += C::kThreads) sel[i] = 0ull;
  u32 mine = 0;
  scan([&](u64 v) { mine += v >= kth ? 1u : 0u; });
  // The radix bins are free (radix_kth's last barrier); the scan's barrier also orders the
  // zeros above before the entries below.
  u32 total = 0;
  u32 at = cta_exclusive_sum<C::kThreads>(mine, s.radix, total);
  scan([&](u64 v) {
    if (v >= kth) {
      if (at < u32(kp)) sel[at] = v;
      ++at;
    }
  });
  if (threadIdx.x == 0) *taken = total;
  __syncthreads();
}

}  // namespace winnow

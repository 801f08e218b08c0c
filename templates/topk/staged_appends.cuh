// The fused filter's appends on the wgmma path, staged per warp: the (row, key, score)s a
// warp's lanes admit wait in the warp's queue in shared memory, and the warp appends them
// 32 at a time, every lane busy.
//
// A lane holds R / 2 scores of a tile (one at dsa's two rows), and about one in twenty
// passes the gate at dsa's k = 2048: appended at once, one lane of 32 past it takes the
// whole warp through the append (bin, histogram and count atomics, buffer store), which
// profiled in 82 % of the (warp, tile) pairs (docs/decisions/0055). Staged, a tile
// costs a ballot and a store per admitted lane, and the append runs once per 32 admitted
// scores. The appends are the same, later: a histogram count that waits only leaves the
// gate lower (looser), and every queue is drained before a buffer check reads the counts
// (drain, called by the visitors) and after the last tile.
#pragma once
#include "topk/topk_smem.cuh"

namespace winnow {

template <class C>
struct StagedAppends {
  static_assert(!C::kWgmma || C::kMathThreads / 32 <= kStagedWarps, "a queue per math warp");
  const TopkSmem<C>& s;
  int n = 0;  // entries waiting in this warp's queue (the same in every lane)

  __device__ explicit StagedAppends(const TopkSmem<C>& smem) : s(smem) {}

  // This warp's queue: scores [32], keys [32], rows [32].
  __device__ __forceinline__ u32* queue() const {
    return s.staged + (unhoisted_thread_index() >> 5) * (kStagedEntries * 3);
  }

  // Called by all 32 lanes of the warp together: queues (r, key, score) where admitted,
  // appending the queue first if the new entries would not fit.
  template <class Append>
  __device__ __forceinline__ void offer(bool admitted, int r, int key, float sc,
                                        const Append& append) {
    const unsigned ballot = __ballot_sync(0xFFFFFFFFu, admitted);
    if (ballot == 0) return;
    const int m = __popc(ballot);
    if (n + m > kStagedEntries) drain(append);
    if (admitted) {
      const unsigned lane = threadIdx.x & 31;
      const int i = n + __popc(ballot & ((1u << lane) - 1u));
      u32* q = queue();
      q[i] = float_bits(sc);
      q[kStagedEntries + i] = u32(key);
      q[2 * kStagedEntries + i] = u32(r);
    }
    n += m;
  }

  // Called by all 32 lanes of the warp together: appends every waiting entry, one a lane.
  template <class Append>
  __device__ __forceinline__ void drain(const Append& append) {
    if (n == 0) return;
    __syncwarp();
    const int lane = int(threadIdx.x & 31);
    if (lane < n) {
      const u32* q = queue();
      append(int(q[2 * kStagedEntries + lane]), int(q[kStagedEntries + lane]),
             bits_float(q[lane]));
    }
    __syncwarp();
    n = 0;
  }
};

}  // namespace winnow

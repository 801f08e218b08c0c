// An exclusive prefix sum over a CTA's threads, in thread order, of one u32 each: the
// offsets at which threads place their parts of a list (gather_best's chosen entries,
// index_order's marks) without a shared atomic per entry.
#pragma once
#include "common/portable.cuh"

namespace winnow {

// The sum of `mine` over the threads before this one, and over all of them in `total`.
// Called by the whole CTA (kThreads, a multiple of 32); warp_total: kThreads / 32 words of
// shared memory, free until the caller's next __syncthreads after the call.
template <int kThreads>
__device__ u32 cta_exclusive_sum(u32 mine, u32* warp_total, u32& total) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps");
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  u32 incl = mine;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const u32 t = __shfl_up_sync(0xFFFFFFFFu, incl, o);
    if (lane >= o) incl += t;
  }
  if (lane == 31) warp_total[warp] = incl;
  __syncthreads();
  u32 before = incl - mine, sum = 0;
  for (int w = 0; w < kThreads / 32; ++w) {
    const u32 t = warp_total[w];
    before += w < warp ? t : 0u;
    sum += t;
  }
  total = sum;
  return before;
}

}  // namespace winnow

// Sorting a power-of-two list of RankKeys by the whole CTA (bitonic).
#pragma once
#include "common/portable.cuh"

namespace winnow {

// Sorts n (a power of two) RankKeys descending by `order`, or by index when by_index
// (bitonic; in shared or global memory). Called by the whole CTA. Steps whose pairs lie 64
// or more apart go through memory, one barrier each; the others run in registers, each
// warp holding 64 consecutive entries (lane l: entries l and l + 32), pairs exchanged by
// shuffles: about a third of the barriers of an all-memory network.
template <class C>
__device__ void sort_desc(u64* v, int n, bool by_index) {
  auto key = [by_index](u64 x) { return by_index ? ((x << 32) | (x >> 32)) : x; };
  auto memory_step = [&](int size, int stride) {
    for (int i = threadIdx.x; i < n / 2; i += C::kThreads) {
      int lo = 2 * i - (i & (stride - 1));
      int hi = lo + stride;
      bool desc = (lo & size) == 0;
      u64 a = v[lo], b = v[hi];
      if ((key(a) < key(b)) == desc) {
        v[lo] = b;
        v[hi] = a;
      }
    }
    __syncthreads();
  };
  if (n < 64) {
    for (int size = 2; size <= n; size <<= 1)
      for (int stride = size >> 1; stride > 0; stride >>= 1) memory_step(size, stride);
    return;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  // Entry e (held in x) against its partner e ^ stride (stride <= 16, another lane): the
  // lower of the pair keeps the larger key when the pair's block of `size` sorts down.
  auto exchange = [&](u64& x, int e, int size, int stride) {
    const u64 y = __shfl_xor_sync(0xFFFFFFFFu, x, stride);
    const bool lower = (e & stride) == 0, desc = (e & size) == 0;
    const bool x_larger = key(x) > key(y);
    if (lower == desc ? !x_larger : x_larger) x = y;
  };
  // Sizes size_lo..size_hi, their steps of stride <= 32, in registers.
  auto register_steps = [&](int size_lo, int size_hi) {
    for (int b = warp * 64; b < n; b += (C::kThreads / 32) * 64) {
      u64 x0 = v[b + lane], x1 = v[b + lane + 32];
      for (int size = size_lo; size <= size_hi; size <<= 1) {
        for (int stride = min(size >> 1, 32); stride > 0; stride >>= 1) {
          if (stride == 32) {
            const bool desc = ((b + lane) & size) == 0;
            if ((key(x0) < key(x1)) == desc) {
              const u64 t = x0;
              x0 = x1;
              x1 = t;
            }
          } else {
            exchange(x0, b + lane, size, stride);
            exchange(x1, b + lane + 32, size, stride);
          }
        }
      }
      v[b + lane] = x0;
      v[b + lane + 32] = x1;
    }
    __syncthreads();
  };
  register_steps(2, 64);
  for (int size = 128; size <= n; size <<= 1) {
    for (int stride = size >> 1; stride >= 64; stride >>= 1) memory_step(size, stride);
    register_steps(size, size);
  }
}

}  // namespace winnow

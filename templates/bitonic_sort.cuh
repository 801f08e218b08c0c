// Sorting a power-of-two list of RankKeys by the whole CTA (bitonic).
#pragma once
#include "winnow/portable.cuh"

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

// The same sort of n = 2^M RankKeys in shared memory with each entry's compare-exchanges
// in registers: the first n / 8 threads of the CTA hold 8 entries each (the others only pass
// the barriers). Entry (thread t, register r) is the list's entry t with the 3 bits of r
// inserted at bit `lo`: every step of the network whose pair distance is 2^lo, 2^(lo+1) or
// 2^(lo+2) runs in the thread's registers; before a step of another distance the entries
// go through shared memory into the layout with that distance among the register bits (at
// most ceil(log2 n / 3) such transposes per merge size, against the step-per-barrier
// memory steps and two-shuffle register steps of sort_desc: the retrieval mode's select
// at k = 8192 was bound by its instruction count, session 17's ncu). In the transposes
// entry i sits at i ^ ((i >> 4) & 15) (a 16-lane half-warp's 64-bit accesses then meet at
// most 2-way bank conflicts in every layout); the list is in plain order before and after.
// Every step compares and exchanges as sort_desc does, so the result is the same list.
// A register distance 2^D of sort_desc_registers as a type (its steps unrolled per D).
template <int D>
struct SortDistance {
  static constexpr int kValue = D;
};

template <class C, int M>
__device__ void sort_desc_registers(u64* v, bool by_index) {
  constexpr int N = 1 << M, A = N / 8;
  static_assert(M >= 8 && A <= C::kThreads && A % 32 == 0, "n / 8 whole warps of the CTA");
  const int t = threadIdx.x;
  const bool act = t < A;
  auto key = [by_index](u64 x) { return by_index ? ((x << 32) | (x >> 32)) : x; };
  // Layout lo: register r holds entry base(lo) + (r << lo), base(lo) the thread's bits with
  // a gap of 3 at bit lo (computed once per layout, not per entry).
  auto base_of = [t](int lo) { return ((t >> lo) << (lo + 3)) | (t & ((1 << lo) - 1)); };
  auto swizzled = [](int i) { return i ^ ((i >> 4) & 15); };
  u64 x[8];
  // The list is an unordered set before the sort: any layout may load it (this one meets
  // no bank conflicts), its entries then taken as those of layout 0.
  if (act) {
    const int b0 = base_of(M - 3);
#pragma unroll
    for (int r = 0; r < 8; ++r) x[r] = key(v[b0 + (r << (M - 3))]);
  }
  // Pair (entry i, entry i + 2^(lo + D)) of registers r, r + 2^D; the block of 2^s holding
  // it sorts down where bit s of i is 0: bit r of `down` (key() is a bijection: the keys
  // compare as sort_desc's do).
  auto step = [&](auto dist, unsigned down) {
    constexpr int D = decltype(dist)::kValue;
#pragma unroll
    for (int r = 0; r < 8; ++r) {
      if ((r >> D) & 1) continue;
      u64& a = x[r];
      u64& c = x[r | (1 << D)];
      const bool swap = (a < c) == (((down >> r) & 1u) != 0u);
      const u64 hi = swap ? c : a, lo_ = swap ? a : c;
      a = hi;
      c = lo_;
    }
  };
  // The loops over sizes and steps stay loops (unrolled, the 91 steps at n = 8192 more than
  // doubled the select module's compile time).
  int lo = 0, base = base_of(0);
#pragma unroll 1
  for (int s = 1; s <= M; ++s) {
#pragma unroll 1
    for (int b = s - 1; b >= 0; --b) {
      if (b < lo || b > lo + 2) {
        const int next = b >= 2 ? b - 2 : 0, next_base = base_of(next);
        __syncthreads();  // every thread has read the previous layout
        if (act) {
#pragma unroll
          for (int r = 0; r < 8; ++r) v[swizzled(base + (r << lo))] = x[r];
        }
        __syncthreads();
        if (act) {
#pragma unroll
          for (int r = 0; r < 8; ++r) x[r] = v[swizzled(next_base + (r << next))];
        }
        lo = next;
        base = next_base;
      }
      if (act) {
        // Bit s of each register's entry: a register bit (the patterns of r's bits 0, 1,
        // 2 being 0) or a bit of the thread's base, the same for all 8.
        const int rs = s - lo;
        const unsigned down = rs == 0 ? 0x55u : rs == 1 ? 0x33u : rs == 2 ? 0x0Fu
                              : ((base >> s) & 1) ? 0x00u : 0xFFu;
        const int d = b - lo;
        if (d == 0) step(SortDistance<0>{}, down);
        else if (d == 1) step(SortDistance<1>{}, down);
        else step(SortDistance<2>{}, down);
      }
    }
  }
  __syncthreads();  // every thread has read the last transposed layout
  if (act) {
#pragma unroll
    for (int r = 0; r < 8; ++r) v[base + (r << lo)] = key(x[r]);
  }
  __syncthreads();
}

}  // namespace winnow

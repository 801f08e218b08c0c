// The filter's gate and CandidateBuffer: raising a row's gate from its histogram of
// ThresholdBins, and compacting the buffer to the keys at or above it.
#pragma once
#include "topk/key_tile_loop.cuh"
#include "select/rank_order.cuh"
#include "topk/topk_smem.cuh"

namespace winnow {

// Raises the row's gate to the highest bin whose suffix count reaches k. One warp: lane l
// sums bins [l P, l P + P) (reading them rotated by l, so the 32 lanes hit 32 banks), a
// suffix scan finds the segment holding the bin, and a second scan over that segment's P
// bins (P / 32 per lane) finds the bin.
template <class C>
__device__ void refresh_gate(const TopkSmem<C>& s, int r, int lane) {
  constexpr int P = C::kBins / 32;
  static_assert(P % 32 == 0 || P < 32, "bins: 32 lanes of whole segments");
  const u32* h = s.hist + r * C::kBins;
  const u32 k = C::kTopK;
  auto suffix_sum = [lane](u32 v) {  // sum over lanes >= lane
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      u32 x = __shfl_down_sync(0xFFFFFFFFu, v, o);
      if (lane + o < 32) v += x;
    }
    return v;
  };
  u32 mine = 0;
#pragma unroll 8
  for (int i = 0; i < P; ++i) mine += h[lane * P + ((i + lane) & (P - 1))];
  const u32 suffix = suffix_sum(mine);
  const unsigned hit = __ballot_sync(0xFFFFFFFFu, suffix >= k);
  if (hit == 0) return;
  const int seg = 31 - __clz(hit);  // the highest segment whose suffix reaches k
  const u32 above = __shfl_sync(0xFFFFFFFFu, suffix - mine, seg);  // in higher segments
  // Lane l takes bins seg P + l Q .. + Q - 1 of the segment (Q = P / 32, at least 1).
  constexpr int Q = P >= 32 ? P / 32 : 1;
  u32 part = 0;
  if (lane * Q < P) {
#pragma unroll
    for (int i = 0; i < Q; ++i) part += h[seg * P + lane * Q + i];
  }
  const u32 part_suffix = suffix_sum(part) + above;
  const unsigned hit2 = __ballot_sync(0xFFFFFFFFu, part_suffix >= k && lane * Q < P);
  const int l2 = 31 - __clz(hit2);  // hit2 != 0: lane 0's suffix is the segment's
  if (lane == l2) {
    u32 acc = part_suffix - part;  // above this lane's bins
    int b = seg * P + lane * Q + Q - 1;
    for (; b > seg * P + lane * Q; --b) {
      acc += h[b];
      if (acc >= k) break;
    }
    RowState& st = s.rows[r];
    if (b > st.gate) {
      // Readers may see the new score edge before the new gate: either excludes only keys
      // below a gate that the histogram has justified.
      st.gate_score = gate_edge_score(st.bins, b);
      st.gate = b;
    }
  }
}

// Keeps only the entries at or above the gate, in place. Called by the visitors (from
// inside the filter's tile loop; key_tile_loop.cuh).
template <class C>
__device__ void compact_candidates(const TopkSmem<C>& s, int r, u64* buf) {
  constexpr int N = visitor_threads<C>();
  RowState& st = s.rows[r];
  const u32 n = st.count;
  const ThresholdBins bins = st.bins;
  const int gate = st.gate;
  u32* warp_totals = s.radix;  // [32] scratch
  u32 out = 0;
  const unsigned v = visitor_index<C>();
  const int lane = v & 31, warp = v >> 5;
  visitor_sync<C>();
  for (u32 base = 0; base < n; base += N) {
    u32 i = base + v;
    u64 x = i < n ? buf[i] : 0ull;
    bool keep = i < n && bins.bin(rank_key_order(x)) >= gate;
    unsigned ballot = __ballot_sync(0xFFFFFFFFu, keep);
    if (lane == 0) warp_totals[warp] = __popc(ballot);
    visitor_sync<C>();
    u32 before = 0, total = 0;
    for (int w2 = 0; w2 < N / 32; ++w2) {
      if (w2 < warp) before += warp_totals[w2];
      total += warp_totals[w2];
    }
    before += __popc(ballot & ((1u << lane) - 1u));
    if (keep) buf[out + before] = x;
    out += total;
    visitor_sync<C>();
  }
  if (v == 0) st.count = out;
  visitor_sync<C>();
}

}  // namespace winnow

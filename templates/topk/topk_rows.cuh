// The rows of one work item: q (stored form or fp32), the weights, |q|^2 and each row's
// window part, loaded into shared memory by the whole CTA.
#pragma once
#include "common/element_decode.cuh"
#include "topk/tile_scoring.cuh"
#include "topk/topk_params.cuh"
#include "topk/topk_smem.cuh"
#include "ptx/wgmma_tiles.cuh"

namespace winnow {

// Loads the block's query rows (dequantised), weights and |q[h]|^2, and each row's window.
template <class C, class S>
__device__ void load_rows(const TopkParams& p, const TopkSmem<C>& s, int row0, int split) {
  constexpr int R = C::kRows, H = C::kHeads, D = C::kDim;
  const unsigned tid = unhoisted_thread_index();  // once per work item
  if (C::kMma) {
    // Stored form, 16 bytes at a time, rows padded (see SmemLayout::raw_row_bytes).
    constexpr int EB = MmaBytes<C>::value, VPR = D * EB / 16, RB = D * EB + 16;
    for (int e = tid; e < R * H * VPR; e += C::kThreads) {
      int rh = e / VPR, v = e % VPR, r = rh / H, h = rh % H, row = row0 + r;
      uint4 x = make_uint4(0u, 0u, 0u, 0u);
      if (row < p.rows) {
        const char* src = static_cast<const char*>(p.q) + (row * p.q_row_stride + h * D) * EB;
        x = reinterpret_cast<const uint4*>(src)[v];
      }
      const int at = C::kWgmma ? swizzled_chunk<R * H>(rh, v) : rh * RB + v * 16;
      *reinterpret_cast<uint4*>(reinterpret_cast<char*>(s.q) + at) = x;
    }
    if (C::kWgmma) fence_async_smem();  // published to wgmma by the barrier below
  } else {
    for (int e = tid; e < R * H * D; e += C::kThreads) {
      int r = e / (H * D), hd = e % (H * D);
      int row = row0 + r;
      s.q[e] = row < p.rows ? decode_element<C::kQElem>(p.q, row * p.q_row_stride + hd) : 0.0f;
    }
  }
  for (int e = tid; e < R * H; e += C::kThreads) {
    int r = e / H, h = e % H, row = row0 + r;
    const float w = (C::kUsesW && row < p.rows) ? p.w[row * p.w_row_stride + h] : 0.0f;
    s.w[e] = relus_by_add<C, S>() ? w * 0.5f : w;  // tile_scoring.cuh
  }
  if (tid < R) {
    int r = tid, row = row0 + r;
    RowState& st = s.rows[r];
    st.start = 0;
    st.end = 0;
    st.bad = 0;
    st.origin = 0;
    if (row < p.rows) {
      // The row's window [a, b) in global key numbers, then the part of it this shard
      // holds in its own (not sharded: key_offset 0, total_keys num_keys: the same).
      long long a = 0, b = p.total_keys;
      if (C::kWindow == 1) {
        a = p.window_start[row];
        b = p.window_end[row];
        if (a < 0 || b > p.total_keys || a > b) {
          st.bad = 1;
          if (split == 0) atomicAdd(&p.counters[1], 1u);
          a = b = p.key_offset;
        }
      } else if (C::kWindow == 2) {
        long long e = (p.causal_offset + row + 1) / p.causal_ratio;
        b = e < p.total_keys ? e : p.total_keys;
      }
      const long long lo = a - p.key_offset, hi = b - p.key_offset;
      st.start = int(lo < 0 ? 0 : (lo > p.num_keys ? p.num_keys : lo));
      st.end = int(hi < 0 ? 0 : (hi > p.num_keys ? p.num_keys : hi));
      if (st.end < st.start) st.end = st.start;
      st.origin = int(lo);  // relative indices count from the window's global start
    }
    if (p.key_splits > 1) {
      // Whole key tiles per part, so parts never share a tile.
      const int kt = C::kKeyTile, n = st.end - st.start;
      const int part = ((n + p.key_splits - 1) / p.key_splits + kt - 1) / kt * kt;
      const int a = min(st.end, st.start + split * part);
      st.end = min(st.end, a + part);
      st.start = a;
    }
  }
  __syncthreads();
  if (C::kUsesQSq) {
    for (int e = tid; e < R * H; e += C::kThreads) {
      const float* v = s.q + e * D;
      float acc = 0.0f;
      for (int i = 0; i < D; ++i) acc = fmaf(v[i], v[i], acc);
      s.qsq[e] = acc;
    }
  }
  __syncthreads();
}

}  // namespace winnow

// The stream path's scoring of a page pair (templates/paged/paged_stream_params.cuh): a
// math warpgroup's two page slots of shared memory in the TMA box layout (64 key rows of
// 128 fp8 bytes, then the 2 rows of their fp32 scales, the 128-byte swizzle) against one
// query row (its q rows swizzled as the wgmma B operand, its weights) on wgmma m64n64.
// Each lane ends with the score of one key: page t4 >> 1 of the pair, key key0 + 8 (t4 & 1)
// with key0 = 16 warp + g. The page stream and the hint's scoring (paged_stream_hint.cuh)
// both score this way, so a key scored by either has the same score bit for bit.
#pragma once
#include "common/score_ops.cuh"
#include "paged/paged_stream_params.cuh"
#include "ptx/wgmma_tiles.cuh"
#include "topk/tile_scoring.cuh"

namespace winnow {

#if defined(__CUDA_ARCH__) || defined(WINNOW_EMULATED)
// What the warpgroup's rows share of the pair: which slots hold a page, their descriptors,
// the thread's two keys' scales of each page.
struct PagedPagePair {
  bool loaded[kPagedWgPages];
  u32 a_lo[kPagedWgPages];
  float ks[kPagedWgPages][2];
};

// `pair`: the first page slot (the second kPagedPageSlot after it); loaded0 / loaded1:
// which slots hold a page (the same for the whole warpgroup); key0: the thread's first key.
template <class C>
__device__ __forceinline__ PagedPagePair paged_page_pair(const unsigned char* pair, bool loaded0,
                                                         bool loaded1, int key0) {
  PagedPagePair pp;
#pragma unroll
  for (int i = 0; i < kPagedWgPages; ++i) {
    pp.loaded[i] = i == 0 ? loaded0 : loaded1;
    const unsigned char* half = pair + i * kPagedPageSlot;
    // Key i's scale: byte 4 i of rows 64, 65 of the box (swizzled like every row).
    auto scale_of = [&](int key) {
      const int row = kPageKeys + (key >> 5), byte = (4 * key) & 127;
      return *reinterpret_cast<const float*>(half + row * 128 + ((((byte >> 4) ^ (row & 7))) << 4) +
                                             (byte & 15));
    };
    pp.ks[i][0] = C::kUsesKScale && pp.loaded[i] ? scale_of(key0) : 1.0f;
    pp.ks[i][1] = C::kUsesKScale && pp.loaded[i] ? scale_of(key0 + 8) : 1.0f;
    pp.a_lo[i] = wgmma_desc_lo(half);
  }
  return pp;
}

// Query j of request r as paged_pair_score reads it: its 64 q rows swizzled at q_row, its
// weights at w_row (halved where relus_by_add, as the fused top-k kernel stores them), by
// threads tid of `threads`. The caller fences (fence_async_smem) and synchronises.
template <class C, class S>
__device__ __forceinline__ void paged_load_query(const PagedStreamParams& ps, int r, int j,
                                                 unsigned char* q_row, float* w_row, int tid,
                                                 int threads) {
  constexpr int H = kPagedHeads;
  const unsigned char* qg = ps.q + (long long)r * ps.q_request_stride + j * ps.q_query_stride;
  for (int i = tid; i < H * 8; i += threads) {
    const int h = i / 8, c = i % 8;
    *reinterpret_cast<uint4*>(q_row + swizzled_chunk<H>(h, c)) =
        *reinterpret_cast<const uint4*>(qg + h * kPageDim + c * 16);
  }
  for (int h = tid; h < H; h += threads) {
    const float w = C::kUsesW ? ps.w[(long long)(r * C::kNextN + j) * ps.w_row_stride + h] : 0.0f;
    w_row[h] = relus_by_add<C, S>() ? w * 0.5f : w;
  }
}

// The lane's key's score for one row: q_row, its 64 swizzled q rows; w_row, its 64
// weights as the stream stores them (halved where relus_by_add). The whole warpgroup calls it.
template <class C, class S>
__device__ __forceinline__ float paged_pair_score(const PagedPagePair& pp, const unsigned char* q_row,
                                                  const float* w_row, int t4) {
  constexpr int H = kPagedHeads, WP = kPagedWgPages, NN = C::kNextN;
  const u32 b_lo = wgmma_desc_lo(q_row);
  // The row's weights of the thread's heads (8 jj + 2 t4, + 1): with up to two rows, read
  // once for the pair into registers (the MMAs' memory clobbers made each page read them
  // again); at three or four rows the registers would spill (96 at two CTAs an SM), so
  // each page reads them.
  constexpr bool kHeld = NN <= 2;
  const float* wrow = w_row + 2 * t4;
  float2 wv[H / 8];
#pragma unroll
  for (int jj = 0; jj < H / 8; ++jj)
    wv[jj] = kHeld ? *reinterpret_cast<const float2*>(wrow + jj * 8) : float2{0.0f, 0.0f};
  // Each page's weighted head sums of the thread's two keys, page after page in the
  // same accumulators: part[i][0] for key0, part[i][1] for key0 + 8.
  float part[WP][2];
#pragma unroll
  for (int i = 0; i < WP; ++i) {
    part[i][0] = part[i][1] = 0.0f;
    if (!pp.loaded[i]) continue;  // the same for the whole warpgroup
    float acc[32];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kPageDim; kk += 32)
      wgmma_m64n<64, kElemE4M3>(acc, wgmma_desc_from_lo(pp.a_lo[i], kk),
                                wgmma_desc_from_lo(b_lo, swizzled_at<H>(0, kk)), kk > 0 ? 1 : 0);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_pin(acc);
    wgmma_lane_partials<C, S>(
        acc,
        [&](int, int jj) { return kHeld ? wv[jj] : *reinterpret_cast<const float2*>(wrow + jj * 8); },
        0, pp.ks[i][0], pp.ks[i][1], part[i][0], part[i][1]);
  }
  // The quad's sums, (P0 + P1) + (P2 + P3) of lane partials Pi as wgmma_tile_visits adds
  // them (addition commutes bit for bit, so the pair each lane forms first may come in
  // either order), scattered: first lanes t4 ^ 1 swap halves (even lanes keep key0's
  // partials, odd ones key0 + 8's), then lanes t4 ^ 2 (lanes t4 < 2 keep the first page's
  // sum, the others the second's).
  const bool odd = (t4 & 1) != 0;
  float pair[WP];
#pragma unroll
  for (int i = 0; i < WP; ++i) {
    const float keep = odd ? part[i][1] : part[i][0], give = odd ? part[i][0] : part[i][1];
    pair[i] = op_add(keep, __shfl_xor_sync(0xFFFFFFFFu, give, 1));
  }
  const bool upper = (t4 & 2) != 0;
  const float sum =
      op_add(upper ? pair[1] : pair[0], __shfl_xor_sync(0xFFFFFFFFu, upper ? pair[0] : pair[1], 2));
  ScoreArgs a{};  // post reads no per-head value
  // (selected, not indexed: a register array indexed at run time goes to local memory)
  const int lp = t4 >> 1;
  const float ks_lo = lp == 1 ? pp.ks[1][0] : pp.ks[0][0];
  const float ks_hi = lp == 1 ? pp.ks[1][1] : pp.ks[0][1];
  a.kscale = odd ? ks_hi : ks_lo;
  return S::post(sum, a);
}
#endif

}  // namespace winnow

// The block-select score pass on the sm_90a tensor cores (wgmma): the rule of the mma.sync
// block_score (block_select_kernel.cuh), computed in two passes laid out so that neither
// needs a reduction across lanes per tile.
//
// One CTA of 256 threads (two math warpgroups, no producer warp) per (head h, query block
// I), two per SM (at most 128 registers a thread). The pooled keys kbar[kv][0..I] stream
// through a two-stage mbarrier ring by TMA, one tile of 128 blocks (boxes of 128 bytes of
// d x 128 rows, 128-byte swizzle) at a time, twice: pass 1 and pass 2 read the same tiles.
// No thread waits to refill the ring: after its MMAs on a stage are complete, each warp
// counts itself on the stage's counter (a shared-memory atomic), and the warp that counts
// last issues the stage's next load (its stage and bytes on the stage's full mbarrier).
//
// Pass 1, S = q kbar^T (each warpgroup: its 64 query rows x the tile's 128 blocks, m64n128):
// each thread holds 2 rows x 32 blocks, so a row's statistics are thread-local: the tile's
// row maximum first, then the running reference m moved only when the tile's maximum passes
// it by more than kLazyRescale (in the exp2 domain; the sum l then rescaled once), then the
// sum of exp2(x - m) over the tile. At the end each row's (m, l) merged over its quad and
// (m, 1 / l) published in shared memory for pass 2.
// Pass 2, S^T = kbar q^T (each warpgroup: 64 of the tile's blocks x all 128 query rows):
// each thread holds 2 blocks x 32 rows, so a block's column sum over the rows,
// sum_i exp2(x - m_i) / l_i, is thread-local (the rows' statistics read from shared
// memory), then merged over its quad: no butterfly, no partial buffer, no barrier per tile.
// Each element costs one score program, one FFMA (v log2 e - m), one exp2, one multiply by
// 1 / l (pass 2) and one add. Against the mma.sync kernel the exponent is fused, the sums
// run in another order and the reference m is not the exact maximum, so the scores agree
// with it to fp32 rounding, not bit for bit; the index is the rule on this kernel's own
// scores (block_select_kernel.cuh, keep_blocks).
// Needs tiles of 128 blocks (pass 2: two warpgroups of 64 blocks each).
#pragma once
#include "block/block_params.cuh"
#include "block/block_select_kernel.cuh"
#include "ptx/mbarrier.cuh"
#include "common/ring_slot.cuh"
#include "ptx/tma.cuh"
#include "ptx/wgmma_ops.cuh"
#include "block/wgmma_q_tile.cuh"
#include "ptx/wgmma_tiles.cuh"

namespace winnow {

// Pass 1 moves a row's reference maximum only when a tile's maximum exceeds it by more than
// this (exp2 domain): the terms of the running sum stay below 2^8, far from overflow.
constexpr float kLazyRescale = 8.0f;

// Adds 1 to a shared-memory counter with acquire-release order at CTA scope; the old value.
// A warp's release of a ring stage (its MMAs on the stage are complete) before the warp
// that counts last reuses the stage.
__device__ __forceinline__ unsigned count_release(unsigned* counter) {
#if defined(__CUDA_ARCH__)
  unsigned old;
  asm volatile("atom.acq_rel.cta.shared::cta.add.u32 %0, [%1], 1;\n"
               : "=r"(old)
               : "r"(shared_address(counter))
               : "memory");
  return old;
#else
  return atomicAdd(counter, 1u);
#endif
}

constexpr float kLog2e = 1.4426950408889634f;

// The exponentials of column group nt (8 columns of a tile's 128): the first
// WINNOW_BLOCK_SCORE_POLY_EXP groups of 16 on the FMA pipe (exp2_poly), the rest on MUFU
// (exp2_approx). An NVRTC define, 0 (all on MUFU) until a faster split is shown: ncu shows
// MUFU.EX2 and the HGMMAs stalled on the MIO queue they share.
#ifndef WINNOW_BLOCK_SCORE_POLY_EXP
#define WINNOW_BLOCK_SCORE_POLY_EXP 0
#endif
__device__ __forceinline__ float index_exp2(int nt, float x) {
  return nt < WINNOW_BLOCK_SCORE_POLY_EXP ? exp2_poly(x) : exp2_approx(x);
}

// The score program on 4 accumulators (kBounded: -inf for the blocks at or past n; J0: the
// block of c[0] and c[2], J0 + 1 that of c[1] and c[3]).
template <class S, bool kBounded>
__device__ __forceinline__ void chunk_raw(const float* c, int J0, int n, float* v) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    ScoreArgs args{};
    args.dot = &c[i];
    const float s = S::eval(args);
    v[i] = !kBounded || J0 + (i & 1) < n ? s : minus_infinity();
  }
}

// Pass 1 on one tile: the thread's two rows (v: the tile's scores, -inf past block n - 1;
// v[4 nt + 2 r + c]: row r, column 8 nt + 2 t4 + c). m in the exp2 domain.
template <int NT>
__device__ __forceinline__ void tile_row_stats(const float (&v)[4 * NT], float (&m)[2], float (&l)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float vmax = v[2 * r];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) vmax = fmaxf(vmax, fmaxf(v[4 * nt + 2 * r], v[4 * nt + 2 * r + 1]));
    const float tmax = __fmul_rn(vmax, kLog2e);
    if (tmax > m[r] + kLazyRescale) {
      l[r] = __fmul_rn(l[r], rescale(m[r], tmax));
      m[r] = tmax;
    }
    // exp2(v log2 e - m), 0 for v = -inf even while m is -inf (no visible block yet).
    const float mb = m[r] == minus_infinity() ? 0.0f : m[r];
    float s = 0.0f;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
      s = __fadd_rn(s, __fadd_rn(index_exp2(nt, __fmaf_rn(v[4 * nt + 2 * r], kLog2e, -mb)),
                                 index_exp2(nt, __fmaf_rn(v[4 * nt + 2 * r + 1], kLog2e, -mb))));
    l[r] = __fadd_rn(l[r], s);
  }
}

template <class C, class S>
__device__ void block_score_wgmma(const BlockSelectParams& p, const TmaMap* pooled_map,
                                  unsigned char* smem) {
  constexpr int D = C::kDim, T = C::kTile, NT = T / 8, ATOMS = D * 2 / 128;
  constexpr WgmmaScoreSmem L{D, T, C::kMaxBlocks};
  constexpr int STAGES = WgmmaScoreSmem::kStages, W = WgmmaScoreSmem::kWarps;
  static_assert(C::kThreads == kWgmmaScoreThreads, "two math warpgroups");
  static_assert(W * 16 == kBlockTokens, "one warp per 16 query rows of the block");
  static_assert(D == 64 || D == 128, "d = 64 or 128");
  static_assert(T == kBlockTokens, "pass 2: two warpgroups of 64 blocks a tile");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
  const int wg = warp >> 2;
  // The largest query blocks first: they hold the most key blocks.
  const int I = p.blocks - 1 - int(blockIdx.x / C::kHeads);
  const int h = int(blockIdx.x % C::kHeads), kv = h / (C::kHeads / C::kKvHeads);
  const int n = I + 1, tiles = (n + T - 1) / T, uses = 2 * tiles;
  char* base = reinterpret_cast<char*>(smem);
  float* block_scores = reinterpret_cast<float*>(smem + L.scores_off());
  float* row_stats = reinterpret_cast<float*>(smem + L.stats_off());  // [row]: m, 1 / l
  unsigned char* keep = smem + L.keep_off();
  float* fscratch = reinterpret_cast<float*>(smem + L.reduce_off());
  int* iscratch = reinterpret_cast<int*>(smem + L.reduce_off()) + 64;
  unsigned* released = reinterpret_cast<unsigned*>(smem + L.counters_off());
  u64* full = reinterpret_cast<u64*>(smem + L.barriers_off());
  // Rows kv * blocks + J of the pooled keys; those of a tile past block I are the next
  // blocks (or the next KV head's, or zeros past the tensor): finite, and masked or unused.
  const int row0 = kv * p.blocks;
  auto issue = [&](int use, int stage) {
    char* dst = base + L.stage_off(stage);
    mbarrier_arrive_expect_tx(full + stage, unsigned(L.tile_bytes()));
#pragma unroll
    for (int a = 0; a < ATOMS; ++a)
      tma_load_2d(dst + a * T * 128, pooled_map, full + stage, a * 128, row0 + (use % tiles) * T);
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbarrier_init(full + s, 1);  // the issuing thread's arrival, with the tile's bytes
      released[s] = 0;
    }
    mbarrier_init_fence();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    tma_prefetch(pooled_map);
    for (int s = 0; s < STAGES && s < uses; ++s) issue(s, s);
  }
  store_q_tile<D, C::kHeads>(p.q, base, I, h, wg);
  const u32 qlo = wgmma_desc_lo(base);
  float m[2] = {minus_infinity(), minus_infinity()}, l[2] = {0.0f, 0.0f};
  RingSlot slot = ring_slot(0, STAGES);
  // The tile in the current stage into d (pass 1: A = the warpgroup's q rows, B = the tile;
  // pass 2: A = the warpgroup's 64 blocks of the tile, B = the 128 q rows), issued and
  // committed, not waited for.
  auto issue_mma = [&](bool second, float (&d)[T / 2]) {
    mbarrier_wait(full + slot.stage, slot.parity);
    const u32 klo = wgmma_desc_lo(base + L.stage_off(slot.stage));
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      const unsigned long long qd = wgmma_desc_from_lo(qlo, swizzled_at<kBlockTokens>(second ? 0 : wg * 64, ks * 32));
      const unsigned long long kd = wgmma_desc_from_lo(klo, swizzled_at<T>(second ? wg * 64 : 0, ks * 32));
      wgmma_m64n<T, kElemBF16>(d, second ? kd : qd, second ? qd : kd, ks > 0);
    }
    wgmma_commit();
  };
  // After the warp's MMAs on the current stage are complete: the stage counted as released
  // (its next load issued by the warp that counts last), the next stage current.
  auto release = [&](int use) {
    __syncwarp();
    if (lane == 0) {
      const unsigned before = count_release(released + slot.stage);
      if (before % W == W - 1 && use + STAGES < uses) issue(use + STAGES, slot.stage);
    }
    slot.advance(STAGES);
  };
  // Pass 1's step on a tile's scores d: each row's reference maximum and sum.
  auto row_stats_of = [&](const float (&d)[T / 2], int tile) {
    float v[T / 2];
    if ((tile + 1) * T > n) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) chunk_raw<S, true>(d + 4 * nt, tile * T + nt * 8 + 2 * t4, n, v + 4 * nt);
    } else {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) chunk_raw<S, false>(d + 4 * nt, 0, n, v + 4 * nt);
    }
    tile_row_stats<NT>(v, m, l);
  };
  // Pass 2's step on a tile's scores d: d[4 nt + 2 r + c] is block J_r = tile * T + wg * 64 +
  // 16 (warp % 4) + g + 8 r, row i = 8 nt + 2 t4 + c; each block's sum over the 128 rows of
  // exp2(x - m) / l, written.
  auto column_sums_of = [&](const float (&d)[T / 2], int tile) {
    float s[2] = {0.0f, 0.0f};
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const float4 st = *reinterpret_cast<const float4*>(row_stats + 2 * (8 * nt + 2 * t4));
      const float mi[2] = {st.x, st.z}, inv[2] = {st.y, st.w};
      float v[4];
      chunk_raw<S, false>(d + 4 * nt, 0, n, v);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float p0 = __fmul_rn(index_exp2(nt, __fmaf_rn(v[2 * r], kLog2e, -mi[0])), inv[0]);
        const float p1 = __fmul_rn(index_exp2(nt, __fmaf_rn(v[2 * r + 1], kLog2e, -mi[1])), inv[1]);
        s[r] = __fadd_rn(s[r], __fadd_rn(p0, p1));
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      s[r] = __fadd_rn(s[r], __shfl_xor_sync(0xFFFFFFFFu, s[r], 1));
      s[r] = __fadd_rn(s[r], __shfl_xor_sync(0xFFFFFFFFu, s[r], 2));
      const int J = tile * T + wg * 64 + 16 * (warp & 3) + g + 8 * r;
      if (t4 == 0 && J < n) block_scores[J] = s[r];
    }
  };
  // One pass over the tiles (uses use0..), step(d, tile) on each. (Acc: the accumulators'
  // type named outside the generic lambda, which GCC 12's host compile needs.) Each
  // warpgroup's MMAs and its exponentials run one after the other; the other CTA on the SM
  // fills the gaps (two overlaps of the MMAs with the exponentials were tried: no faster).
  using Acc = float[T / 2];
  auto pass = [&](bool second, int use0, auto&& step) {
    for (int tile = 0; tile < tiles; ++tile) {
      Acc d;
      issue_mma(second, d);
      wgmma_wait<0>();
      wgmma_pin(d);
      release(use0 + tile);
      step(d, tile);
    }
  };

  // Pass 1: each row's reference maximum and sum of exp2.
  pass(false, 0, row_stats_of);
  // Each row's statistics over its quad and 1 / l, published.
  float inv[2];
  quad_row_stats(m, l, inv);
  if (t4 == 0) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = warp * 16 + g + 8 * r;
      row_stats[2 * row] = m[r];
      row_stats[2 * row + 1] = inv[r];
    }
  }
  __syncthreads();  // every row's statistics, and every q row for pass 2's B operand

  // Pass 2: each block's sum over the 128 rows of exp2(x - m) / l.
  pass(true, tiles, column_sums_of);
  __syncthreads();  // every block score is written
  keep_blocks<C::kThreads>(p, I, h, n, lane, warp, block_scores, keep, fscratch, iscratch);
}

}  // namespace winnow

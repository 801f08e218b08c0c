// The block-select score pass on the sm_90a tensor cores (wgmma; opt-in beside the
// mma.sync block_score of block_select_kernel.cuh, with the same results bit for bit).
//
// One CTA of 288 threads per (head h, query block I): two math warpgroups of 64 query rows
// and a producer warp. One producer thread streams the pooled keys kbar[kv][0..I] by TMA,
// one tile of kTile blocks (boxes of 128 bytes of d x kTile rows, 128-byte swizzle) at a
// time, into a two-stage mbarrier ring (full: 1 arrival + the tile's bytes; empty: one
// arrival per math warp), twice: pass 1 and pass 2 read the same tiles. Each math
// warpgroup computes its 64 rows x kTile scores as D / 16 m64nNk16 wgmma (A: its rows of
// the q tile, B: the key tile, both K-major in shared memory).
//
// Why the results are the mma.sync kernel's: each warp of a warpgroup holds, per 8-column
// chunk of D, the elements mma.m16n8's C fragment holds (rows g and g + 8 of its 16,
// columns 2 t4 and 2 t4 + 1), and warp w of the CTA holds query rows 16 w.. as there. So
// the per-chunk steps are the same functions (block_select_kernel.cuh) in the same order:
// a thread's running row statistics visit its columns in ascending key order (a chunk past
// the row's blocks, which the wider tile adds, is all -inf and changes neither max nor
// sum), the quad merge is the same shuffles, and the column sums are the same butterfly
// over the warp's row groups, then warps 0..7 in order. The dot itself is the tensor
// cores': the CPU emulation computes mma.sync and wgmma alike (fp32 sums of the exact bf16
// products in k order), so there the two kernels are bit-equal; whether the GPU's two
// instructions round a dot alike is what the [gpu] case checks (not yet run).
// Not yet (until measured): the next tile's MMAs issued under this tile's exp2 work inside
// a warpgroup (a second accumulator set: 64 more registers at d = 128, past the two CTAs
// per SM that 111 registers allow); every tile waits wgmma_wait<0>, and the overlap comes
// from the other warpgroup and the other CTA on the SM.
#pragma once
#include "winnow/block_params.cuh"
#include "winnow/block_select_kernel.cuh"
#include "winnow/mbarrier.cuh"
#include "winnow/ring_slot.cuh"
#include "winnow/tma.cuh"
#include "winnow/wgmma_ops.cuh"
#include "winnow/wgmma_q_tile.cuh"
#include "winnow/wgmma_tiles.cuh"

namespace winnow {

// The math warpgroups' barrier around the partial column sums (1 and 2 are the q tile's).
enum : int { kScoreMathBarrier = 3 };

template <class C, class S>
__device__ void block_score_wgmma(const BlockSelectParams& p, const TmaMap* pooled_map,
                                  unsigned char* smem) {
  constexpr int D = C::kDim, T = C::kTile, NT = T / 8, ATOMS = D * 2 / 128;
  constexpr WgmmaScoreSmem L{D, T, C::kMaxBlocks};
  constexpr int STAGES = WgmmaScoreSmem::kStages, W = WgmmaScoreSmem::kWarps;
  static_assert(C::kThreads == kWgmmaScoreThreads, "two math warpgroups and a producer warp");
  static_assert(W * 16 == kBlockTokens, "one warp per 16 query rows of the block");
  static_assert(D == 64 || D == 128, "d = 64 or 128");
  static_assert(T == 64 || T == 128, "wgmma N: 64 or 128 blocks a tile");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
  // The largest query blocks first: they hold the most key blocks.
  const int I = p.blocks - 1 - int(blockIdx.x / C::kHeads);
  const int h = int(blockIdx.x % C::kHeads), kv = h / (C::kHeads / C::kKvHeads);
  const int n = I + 1, tiles = (n + T - 1) / T;
  char* base = reinterpret_cast<char*>(smem);
  float* block_scores = reinterpret_cast<float*>(smem + L.scores_off());
  float* partial = reinterpret_cast<float*>(smem + L.partial_off());
  unsigned char* keep = smem + L.keep_off();
  float* fscratch = reinterpret_cast<float*>(smem + L.reduce_off());
  int* iscratch = reinterpret_cast<int*>(smem + L.reduce_off()) + 64;
  u64* full = reinterpret_cast<u64*>(smem + L.barriers_off());
  u64* empty = full + STAGES;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbarrier_init(full + s, 1);   // the producer's arrival, with the tile's bytes
      mbarrier_init(empty + s, W);  // one per math warp
    }
    mbarrier_init_fence();
  }
  __syncthreads();

  if (int(threadIdx.x) >= kWgmmaScoreMathThreads) {  // the producer warp
    if (int(threadIdx.x) == kWgmmaScoreMathThreads) {
      tma_prefetch(pooled_map);
      // Rows kv * blocks + J of the pooled keys; those of a tile past block I are the next
      // blocks (or the next KV head's, or zeros past the tensor): finite, and masked.
      const int row0 = kv * p.blocks;
      RingSlot slot = ring_slot(0, STAGES);
      for (int it = 0; it < 2 * tiles; ++it) {
        mbarrier_wait(empty + slot.stage, slot.parity ^ 1u);
        char* dst = base + L.stage_off(slot.stage);
        mbarrier_arrive_expect_tx(full + slot.stage, unsigned(L.tile_bytes()));
#pragma unroll
        for (int a = 0; a < ATOMS; ++a)
          tma_load_2d(dst + a * T * 128, pooled_map, full + slot.stage, a * 128,
                      row0 + (it % tiles) * T);
        slot.advance(STAGES);
      }
    }
  } else {
    const int wg = warp >> 2;
    store_q_tile<D, C::kHeads>(p.q, base, I, h, wg);
    const u32 qlo = wgmma_desc_lo(base);
    float m[2] = {minus_infinity(), minus_infinity()}, l[2] = {0.0f, 0.0f}, inv[2] = {0.0f, 0.0f};
    RingSlot slot = ring_slot(0, STAGES);
    for (int it = 0; it < 2 * tiles; ++it) {
      const int tile = it % tiles;
      const bool second = it >= tiles;
      if (it == tiles) quad_row_stats(m, l, inv);  // pass 1 is over
      mbarrier_wait(full + slot.stage, slot.parity);
      // The warpgroup's 64 rows x T blocks (d[4 nt + i]: chunk nt's c[i] of the warp).
      float d[T / 2];
      const u32 klo = wgmma_desc_lo(base + L.stage_off(slot.stage));
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        wgmma_m64n<T, kElemBF16>(d, wgmma_desc_from_lo(qlo, swizzled_at<kBlockTokens>(wg * 64, ks * 32)),
                                 wgmma_desc_from_lo(klo, swizzled_at<T>(0, ks * 32)), ks > 0);
      }
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_pin(d);
      __syncwarp();  // the warp's MMAs on the stage are complete
      if (lane == 0) mbarrier_arrive(empty + slot.stage);
      slot.advance(STAGES);

#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const float c[4] = {d[4 * nt], d[4 * nt + 1], d[4 * nt + 2], d[4 * nt + 3]};
        float x[4];
        chunk_scores<S>(c, tile * T + nt * 8 + 2 * t4, n, x);
        if (!second) {
          chunk_row_stats(x, m, l);
        } else {
          float cs[2];
          chunk_column_sums(x, m, inv, cs);
          warp_column_sums(cs);
          if (g == 0) {
            partial[warp * T + nt * 8 + 2 * t4] = cs[0];
            partial[warp * T + nt * 8 + 2 * t4 + 1] = cs[1];
          }
        }
      }
      if (second) {
        named_barrier_sync<kScoreMathBarrier, kWgmmaScoreMathThreads>();
        for (int j = int(threadIdx.x); j < T; j += kWgmmaScoreMathThreads) {
          const int J = tile * T + j;
          if (J >= n) continue;
          float s = partial[j];
          for (int w = 1; w < W; ++w) s = __fadd_rn(s, partial[w * T + j]);
          block_scores[J] = s;
        }
        // partial is rewritten by the next tile.
        named_barrier_sync<kScoreMathBarrier, kWgmmaScoreMathThreads>();
      }
    }
  }
  __syncthreads();  // every block score is written (the producer waits here too)
  keep_blocks<C::kThreads>(p, I, h, n, lane, warp, block_scores, keep, fscratch, iscratch);
}

}  // namespace winnow

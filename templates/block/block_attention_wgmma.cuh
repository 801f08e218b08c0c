// Block-sparse causal attention on the sm_90a tensor cores (wgmma; opt-in beside the
// mma.sync kernel of block_attention_kernel.cuh, the same semantics): bf16, GQA, d = 64 or
// 128, the CSR block index of block-select.
//
// One CTA of 384 threads per (head h, query block I): two math warpgroups of 64 query rows
// each and a producer warpgroup (setmaxnreg: 24 registers for it, 240 for each math one),
// one thread of which walks the row's list of kept key blocks and loads each block's K and
// V (128 keys: one tile per listed block, so a skipped block costs nothing) by TMA into two
// stages, K and V each with their own full/empty mbarriers (the topk kernel's pieces:
// mbarrier.cuh, ring_slot.cuh, tma.cuh). Each math warpgroup computes S = Q K^T by wgmma (A: its 64 rows
// of the q tile, B: the K tile, both K-major with the 128-byte swizzle), the causal mask
// on the diagonal block and the online softmax in the exp2 domain in registers on S's
// D fragment, then O += P V by wgmma with P from registers as A (the D fragment of S, two
// 8-column groups a k step, is A's register fragment once rounded to bf16) and V as an
// MN-major B: V is stored [key][d], so a TMA box of 128 bytes of d x 128 keys is the
// transposed layout's swizzle atom as it lands, and the transposed descriptor
// (wgmma_desc_mn) reads it with no copy. GQA: K and V are the KV head h / (heads /
// kv_heads)'s (each head's list is its own, so a CTA serves one head). Inside a warpgroup
// tile t's softmax runs while tile t - 1's P V is on the tensor cores (FlashAttention-3's
// intra-warpgroup overlap); FlashAttention-3's ping-pong of the two warpgroups is not
// used: with the softmax this short it was slower.
#pragma once
#include "block/block_params.cuh"
#include "block/block_select_kernel.cuh"
#include "block/online_softmax.cuh"
#include "ptx/mbarrier.cuh"
#include "common/ring_slot.cuh"
#include "ptx/tma.cuh"
#include "ptx/wgmma_ops.cuh"
#include "block/wgmma_q_tile.cuh"
#include "ptx/wgmma_tiles.cuh"

namespace winnow {

template <class C>
__device__ void block_attention_wgmma(const BlockAttentionParams& p, const TmaMap* kmap,
                                      const TmaMap* vmap, unsigned char* smem) {
  constexpr int D = C::kDim, T = kBlockTokens, RB = D * 2, ATOMS = RB / 128, DT = D / 8;
  constexpr WgmmaAttentionSmem L{D};
  constexpr int STAGES = WgmmaAttentionSmem::kStages;
  static_assert(C::kThreads == kWgmmaAttentionThreads, "two math warpgroups and a producer one");
  static_assert(D == 64 || D == 128, "d = 64 or 128");
  const int I = p.blocks - 1 - int(blockIdx.x / C::kHeads);
  const int h = int(blockIdx.x % C::kHeads), kv = h / (C::kHeads / C::kKvHeads);
  const int first = p.offsets[h * p.blocks + I];
  const int tiles = p.offsets[h * p.blocks + I + 1] - first;
  char* base = reinterpret_cast<char*>(smem);
  u64* full = reinterpret_cast<u64*>(smem + L.barriers_off());
  u64* empty = full + STAGES;          // the K ring's
  u64* vfull = full + 2 * STAGES;      // the V ring's
  u64* vempty = full + 3 * STAGES;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbarrier_init(full + s, 1);      // the producer's arrival, with the tile's bytes
      mbarrier_init(empty + s, kWgmmaAttentionMathThreads / 32);  // one per math warp
      mbarrier_init(vfull + s, 1);
      mbarrier_init(vempty + s, kWgmmaAttentionMathThreads / 32);
    }
    mbarrier_init_fence();
  }
  __syncthreads();

  if (int(threadIdx.x) >= kWgmmaAttentionMathThreads) {  // the producer warpgroup
    setmaxnreg_dec<kWgmmaAttentionProducerRegs>();
    if (int(threadIdx.x) == kWgmmaAttentionMathThreads) {
      tma_prefetch(kmap);
      tma_prefetch(vmap);
      RingSlot slot = ring_slot(0, STAGES);
      for (int t = 0; t < tiles; ++t) {
        const int key0 = p.indices[first + t] * T;
        char* kdst = base + L.stage_off(slot.stage);
        char* vdst = kdst + L.tile_bytes();
        mbarrier_wait(empty + slot.stage, slot.parity ^ 1u);
        mbarrier_arrive_expect_tx(full + slot.stage, unsigned(L.tile_bytes()));
#pragma unroll
        for (int a = 0; a < ATOMS; ++a)
          tma_load_2d(kdst + a * T * 128, kmap, full + slot.stage, kv * RB + a * 128, key0);
        mbarrier_wait(vempty + slot.stage, slot.parity ^ 1u);
        mbarrier_arrive_expect_tx(vfull + slot.stage, unsigned(L.tile_bytes()));
#pragma unroll
        for (int a = 0; a < ATOMS; ++a)
          tma_load_2d(vdst + a * T * 128, vmap, vfull + slot.stage, kv * RB + a * 128, key0);
        slot.advance(STAGES);
      }
    }
    return;
  }

  setmaxnreg_inc<kWgmmaAttentionMathRegs>();
  const int wg = int(threadIdx.x) >> 7, w = (int(threadIdx.x) >> 5) & 3;
  const int lane = int(threadIdx.x) & 31, g = lane >> 2, t4 = lane & 3;
  store_q_tile<D, C::kHeads>(p.q, base, I, h, wg);
  const long long row0 = (long long)I * T + wg * 64 + w * 16;
  const long long qpos[2] = {row0 + g, row0 + g + 8};
  const u32 qlo = wgmma_desc_lo(base);

  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;
  float m[2] = {minus_infinity(), minus_infinity()}, l[2] = {0.0f, 0.0f};
  float s[T / 2];
  u32 pa[T / 16][4];
  // S = Q K^T of the tile at `keys` (64 x 128, the D fragment: s[4 j + i] is row
  // g + 8 (i / 2), key 8 j + 2 t4 + i % 2), issued and committed.
  auto issue_s = [&](const char* keys) {
    const u32 klo = wgmma_desc_lo(keys);
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      wgmma_m64n<T, kElemBF16>(s, wgmma_desc_from_lo(qlo, swizzled_at<T>(wg * 64, ks * 32)),
                               wgmma_desc_from_lo(klo, swizzled_at<T>(0, ks * 32)), ks > 0);
    }
    wgmma_commit();
  };
  // O += P V for the tile whose values are at `values` (one k step of 16 keys a wgmma: P's
  // registers pa[ks] in A's order; V's rows 16 ks.., its two 64-column atoms T * 128 apart).
  auto issue_pv = [&](const char* values) {
#pragma unroll
    for (int ks = 0; ks < T / 16; ++ks)
      wgmma_m64n_bf16_rs_mn<D>(o, pa[ks], wgmma_desc_mn(values + ks * 16 * 128, T * 128), 1);
    wgmma_commit();
  };
  // The online softmax of S in place (P = exp2(S scale - m)); corr: the factor O takes.
  auto softmax = [&](bool diagonal, float (&corr)[2]) {
    // The causal mask on the diagonal block only, in the block's own coordinates: element
    // i is key 8 (i / 4) + 2 t4 + i % 2 of row wg 64 + w 16 + g + 8 ((i / 2) % 2).
    if (diagonal) {
      const int d0 = 2 * t4 - (wg * 64 + w * 16 + g);
#pragma unroll
      for (int i = 0; i < T / 2; ++i) {
        if (d0 + 8 * (i >> 2) + (i & 1) - 8 * ((i >> 1) & 1) > 0) s[i] = minus_infinity();
      }
    }
    // The rows' maxima of the scaled scores: the maxima of the raw ones, scaled (the scale
    // is positive and rounding monotonic: the same bits).
    float mx[2] = {minus_infinity(), minus_infinity()};
#pragma unroll
    for (int i = 0; i < T / 2; ++i) mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], s[i]);
    mx[0] = __fmul_rn(mx[0], p.scale_log2);
    mx[1] = __fmul_rn(mx[1], p.scale_log2);
    quad_row_maxima(mx, m, l, corr);
    // One fused multiply-add and one ex2 an element; a row whose maximum is still -inf
    // (every score masked or -inf) subtracts 0, so that its -inf scores give 0, not NaN.
    const float mb[2] = {m[0] == minus_infinity() ? 0.0f : m[0], m[1] == minus_infinity() ? 0.0f : m[1]};
#pragma unroll
    for (int i = 0; i < T / 2; ++i) {
      s[i] = exp2_approx(__fmaf_rn(s[i], p.scale_log2, -mb[(i >> 1) & 1]));
      l[(i >> 1) & 1] = __fadd_rn(l[(i >> 1) & 1], s[i]);
    }
  };
  // O takes the tile's correction, then P is packed from S (every P register written before
  // the next fence: a register write between the MMAs would make ptxas wait for each).
  auto correct_and_pack = [&](const float (&corr)[2]) {
    if (corr[0] != 1.0f || corr[1] != 1.0f) {
#pragma unroll
      for (int i = 0; i < D / 2; ++i) o[i] *= corr[(i >> 1) & 1];
    }
#pragma unroll
    for (int ks = 0; ks < T / 16; ++ks) {
#pragma unroll
      for (int r = 0; r < 4; ++r) pa[ks][r] = pack_bf16x2(s[8 * ks + 2 * r], s[8 * ks + 2 * r + 1]);
    }
  };
  auto release = [&](u64* bar) {
    __syncwarp();  // the warp's MMAs on the buffer are complete
    if (lane == 0) mbarrier_arrive(bar);
  };
  // FlashAttention-3's overlap inside a warpgroup: tile t's S is issued together with tile
  // t - 1's P V, and tile t's softmax runs while that P V is on the tensor cores. One S and
  // one P set of registers suffice: P is repacked from S only once the P V that read the
  // previous P is complete, and the next S is issued after the packing. Every O element
  // sees the same operations in the same order as with no overlap (+= P V of tile t - 1,
  // *= tile t's correction, += P V of tile t). K and V have their own full/empty barriers
  // on the two stages: tile t's K goes back to the producer once S is complete, tile t - 1's
  // V once its P V is, so that the producer loads tile t + 1's K during tile t (one ring of
  // whole stages released after P V left it no time). The first tile is peeled, so that
  // every P V issued in the loop is waited for in the same iteration (ptxas serialises the
  // MMAs otherwise).
  if (tiles > 0) {
    RingSlot slot = ring_slot(0, STAGES);
    mbarrier_wait(full + slot.stage, slot.parity);
    const char* keys = base + L.stage_off(slot.stage);
    wgmma_fence();
    issue_s(keys);
    wgmma_wait<0>();
    wgmma_pin(s);
    release(empty + slot.stage);
    float corr[2];
    softmax(p.indices[first] == I, corr);
    correct_and_pack(corr);
    RingSlot prev = slot;
    slot.advance(STAGES);
    for (int t = 1; t < tiles; ++t) {
      mbarrier_wait(full + slot.stage, slot.parity);
      keys = base + L.stage_off(slot.stage);
      mbarrier_wait(vfull + prev.stage, prev.parity);
      wgmma_fence();
      issue_s(keys);
      issue_pv(base + L.stage_off(prev.stage) + L.tile_bytes());
      wgmma_wait<1>();  // S is complete; the P V may still run
      wgmma_pin(s);
      release(empty + slot.stage);
      softmax(p.indices[first + t] == I, corr);
      wgmma_wait<0>();
      wgmma_pin(o);
      wgmma_pin_u32(pa);
      release(vempty + prev.stage);
      correct_and_pack(corr);
      prev = slot;
      slot.advance(STAGES);
    }
    mbarrier_wait(vfull + prev.stage, prev.parity);
    wgmma_fence();
    issue_pv(base + L.stage_off(prev.stage) + L.tile_bytes());
    wgmma_wait<0>();
    wgmma_pin(o);
    release(vempty + prev.stage);
  }

  float inv[2];
  quad_row_inverses(l, inv);
  const long long rs = (long long)C::kHeads * D;
#pragma unroll
  for (int dt = 0; dt < DT; ++dt) {
    const int c = dt * 8 + 2 * t4;
    *reinterpret_cast<u32*>(p.out + qpos[0] * rs + (long long)h * D + c) =
        pack_bf16x2(o[4 * dt] * inv[0], o[4 * dt + 1] * inv[0]);
    *reinterpret_cast<u32*>(p.out + qpos[1] * rs + (long long)h * D + c) =
        pack_bf16x2(o[4 * dt + 2] * inv[1], o[4 * dt + 3] * inv[1]);
  }
}

}  // namespace winnow

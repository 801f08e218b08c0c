// Block-sparse causal attention over the CSR block index of block-select (bf16, GQA).
//
// One CTA per (head h, query block I), one warp per 16 query rows: q fragments stay in
// registers; the CTA walks the key blocks listed for (h, I) (ascending, so the diagonal
// block comes last) in tiles of C::kTile keys, loading K and V tiles by cp.async two
// stages deep, and runs flash attention on them: S = q K^T on the tensor cores, the
// causal mask on the diagonal block, an online softmax in the exp2 domain, O += P V with
// P rounded to bf16 and V read by ldmatrix.trans. No masked block is ever visited.
#pragma once
#include "block/block_select_kernel.cuh"
#include "block/online_softmax.cuh"

namespace winnow {

template <class C>
__device__ void block_attention(const BlockAttentionParams& p, unsigned char* smem) {
  constexpr int D = C::kDim, T = C::kTile, NT = T / 8, DT = D / 8, TPB = kBlockTokens / T;
  constexpr AttentionSmem L{D, T};
  constexpr int RB = L.row_bytes();
  static_assert(C::kThreads / 32 * 16 == kBlockTokens, "one warp per 16 query rows");
  static_assert(D % 16 == 0 && T % 16 == 0 && kBlockTokens % T == 0, "tile shapes");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
  const int I = p.blocks - 1 - int(blockIdx.x / C::kHeads);
  const int h = int(blockIdx.x % C::kHeads), kv = h / (C::kHeads / C::kKvHeads);
  const int first = p.offsets[h * p.blocks + I];
  const int tiles = (p.offsets[h * p.blocks + I + 1] - first) * TPB;
  const long long kv_stride = (long long)C::kKvHeads * D;

  u32 a[D / 16][4];
  const long long row0 = (long long)I * kBlockTokens + warp * 16;
  load_q_fragments<D, C::kHeads>(p.q, row0, h, g, t4, a);

  auto load_tile = [&](int t, int stage) {
    const long long key0 = (long long)p.indices[first + t / TPB] * kBlockTokens + (t % TPB) * T;
    char* kdst = reinterpret_cast<char*>(smem) + stage * L.stage_bytes();
    char* vdst = kdst + T * RB;
    constexpr int VPR = D * 2 / 16;
    for (int e = threadIdx.x; e < T * VPR; e += C::kThreads) {
      const int j = e / VPR, v = e % VPR;
      const long long at = (key0 + j) * kv_stride + (long long)kv * D;
      copy_async_16(kdst + j * RB + v * 16, reinterpret_cast<const char*>(p.k + at) + v * 16, true);
      copy_async_16(vdst + j * RB + v * 16, reinterpret_cast<const char*>(p.v + at) + v * 16, true);
    }
    copy_async_commit();
  };

  float o[DT][4];
#pragma unroll
  for (int dt = 0; dt < DT; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
  float m[2] = {minus_infinity(), minus_infinity()}, l[2] = {0.0f, 0.0f};
  const long long qpos[2] = {row0 + g, row0 + g + 8};

  if (tiles > 0) load_tile(0, 0);
  for (int t = 0; t < tiles; ++t) {
    if (t + 1 < tiles) load_tile(t + 1, (t + 1) & 1);
    else copy_async_commit();
    copy_async_wait<1>();
    __syncthreads();
    const char* keys = reinterpret_cast<const char*>(smem) + (t & 1) * L.stage_bytes();
    const char* values = keys + T * RB;
    const int J = p.indices[first + t / TPB];
    const long long key0 = (long long)J * kBlockTokens + (t % TPB) * T;
    const bool diagonal = J == I;

    float s[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) dot_16x8<D>(a, keys + nt * 8 * RB, RB, lane, s[nt]);
    // The causal mask on the diagonal block only.
    if (diagonal) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          if (key0 + nt * 8 + 2 * t4 + (i & 1) > qpos[i >> 1]) s[nt][i] = minus_infinity();
        }
      }
    }
    // The rows' maxima of the scaled scores: the maxima of the raw ones, scaled (the scale
    // is positive and rounding monotonic: the same bits).
    float mx[2] = {minus_infinity(), minus_infinity()};
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) mx[i >> 1] = fmaxf(mx[i >> 1], s[nt][i]);
    }
    mx[0] = __fmul_rn(mx[0], p.scale_log2);
    mx[1] = __fmul_rn(mx[1], p.scale_log2);
    float corr[2];
    quad_row_maxima(mx, m, l, corr);
    // Most tiles leave both row maxima where they were: then nothing to rescale.
    if (corr[0] != 1.0f || corr[1] != 1.0f) {
#pragma unroll
      for (int dt = 0; dt < DT; ++dt) {
        o[dt][0] *= corr[0], o[dt][1] *= corr[0], o[dt][2] *= corr[1], o[dt][3] *= corr[1];
      }
    }
    // p = exp2(s scale - m), one fused multiply-add and one ex2 an element (a row whose
    // maximum is still -inf subtracts 0: its -inf scores give 0, not NaN).
    const float mb[2] = {m[0] == minus_infinity() ? 0.0f : m[0], m[1] == minus_infinity() ? 0.0f : m[1]};
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        s[nt][i] = exp2_approx(__fmaf_rn(s[nt][i], p.scale_log2, -mb[i >> 1]));
        l[i >> 1] = __fadd_rn(l[i >> 1], s[nt][i]);
      }
    }
    // O += P V: P's accumulator layout is the A fragment layout of the next mma.
#pragma unroll
    for (int ks = 0; ks < T / 16; ++ks) {
      const u32 pa[4] = {pack_bf16x2(s[2 * ks][0], s[2 * ks][1]),
                         pack_bf16x2(s[2 * ks][2], s[2 * ks][3]),
                         pack_bf16x2(s[2 * ks + 1][0], s[2 * ks + 1][1]),
                         pack_bf16x2(s[2 * ks + 1][2], s[2 * ks + 1][3])};
      const int mat = lane >> 3, key = ks * 16 + (mat & 1) * 8 + (lane & 7);
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        u32 b0, b1, b2, b3;
        ldmatrix_x4_trans(values + key * RB + (dp * 16 + (mat >> 1) * 8) * 2, b0, b1, b2, b3);
        mma_bf16_16816(pa, b0, b1, o[2 * dp][0], o[2 * dp][1], o[2 * dp][2], o[2 * dp][3]);
        mma_bf16_16816(pa, b2, b3, o[2 * dp + 1][0], o[2 * dp + 1][1], o[2 * dp + 1][2],
                       o[2 * dp + 1][3]);
      }
    }
    __syncthreads();
  }

  float inv[2];
  quad_row_inverses(l, inv);
  const long long rs = (long long)C::kHeads * D;
#pragma unroll
  for (int dt = 0; dt < DT; ++dt) {
    const int c = dt * 8 + 2 * t4;
    *reinterpret_cast<u32*>(p.out + qpos[0] * rs + (long long)h * D + c) =
        pack_bf16x2(o[dt][0] * inv[0], o[dt][1] * inv[0]);
    *reinterpret_cast<u32*>(p.out + qpos[1] * rs + (long long)h * D + c) =
        pack_bf16x2(o[dt][2] * inv[1], o[dt][3] * inv[1]);
  }
}

}  // namespace winnow

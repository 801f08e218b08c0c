// Scoring one loaded key tile against the rows of the block: dot products on the CUDA
// cores, mma.sync or wgmma, the head sums next to the accumulators, and the visit of every
// (row, key) score. The fused and the materialize kernels run this same code (same bits).
#pragma once
#include "common/element_decode.cuh"
#include "ptx/mma_sync.cuh"
#include "common/score_ops.cuh"
#include "topk/topk_params.cuh"
#include "topk/topk_smem.cuh"
#include "ptx/wgmma_tiles.cuh"

// Switch: the relu of an fp8 dot as x + |x| (one FADD on the FMA pipe; 2 relu(x) for
// every finite x, NaN for NaN) against weights stored halved (relus_by_add below), where
// max.NaN takes the ALU pipe at half rate: faster in the fused kernel (the materialize
// kernel within noise). -DWINNOW_RELU_FADD=0
// goes back to max.NaN.
#ifndef WINNOW_RELU_FADD
#define WINNOW_RELU_FADD 1
#endif

namespace winnow {

// Dot products on the CUDA cores, four keys per thread (j, j + KT/4, ...: consecutive
// threads read consecutive padded key rows, on different banks). Each accumulates over
// d in order, the same order in every mode, so fused and materialize scores have the
// same bits.
template <class C>
__device__ void cuda_core_dots(const TopkSmem<C>& s) {
  constexpr int R = C::kRows, H = C::kHeads, D = C::kDim, KT = C::kKeyTile;
  constexpr int KS = D + 1, DS = H + 1;
  constexpr int KQ = KT / 4;
  for (int item = threadIdx.x; item < R * H * KQ; item += C::kThreads) {
    int j = item % KQ, rh = item / KQ;
    const float* qv = s.q + rh * D;
    const float* k0 = s.k + j * KS;
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
#pragma unroll 8
    for (int i = 0; i < D; ++i) {
      float x = qv[i];
      a0 = fmaf(x, k0[i], a0);
      a1 = fmaf(x, k0[KQ * KS + i], a1);
      a2 = fmaf(x, k0[2 * KQ * KS + i], a2);
      a3 = fmaf(x, k0[3 * KQ * KS + i], a3);
    }
    int r = rh / H, h = rh % H;
    float* d = s.dots + (r * KT + j) * DS + h;
    d[0] = a0;
    d[KQ * DS] = a1;
    d[2 * KQ * DS] = a2;
    d[3 * KQ * DS] = a3;
  }
}

// Dot products on the tensor cores (mma.sync, fp32 accumulation): q rows [R*H][D] times
// the key tile [KT][D], one 16 x 8 output block per warp step. The fused and the
// materialize kernels run this same code, so their scores have the same bits.
// One mma.sync k-step: c += A (16 x KSTEP, fragment a) * B (KSTEP x 8, fragment b0 b1),
// fp32 accumulation, for the stored element type.
template <class C>
__device__ __forceinline__ void mma_step(const u32 (&a)[4], u32 b0, u32 b1, float& c0, float& c1,
                                         float& c2, float& c3) {
  if (C::kMma == kElemE4M3) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else if (C::kMma == kElemBF16) {
    mma_bf16_16816(a, b0, b1, c0, c1, c2, c3);
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// One 16 x 8 block of dot products on the tensor cores (mma.sync, fp32 accumulation):
// q rows qa.. qa + 15 (stored form, padded rows) times keys kb .. kb + 7, over all of d.
// c0, c1: row g, keys 2 * t4 and 2 * t4 + 1; c2, c3: row g + 8 (PTX ISA fragment layouts).
template <class C>
__device__ __forceinline__ void mma_block(const char* qa, const char* kb, int t4, float& c0,
                                          float& c1, float& c2, float& c3) {
  constexpr int D = C::kDim, EB = MmaBytes<C>::value, RB = D * EB + 16;
  constexpr int KSTEP = EB == 1 ? 32 : 16;  // k elements per mma
  c0 = c1 = c2 = c3 = 0.0f;
#pragma unroll
  for (int kk = 0; kk < D; kk += KSTEP) {
    // Byte offsets of this thread's fragment columns.
    const int lo = (kk + t4 * (EB == 1 ? 4 : 2)) * EB;
    const int hi = lo + (KSTEP / 2) * EB;
    const u32 a[4] = {*reinterpret_cast<const u32*>(qa + lo),
                      *reinterpret_cast<const u32*>(qa + 8 * RB + lo),
                      *reinterpret_cast<const u32*>(qa + hi),
                      *reinterpret_cast<const u32*>(qa + 8 * RB + hi)};
    mma_step<C>(a, *reinterpret_cast<const u32*>(kb + lo), *reinterpret_cast<const u32*>(kb + hi),
                c0, c1, c2, c3);
  }
}

// Dot products on the tensor cores, written to s.dots: one 16 x 8 block per warp step.
// The fused and the materialize kernels run this same code, so their scores have the
// same bits.
template <class C>
__device__ void mma_dots(const TopkSmem<C>& s) {
  constexpr int H = C::kHeads, KT = C::kKeyTile, DS = H + 1;
  constexpr int MT = C::kRows * H / 16, NT = KT / 8, RB = C::kDim * MmaBytes<C>::value + 16;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
  const char* qraw = reinterpret_cast<const char*>(s.q);
  const char* kraw = reinterpret_cast<const char*>(s.k);
  for (int t = warp; t < MT * NT; t += C::kThreads / 32) {
    const int mt = t / NT, nt = t % NT;
    float c0, c1, c2, c3;
    mma_block<C>(qraw + (mt * 16 + g) * RB, kraw + (nt * 8 + g) * RB, t4, c0, c1, c2, c3);
    const int j = nt * 8 + 2 * t4;
    const int rh0 = mt * 16 + g, rh1 = rh0 + 8;
    float* d0 = s.dots + ((rh0 / H) * KT + j) * DS + rh0 % H;
    float* d1 = s.dots + ((rh1 / H) * KT + j) * DS + rh1 % H;
    d0[0] = c0;
    d0[DS] = c1;
    d1[0] = c2;
    d1[DS] = c3;
  }
}

// The head-sum form (S::kHeadSum: score = post(sum_h term(dot(h), w[h]))): each warp
// keeps the q fragments of one 16-head block in registers for the whole tile, runs it
// against every key, applies term to the accumulators and sums its 16 heads by a fixed
// butterfly of shuffles. Writes one partial sum per (16-head block, key) to s.dots;
// score_of adds a row's blocks in order. No dot goes through shared memory.
template <class C, class S>
__device__ void mma_head_sums(const TopkSmem<C>& s) {
  constexpr int D = C::kDim, KT = C::kKeyTile, EB = MmaBytes<C>::value, RB = D * EB + 16;
  constexpr int MT = C::kRows * C::kHeads / 16, NT = KT / 8;
  constexpr int KSTEP = EB == 1 ? 32 : 16, KSTEPS = D / KSTEP;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
  const char* qraw = reinterpret_cast<const char*>(s.q);
  const char* kraw = reinterpret_cast<const char*>(s.k);
  for (int mt = warp; mt < MT; mt += C::kThreads / 32) {
    const char* qa = qraw + (mt * 16 + g) * RB;
    u32 a[KSTEPS][4];
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) {
      const int lo = (ks * KSTEP + t4 * (EB == 1 ? 4 : 2)) * EB, hi = lo + (KSTEP / 2) * EB;
      a[ks][0] = *reinterpret_cast<const u32*>(qa + lo);
      a[ks][1] = *reinterpret_cast<const u32*>(qa + 8 * RB + lo);
      a[ks][2] = *reinterpret_cast<const u32*>(qa + hi);
      a[ks][3] = *reinterpret_cast<const u32*>(qa + 8 * RB + hi);
    }
    const float w0 = s.w[mt * 16 + g], w1 = s.w[mt * 16 + g + 8];
    for (int nt = 0; nt < NT; ++nt) {
      const char* kb = kraw + (nt * 8 + g) * RB;
      float c0 = 0.0f, c1 = 0.0f, c2 = 0.0f, c3 = 0.0f;
#pragma unroll
      for (int ks = 0; ks < KSTEPS; ++ks) {
        const int lo = (ks * KSTEP + t4 * (EB == 1 ? 4 : 2)) * EB, hi = lo + (KSTEP / 2) * EB;
        u32 b0 = *reinterpret_cast<const u32*>(kb + lo);
        u32 b1 = *reinterpret_cast<const u32*>(kb + hi);
        mma_step<C>(a[ks], b0, b1, c0, c1, c2, c3);
      }
      // A term may read the key's scale (the same for every head).
      const int j0 = nt * 8 + 2 * t4;
      const float ks0 = C::kUsesKScale ? s.kscale[j0] : 1.0f;
      const float ks1 = C::kUsesKScale ? s.kscale[j0 + 1] : 1.0f;
      float p0 = op_add(S::term(c0, w0, ks0), S::term(c2, w1, ks0));  // key 2 * t4
      float p1 = op_add(S::term(c1, w0, ks1), S::term(c3, w1, ks1));  // key 2 * t4 + 1
#pragma unroll
      for (int o = 4; o < 32; o <<= 1) {
        p0 = op_add(p0, __shfl_xor_sync(0xFFFFFFFFu, p0, o));
        p1 = op_add(p1, __shfl_xor_sync(0xFFFFFFFFu, p1, o));
      }
      if (g == 0) {
        s.dots[mt * KT + nt * 8 + 2 * t4] = p0;
        s.dots[mt * KT + nt * 8 + 2 * t4 + 1] = p1;
      }
    }
  }
}

// g(dot) of a weighted head-sum term w * g(dot). For g = relu, max.NaN(dot, +0): one
// instruction where `dot < 0 ? 0 : dot` takes two; it differs only in relu(-0) = +0, and a
// zero product never changes a sum that starts at +0 (fma(w, +-0, p) == p, p == +0 too), so
// the head sums have the same bits either way.
// relus_by_add: for e4m3 keys and queries every dot is finite (|dot| <= 448^2 d), so
// x + |x| is exactly 2 relu(x) (+0 for x <= 0; NaN stays NaN), and with the weights stored
// halved (exact for every normal weight) fma(w / 2, x + |x|, p) == fma(w, relu(x), p): the
// same sums, one FADD instead of max.NaN. A subnormal weight loses its last bit when
// halved; fused and materialize read the same halved weights, so they agree bit for bit.
template <class C, class S>
__host__ __device__ constexpr bool relus_by_add() {
  if constexpr (WINNOW_RELU_FADD && C::kWgmma && C::kMma == kElemE4M3 &&
                S::kHeadSum) {
    return S::kWeightedTerm && S::kReluOfDot;
  } else {
    return false;
  }
}

template <class C, class S>
__device__ __forceinline__ float weighted_factor(float dot, float kscale) {
  if constexpr (relus_by_add<C, S>()) {
    return __fadd_rn(dot, fabsf(dot));
  } else if constexpr (S::kReluOfDot) {
    return max_nan_zero(dot);
  } else {
    return S::unweighted(dot, kscale);
  }
}

// The head-sum form on warpgroup MMA (sm_90a): warpgroup g scores keys 64 g .. 64 g + 63
// of the tile (A: the swizzled key tile) against all 128 (row, head) pairs of the block
// (B: the swizzled q rows), d / k-step m64n128 wgmma instructions into 64 fp32 accumulators
// per thread. (Two m64n64 banks with the first's sums under the second's MMAs, DeepGEMM's
// form, is slower here: each bank reads the key tile again, and shared-memory
// bandwidth is the tighter limit.) A thread holds keys key0 and key0 + 8 (the D fragment's
// rows) and heads 8 j + 2 t4, + 1 of every row (its columns): it sums term(dot, w) over its
// 16 heads of a row in a fixed order, and two shuffles leave the row's sum in all four
// lanes of the quad; the 2 R (row, key) scores of a quad are visited by its lanes in turn,
// straight from the registers (wgmma_tile_visits; the math loops of key_tile_loop.cuh run
// it). Fused and materialize kernels run this same code (same bits).
// wgmma_first_key: the thread's first key slot of the tile.
template <class C>
__device__ __forceinline__ int wgmma_first_key() {
  const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  return wg * 64 + warp * 16 + (lane >> 2);
}

// The low descriptor words of a math warpgroup's operands (wgmma_ops.cuh) at key stage 0:
// A, its 64 keys of the tile; B, the q tile. Computed once per tile list: stage i's A is a
// constant step from stage 0's, each k step a constant offset, so a tile's MMAs need no
// address arithmetic beyond one multiply-add. (The warpgroup index is taken from lane 0,
// which tells the compiler that it is the same in the warp: uniform registers.)
struct WgmmaTileDescs {
  u32 a_lo0, b_lo;
};
template <class C>
__device__ __forceinline__ WgmmaTileDescs wgmma_tile_descs(const TopkSmem<C>& s) {
  const int wg = __shfl_sync(0xFFFFFFFFu, int(threadIdx.x >> 7), 0);
  return {wgmma_desc_lo(reinterpret_cast<const char*>(s.k) + swizzled_at<C::kKeyTile>(wg * 64, 0)),
          wgmma_desc_lo(s.q)};
}

// The same descriptors from a stage's own view (st = with_stage(s, i)), computed per tile
// by the pipelined loop (its PTX stays that of its tuned kernel).
template <class C>
__device__ __forceinline__ WgmmaTileDescs wgmma_stage_descs(const TopkSmem<C>& st) {
  return {wgmma_desc_lo(reinterpret_cast<const char*>(st.k) +
                        swizzled_at<C::kKeyTile>((threadIdx.x >> 7) * 64, 0)),
          wgmma_desc_lo(st.q)};
}

// Issues the m64n128 MMAs of the key tile in stage `stage` into d and commits them as one
// group (w: stage 0's descriptors, or stage `stage`'s own with stage 0).
template <class C>
__device__ __forceinline__ void wgmma_issue_tile(const WgmmaTileDescs& w, int stage, float (&d)[64]) {
  constexpr int R = C::kRows, H = C::kHeads, KT = C::kKeyTile;
  constexpr int RB = C::kDim * MmaBytes<C>::value;
  constexpr u32 kStageStep = u32(layout_of<C>().k_stage_words() * 4 / 16);  // descriptor units
  const u32 a_lo = w.a_lo0 + u32(stage) * kStageStep;
  wgmma_fence();
#pragma unroll
  for (int k0 = 0; k0 < RB; k0 += 32) {
    wgmma_m64n<128, C::kMma>(d, wgmma_desc_from_lo(a_lo, swizzled_at<KT>(0, k0)),
                             wgmma_desc_from_lo(w.b_lo, swizzled_at<R * H>(0, k0)), k0 > 0);
  }
  wgmma_commit();
}

// A lane's partial head sums of row r from its accumulators dr (the row's 32: heads
// 8 jj + 2 t4, + 1 for keys key0 and key0 + 8): term(dot, w) over its 16 heads in a fixed
// order. weight(r, jj): the row's weights of heads 8 jj + 2 t4, + 1.
template <class C, class S, class Weight>
__device__ __forceinline__ void wgmma_lane_partials(const float* dr, Weight weight, int r,
                                                    float ks0, float ks1, float& p0, float& p1) {
  constexpr int H = C::kHeads;
  p0 = 0.0f;
  p1 = 0.0f;
#pragma unroll
  for (int jj = 0; jj < H / 8; ++jj) {
    const float2 w = weight(r, jj);
    if constexpr (S::kWeightedTerm) {
      // term = w * g(dot): one fused multiply-add per head (one rounding), in the same
      // fixed order in every mode.
      p0 = __fmaf_rn(w.x, weighted_factor<C, S>(dr[4 * jj], ks0), p0);
      p1 = __fmaf_rn(w.x, weighted_factor<C, S>(dr[4 * jj + 2], ks1), p1);
      p0 = __fmaf_rn(w.y, weighted_factor<C, S>(dr[4 * jj + 1], ks0), p0);
      p1 = __fmaf_rn(w.y, weighted_factor<C, S>(dr[4 * jj + 3], ks1), p1);
      continue;
    }
    const float a0 = op_add(S::term(dr[4 * jj], w.x, ks0), S::term(dr[4 * jj + 1], w.y, ks0));
    const float a1 = op_add(S::term(dr[4 * jj + 2], w.x, ks1), S::term(dr[4 * jj + 3], w.y, ks1));
    p0 = jj == 0 ? a0 : op_add(p0, a0);
    p1 = jj == 0 ? a1 : op_add(p1, a1);
  }
}

// The head sums and visits of one tile from its completed accumulators d: row r's sum over
// its heads for keys key0 and key0 + 8 (wgmma_lane_partials), then two shuffles across the
// quad ((P0 + P1) + (P2 + P3) in every lane: IEEE addition commutes); then the 2 R (row,
// key) scores of a quad visited by its lanes in turn. weight(r, jj): the row's weights of
// heads 8 jj + 2 t4, + 1 (from shared memory, or registers held for the whole list).
template <class C, class S, class Weight, class KeyOf, class Visit>
__device__ __forceinline__ void wgmma_tile_visits(const float (&d)[64], float ks0, float ks1,
                                                  Weight weight, KeyOf key_of, Visit visit) {
  constexpr int H = C::kHeads, R = C::kRows;
  const int t4 = threadIdx.x & 3;
  const int key0 = wgmma_first_key<C>();
  float sums[R][2];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float p0, p1;
    wgmma_lane_partials<C, S>(d + r * (H / 2), weight, r, ks0, ks1, p0, p1);
    p0 = op_add(p0, __shfl_xor_sync(0xFFFFFFFFu, p0, 1));
    p1 = op_add(p1, __shfl_xor_sync(0xFFFFFFFFu, p1, 1));
    sums[r][0] = op_add(p0, __shfl_xor_sync(0xFFFFFFFFu, p0, 2));
    sums[r][1] = op_add(p1, __shfl_xor_sync(0xFFFFFFFFu, p1, 2));
  }
#pragma unroll
  for (int c = 0; c < 2 * R; c += 4) {
    const int r = (c + t4) >> 1, second = (c + t4) & 1, j = key0 + 8 * second;
    const int key = key_of(j);
    if (key < 0) continue;
    ScoreArgs a{};  // post reads no per-head value
    a.kscale = second ? ks1 : ks0;
    float hsum = sums[0][0];  // sums[r][second], by constant indices only
#pragma unroll
    for (int rr = 0; rr < R; ++rr) {
      if (rr == r) hsum = second ? sums[rr][1] : sums[rr][0];
    }
    visit(r, key, S::post(hsum, a));
  }
}

// Whether the kernel sums heads next to the accumulators (the plan decides: tensor cores,
// whole 16-head fragments, and a score of the head-sum form).
template <class C, class S>
struct UsesHeadSums {
  static_assert(!C::kHeadSums || (S::kHeadSum && C::kMma != 0 && C::kHeads % 16 == 0 &&
                                  C::kDim * MmaBytes<C>::value <= 256),
                "the plan's head sums need a head-sum score on the tensor cores, d <= 256 bytes");
  static constexpr bool value = C::kHeadSums;
};

// The score of (row r, key slot j) from what the dot step left in shared memory.
template <class C, class S>
__device__ __forceinline__ float score_of(const TopkSmem<C>& s, const ScoreArgs& a, int r, int j) {
  if constexpr (UsesHeadSums<C, S>::value) {
    constexpr int BLOCKS = C::kHeads / 16, KT = C::kKeyTile;
    const float* part = s.dots + r * BLOCKS * KT + j;
    float hsum = part[0];
#pragma unroll
    for (int b = 1; b < BLOCKS; ++b) hsum = op_add(hsum, part[b * KT]);
    return S::post(hsum, a);
  } else {
    return S::eval(a);
  }
}

// Starts loading keys key_of(0..KT-1) (negative: an empty slot) into stage `stage`: in
// the stored form by cp.async on the mma.sync path (complete after copy_async_wait), else
// decoded to fp32 by plain loads. (The wgmma path's producer warp loads its own tiles:
// key_tile_loop.cuh.)
template <class C, class KeyOf>
__device__ void load_key_tile(const TopkParams& p, const TopkSmem<C>& s, int stage, KeyOf key_of) {
  static_assert(!C::kWgmma, "the wgmma path loads key tiles by its producer warp");
  constexpr int D = C::kDim, KT = C::kKeyTile, KS = D + 1;
  if (C::kMma) {
    constexpr int EB = MmaBytes<C>::value, VPR = D * EB / 16, RB = D * EB + 16;
    char* dst = reinterpret_cast<char*>(with_stage<C>(s, stage).k);
    auto copy_chunk = [&](int j, int v) {  // chunk v of key slot j
      int key = key_of(j);
      const char* src = static_cast<const char*>(p.k) +
                        (key >= 0 ? key * p.k_row_stride * EB + v * 16 : 0);
      copy_async_16(dst + (j * RB + v * 16), src, key >= 0);
    };
    constexpr int STEP = VPR > 0 ? C::kThreads / VPR : 1;  // key slots per pass of the CTA
    if constexpr (VPR > 0 && C::kThreads % VPR == 0 && KT % STEP == 0) {
      // Thread t copies chunks e = t, t + kThreads, ... (slot e / VPR, chunk e % VPR): with
      // kThreads a multiple of VPR and the tile whole passes, chunk t % VPR of slots
      // t / VPR + i STEP, i < KT / STEP. The same copies in the same order, counted so
      // that each pass's offsets are a constant step from the first's, computed here per
      // tile rather than hoisted as registers per pass held across every tile loop.
      const unsigned t = unhoisted_thread_index();
      const int v = t % VPR, j0 = t / VPR;
#pragma unroll
      for (int i = 0; i < KT / STEP; ++i) copy_chunk(j0 + i * STEP, v);
    } else {
      for (int e = threadIdx.x; e < KT * VPR; e += C::kThreads) copy_chunk(e / VPR, e % VPR);
    }
    if (C::kUsesKScale) {  // in the same group as the keys
      float* scale = with_stage<C>(s, stage).kscale;
      for (int j = threadIdx.x; j < KT; j += C::kThreads) {
        const int key = key_of(j);
        copy_async_4(scale + j, p.kscale + (key >= 0 ? key : 0), key >= 0);
      }
    }
    copy_async_commit();
  } else {
    for (int e = threadIdx.x; e < KT * D; e += C::kThreads) {
      int j = e / D, i = e % D;
      int key = key_of(j);
      s.k[j * KS + i] = key >= 0 ? decode_element<C::kKElem>(p.k, key * p.k_row_stride + i) : 0.0f;
    }
  }
}

// Scores the key tile in stage `stage` (loaded, and visible after a barrier) against
// every row of the block and calls visit(r, key, score) for each. Called by the whole CTA.
// (The wgmma path scores in its math loops: key_tile_loop.cuh.)
template <class C, class S, class KeyOf, class Visit>
__device__ void score_loaded_tile(const TopkParams& p, const TopkSmem<C>& s0, int stage,
                                  KeyOf key_of, Visit visit) {
  static_assert(!C::kWgmma, "the wgmma path scores in its math loops");
  constexpr int R = C::kRows, H = C::kHeads, D = C::kDim, KT = C::kKeyTile;
  constexpr int KS = D + 1, DS = H + 1;
  const TopkSmem<C> s = with_stage<C>(s0, stage);
  if (C::kUsesKScale && !C::kMma) {  // the tensor-core path copied them with the keys
    for (int j = threadIdx.x; j < KT; j += C::kThreads) {
      int key = key_of(j);
      s.kscale[j] = key >= 0 ? p.kscale[key] : 0.0f;
    }
  }
  if (C::kUsesKSq) {
    for (int j = threadIdx.x; j < KT; j += C::kThreads) {
      if (p.ksq) {  // given by the caller
        const int key = key_of(j);
        s.ksq[j] = key >= 0 ? p.ksq[key] : 0.0f;
        continue;
      }
      const float* v = s.k + j * KS;
      float acc = 0.0f;
      for (int i = 0; i < D; ++i) acc = fmaf(v[i], v[i], acc);
      s.ksq[j] = acc;
    }
  }
  if constexpr (UsesHeadSums<C, S>::value) {
    mma_head_sums<C, S>(s);
  } else if (C::kMma) {
    mma_dots<C>(s);
  } else {
    cuda_core_dots<C>(s);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < R * KT; e += C::kThreads) {
    int r = e / KT, j = e % KT;
    int key = key_of(j);
    if (key < 0) continue;
    ScoreArgs a;
    a.dot = s.dots + (r * KT + j) * DS;
    a.w = s.w + r * H;
    a.kscale = C::kUsesKScale ? s.kscale[j] : 1.0f;
    a.qsq = s.qsq + r * H;
    a.ksq = C::kUsesKSq ? s.ksq[j] : 0.0f;
    visit(r, key, score_of<C, S>(s, a, r, j));
  }
  __syncthreads();
}

}  // namespace winnow

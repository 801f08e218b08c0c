// The fused score + exact top-k kernel (CUDA-core scoring), and its materialize mode.
//
// One CTA takes a block of C::kRows query rows at a time (persistent grid, work items
// drawn from a counter, heaviest first for causal windows). For each row it
//   1. scores a sample of its window (the caller's hint keys inside it, and a strided
//      subset) and takes the sample's k-th best as the low edge of the ThresholdBins (a
//      subset's k-th best never exceeds the row's);
//   2. streams the window in key tiles: scores each (row, key), keeps a histogram of
//      bins, and appends keys whose bin is at or above the row's gate to its
//      CandidateBuffer; after each tile the gate is raised from the histogram;
//   3. selects the exact top k from the CandidateBuffer by radix select on RankKeys
//      (unique, so exactly k survive), or, if the buffer ever overflowed, by radix
//      select over re-scored keys (the exact fallback, counted).
// The generated stub defines the config C (shape and plan constants) and the score
// functor S, and instantiates topk_kernel<C, S> in one extern "C" entry point.
#pragma once
#include "winnow/element_decode.cuh"
#include "winnow/mbarrier.cuh"
#include "winnow/mma_sync.cuh"
#include "winnow/rank_order.cuh"
#include "winnow/sample_keys.cuh"
#include "winnow/score_ops.cuh"
#include "winnow/smem_layout.cuh"
#include "winnow/tma.cuh"
#include "winnow/topk_params.cuh"
#include "winnow/wgmma_tiles.cuh"

// Switch: the two math warpgroups of the wgmma path take turns on the tensor cores
// (FlashAttention-3's ping-pong). -DWINNOW_PINGPONG=0 lets each issue its MMAs whenever its
// stage is ready: measured 2-4 % faster on the H200 (two CTAs per SM already interleave),
// exact on every checked row, but the [gpu] suite has not yet run with it, so the default
// stays the configuration that passed it (bench/NOTES.md, session 4).
#ifndef WINNOW_PINGPONG
#define WINNOW_PINGPONG 1
#endif
// Experiment switch: -DWINNOW_HEAD_SUM_FMA=0 sums w * g(dot) terms of the wgmma head sums
// as a product and an add each (two roundings) instead of one fused multiply-add.
#ifndef WINNOW_HEAD_SUM_FMA
#define WINNOW_HEAD_SUM_FMA 1
#endif
// Measurement switch: -DWINNOW_PHASE_CLOCKS=1 makes CTA 0 print the SM cycles its
// thread 0 spent in each step of the top-k (rows, sample, filter, select, write) at exit.
#ifndef WINNOW_PHASE_CLOCKS
#define WINNOW_PHASE_CLOCKS 0
#endif
// The cycle counts of WINNOW_PHASE_CLOCKS: mark(i) adds the time since the last mark to
// step i. Compiled away when off.
struct PhaseClocks {
  long long total[6] = {0, 0, 0, 0, 0, 0};
  long long last = 0;
  __device__ __forceinline__ void mark(int i) {
    if constexpr (WINNOW_PHASE_CLOCKS) {
      const long long now = clock64();
      if (i >= 0) total[i] += now - last;
      last = now;
    }
  }
};

// Experiment switch: -DWINNOW_RADIX_AGGREGATE=0 counts radix digits with one shared atomic
// per key instead of one per group of equal digits in a warp (__match_any_sync, since
// df0e6ea): a suspect of the knn slowdown at large k (bench/NOTES.md, session 3).
#ifndef WINNOW_RADIX_AGGREGATE
#define WINNOW_RADIX_AGGREGATE 1
#endif


namespace winnow {

// Per-row state in shared memory (16 words, see SmemLayout::rows_off).
struct RowState {
  int start, end;       // the part of the window this CTA scores [start, end)
  int bad;              // the window ran past num_keys: output all -1
  int gate;             // lowest bin still appended to the CandidateBuffer
  u32 count;            // keys appended (may exceed the capacity)
  u32 overflow;         // the buffer dropped a key, or kept fewer than k: exact fallback
  u32 sample_max;       // largest order key in the sample
  u32 selected;         // keys written to the selection list
  ThresholdBins bins;   // 3 words
  int origin;           // the whole window's start (relative indices count from it)
  int pad[4];
};

// Bytes per element of the tiles the tensor cores read (0: the CUDA-core path).
template <class C>
struct MmaBytes {
  static constexpr int value = C::kMma == 0 ? 0 : (C::kMma == kElemE4M3 ? 1 : 2);
};

template <class C>
__host__ __device__ constexpr SmemLayout layout_of() {
  return SmemLayout{C::kRows, C::kHeads, C::kDim, C::kKeyTile, C::kBins,
                    MmaBytes<C>::value, C::kHeadSums, C::kWgmma};
}

template <class C>
struct TopkSmem {
  float* q;       // [R][H][D]
  float* k;       // [KT][D+1]
  float* kscale;  // [KT] (per stage on the tensor-core path)
  float* ksq;     // [KT]
  float* dots;    // [R][KT][H+1]
  float* w;       // [R][H]
  float* qsq;     // [R][H]
  u32* hist;      // [R][bins]
  u32* radix;     // [256] + scratch
  RowState* rows; // [R]
  // The wgmma path's key-tile ring (SmemLayout::barriers_off): full[stage], empty[stage],
  // the key tensor map, and the uses of the ring so far (the same count in every thread:
  // producer and math warps walk the same tiles).
  u64* ring_full;
  u64* ring_empty;
  const TmaMap* kmap = nullptr;
  mutable unsigned ring_pos = 0;
  __device__ explicit TopkSmem(unsigned char* base) {
    constexpr SmemLayout L = layout_of<C>();
    float* f = reinterpret_cast<float*>(base);
    q = f;
    k = f + L.k_off();
    kscale = f + L.kscale_off();
    ksq = f + L.ksq_off();
    dots = f + L.dots_off();
    w = f + L.w_off();
    qsq = f + L.qsq_off();
    hist = reinterpret_cast<u32*>(f + L.hist_off());
    radix = reinterpret_cast<u32*>(f + L.radix_off());
    rows = reinterpret_cast<RowState*>(f + L.rows_off());
    ring_full = reinterpret_cast<u64*>(f + L.barriers_off());
    ring_empty = ring_full + L.k_stages();
  }
};

// threadIdx.x, hidden from the optimizer where it is read: offsets derived from it are
// computed there, not hoisted to the kernel's start and kept in registers across every
// loop of the persistent grid (the filter's wgmma accumulators leave too few registers
// for that, and they spill). The empty asm changes nothing: the value is threadIdx.x.
__device__ __forceinline__ unsigned unhoisted_thread_index() {
  unsigned t = threadIdx.x;
  asm volatile("" : "+r"(t));
  return t;
}

// Loads the block's query rows (dequantised), weights and |q[h]|^2, and each row's window.
template <class C>
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
    s.w[e] = (C::kUsesW && row < p.rows) ? p.w[row * p.w_row_stride + h] : 0.0f;
  }
  if (tid < R) {
    int r = tid, row = row0 + r;
    RowState& st = s.rows[r];
    st.start = 0;
    st.end = 0;
    st.bad = 0;
    if (row < p.rows) {
      if (C::kWindow == 0) {
        st.end = p.num_keys;
      } else if (C::kWindow == 1) {
        int a = p.window_start[row], b = p.window_end[row];
        if (a < 0 || b > p.num_keys || a > b) {
          st.bad = 1;
          if (split == 0) atomicAdd(&p.counters[1], 1u);
        } else {
          st.start = a;
          st.end = b;
        }
      } else {
        long long e = (p.causal_offset + row + 1) / p.causal_ratio;
        st.end = int(e < p.num_keys ? e : p.num_keys);
      }
    }
    st.origin = st.start;
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
template <class S>
__device__ __forceinline__ float weighted_factor(float dot, float kscale) {
  if constexpr (S::kReluOfDot) {
    float r;
    asm("max.NaN.f32 %0, %1, 0f00000000;\n" : "=f"(r) : "f"(dot));
    return r;
  } else {
    return S::unweighted(dot, kscale);
  }
}

// The head-sum form on warpgroup MMA (sm_90a): warpgroup g scores keys 64 g .. 64 g + 63
// of the tile (A: the swizzled key tile) against all 128 (row, head) pairs of the block
// (B: the swizzled q rows), d / k-step wgmma instructions into 64 fp32 accumulators per
// thread. A thread holds keys key0 and key0 + 8 (the D fragment's rows) and heads
// 8 j + 2 t4, + 1 of every row (its columns): it sums term(dot, w) over its 16 heads of
// a row in a fixed order, and two shuffles leave the row's sum in all four lanes of the
// quad; the 2 R (row, key) scores of a quad are visited by its lanes in turn, straight
// from the registers. Fused and materialize kernels run this same code (same bits).
// issued(): called once the tile's MMAs are issued (the ping-pong hands the tensor cores
// to the other warpgroup there).
template <class C, class S, class KeyOf, class Visit, class Issued>
__device__ void wgmma_head_sums(const TopkSmem<C>& s, KeyOf key_of, Visit visit, Issued issued) {
  constexpr int H = C::kHeads, R = C::kRows, KT = C::kKeyTile;
  constexpr int RB = C::kDim * MmaBytes<C>::value;
  static_assert(R * H == 128 && KT == 128 && C::kMathThreads == 256 && RB % 128 == 0,
                "wgmma head sums: 128 (row, head) pairs, 2 x 64 keys, whole swizzle rows");
  const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const char* kraw = reinterpret_cast<const char*>(s.k);
  const char* qraw = reinterpret_cast<const char*>(s.q);
  const int key0 = wg * 64 + warp * 16 + g;
  // Row r's sum over its heads for keys key0 and key0 + 8, from its accumulators dr
  // (columns h = 8 jj + 2 t4, + 1 of the row's H): term(dot, w) in a fixed order, then two
  // shuffles across the quad.
  float sums[R][2];
  // The scales of the thread's two keys, for terms that read kscale (dead loads otherwise).
  const float ks0 = C::kUsesKScale ? s.kscale[key0] : 1.0f;
  const float ks1 = C::kUsesKScale ? s.kscale[key0 + 8] : 1.0f;
  auto row_sums = [&](int r, const float* dr) {
    float p0 = 0.0f, p1 = 0.0f;
#pragma unroll
    for (int jj = 0; jj < H / 8; ++jj) {
      const float2 w = *reinterpret_cast<const float2*>(s.w + r * H + jj * 8 + 2 * t4);
      if constexpr (S::kWeightedTerm && WINNOW_HEAD_SUM_FMA) {
        // term = w * g(dot): one fused multiply-add per head (one rounding), in the same
        // fixed order in every mode.
        p0 = __fmaf_rn(w.x, weighted_factor<S>(dr[4 * jj], ks0), p0);
        p1 = __fmaf_rn(w.x, weighted_factor<S>(dr[4 * jj + 2], ks1), p1);
        p0 = __fmaf_rn(w.y, weighted_factor<S>(dr[4 * jj + 1], ks0), p0);
        p1 = __fmaf_rn(w.y, weighted_factor<S>(dr[4 * jj + 3], ks1), p1);
        continue;
      }
      const float a0 = op_add(S::term(dr[4 * jj], w.x, ks0), S::term(dr[4 * jj + 1], w.y, ks0));
      const float a1 = op_add(S::term(dr[4 * jj + 2], w.x, ks1), S::term(dr[4 * jj + 3], w.y, ks1));
      p0 = jj == 0 ? a0 : op_add(p0, a0);
      p1 = jj == 0 ? a1 : op_add(p1, a1);
    }
    p0 = op_add(p0, __shfl_xor_sync(0xFFFFFFFFu, p0, 1));
    p1 = op_add(p1, __shfl_xor_sync(0xFFFFFFFFu, p1, 1));
    sums[r][0] = op_add(p0, __shfl_xor_sync(0xFFFFFFFFu, p0, 2));
    sums[r][1] = op_add(p1, __shfl_xor_sync(0xFFFFFFFFu, p1, 2));
  };
  {
    float d[64];
    // Descriptors: one base per operand, each k step a constant offset of its low word.
    const u32 a_lo = wgmma_desc_lo(kraw + swizzled_at<KT>(wg * 64, 0));
    const u32 b_lo = wgmma_desc_lo(qraw);
    wgmma_fence();
#pragma unroll
    for (int k0 = 0; k0 < RB; k0 += 32) {
      wgmma_m64n<128, C::kMma>(
          d, wgmma_desc_from_lo(a_lo, swizzled_at<KT>(wg * 64, k0) - swizzled_at<KT>(wg * 64, 0)),
          wgmma_desc_from_lo(b_lo, swizzled_at<R * H>(0, k0)), k0 > 0);
    }
    wgmma_commit();
    issued();
    wgmma_wait<0>();
    wgmma_pin(d);
#pragma unroll
    for (int r = 0; r < R; ++r) row_sums(r, d + r * (H / 2));
  }
#pragma unroll
  for (int c = 0; c < 2 * R; c += 4) {
    const int r = (c + t4) >> 1, j = key0 + 8 * ((c + t4) & 1);
    const int key = key_of(j);
    if (key < 0) continue;
    ScoreArgs a{};  // post reads no per-head value
    a.kscale = C::kUsesKScale ? s.kscale[j] : 1.0f;
    float hsum = sums[0][0];  // sums[r][(c + t4) & 1], by constant indices only
#pragma unroll
    for (int rr = 0; rr < R; ++rr) {
      if (rr == r) hsum = (t4 & 1) ? sums[rr][1] : sums[rr][0];
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

// The shared memory of key-tile stage `stage` (SmemLayout::k_stages() of them).
template <class C>
__device__ __forceinline__ TopkSmem<C> with_stage(const TopkSmem<C>& s, int stage) {
  constexpr SmemLayout L = layout_of<C>();
  TopkSmem<C> t = s;
  t.k = s.k + stage * L.k_stage_words();
  t.kscale = s.kscale + stage * C::kKeyTile;
  return t;
}

// Starts loading keys key_of(0..KT-1) (negative: an empty slot) into stage `stage`: in
// the stored form by cp.async on the tensor-core path (complete after copy_async_wait),
// else decoded to fp32 by plain loads.
template <class C, class KeyOf>
__device__ void load_key_tile(const TopkParams& p, const TopkSmem<C>& s, int stage, KeyOf key_of) {
  constexpr int D = C::kDim, KT = C::kKeyTile, KS = D + 1;
  if (C::kMma) {
    constexpr int EB = MmaBytes<C>::value, VPR = D * EB / 16, RB = D * EB + 16;
    char* dst = reinterpret_cast<char*>(with_stage<C>(s, stage).k);
    auto copy_chunk = [&](int j, int v) {  // chunk v of key slot j
      int key = key_of(j);
      const char* src = static_cast<const char*>(p.k) +
                        (key >= 0 ? key * p.k_row_stride * EB + v * 16 : 0);
      copy_async_16(dst + (C::kWgmma ? swizzled_chunk<KT>(j, v) : j * RB + v * 16), src,
                    key >= 0);
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
template <class C, class S, class KeyOf, class Visit, class Issued>
__device__ void score_loaded_tile(const TopkParams& p, const TopkSmem<C>& s0, int stage,
                                  KeyOf key_of, Visit visit, Issued issued) {
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
      const float* v = s.k + j * KS;
      float acc = 0.0f;
      for (int i = 0; i < D; ++i) acc = fmaf(v[i], v[i], acc);
      s.ksq[j] = acc;
    }
  }
  if constexpr (C::kWgmma) {
    // Visits from the accumulators. No barrier: the caller keeps the stage from being
    // overwritten before every warpgroup is done with it.
    wgmma_head_sums<C, S>(s, key_of, visit, issued);
    return;
  } else if constexpr (UsesHeadSums<C, S>::value) {
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

// The math threads (every thread but the wgmma path's producer warp) synchronise
// among themselves: inside the tile loop the producer warp runs ahead of them.
template <class C>
__device__ __forceinline__ void math_sync() {
  if constexpr (C::kWgmma) {
    named_barrier_sync<1, C::kMathThreads>();
  } else {
    __syncthreads();
  }
}

// The wgmma path's producer warp: the last warp of the CTA, after the math warpgroups.
template <class C>
__device__ __forceinline__ bool is_producer_warp() {
  return C::kWgmma && int(threadIdx.x) >= C::kMathThreads;
}

// The producer warp fills ring stage `stage` with the keys key_of(0..KT-1) and signals
// its `full` barrier (33 arrivals: one per lane, one more from lane 0).
// base >= 0: the tile is the contiguous keys base.. (key_of(j) is base + j or -1 past the
// window): one TMA box per 128-byte column of d, swizzled as wgmma reads it, rows past the
// key count zero-filled; the key scales by cp.async (any alignment), each lane arriving
// once its copies land. base < 0: a gathered tile (the sample): cp.async of every 16-byte
// chunk into its swizzled place, then, since wgmma reads through the async proxy, each
// lane waits for its copies and fences before it arrives; it does so for a gathered tile
// after issuing the next one's copies (`gathered`: the stage whose arrivals are still
// owed, -1 none; publish_gathered settles the last).
template <class C>
__device__ __forceinline__ void publish_gathered(const TopkSmem<C>& s, int& gathered, int pending) {
  if (gathered < 0) return;
  if (pending == 0) {
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
  } else {
    asm volatile("cp.async.wait_group 1;\n" ::: "memory");
  }
  fence_async_smem();
  mbarrier_arrive(s.ring_full + gathered);
  if ((threadIdx.x & 31) == 0) mbarrier_arrive(s.ring_full + gathered);
  gathered = -1;
}

template <class C, class KeyOf>
__device__ void produce_key_tile(const TopkParams& p, const TopkSmem<C>& s, int stage, int base,
                                 KeyOf key_of, int& gathered) {
  constexpr int D = C::kDim, KT = C::kKeyTile, RB = D * MmaBytes<C>::value, VPR = RB / 16;
  const int lane = threadIdx.x & 31;
  const TopkSmem<C> st = with_stage<C>(s, stage);
  char* dst = reinterpret_cast<char*>(st.k);
  u64* full = s.ring_full + stage;
  if (C::kUsesKScale) {
    for (int j = lane; j < KT; j += 32) {
      const int key = key_of(j);
      copy_async_4(st.kscale + j, p.kscale + (key >= 0 ? key : 0), key >= 0);
    }
  }
  if (base >= 0) {
    mbarrier_arrive_after_copies(full);
    if (lane == 0) {
      mbarrier_arrive_expect_tx(full, unsigned(KT * RB));
#pragma unroll
      for (int a = 0; a < RB / 128; ++a) {
        tma_load_2d(dst + swizzled_at<KT>(0, a * 128), s.kmap, full, a * 128, base);
      }
    }
  } else {
    // Lane l gathers slots l, l + 32, ...: one key_of (a division for strided keys) per
    // slot, then the slot's VPR chunks.
    for (int j = lane; j < KT; j += 32) {
      const int key = key_of(j);
      const char* row = static_cast<const char*>(p.k) +
                        (key >= 0 ? (long long)key * p.k_row_stride * MmaBytes<C>::value : 0);
#pragma unroll
      for (int v = 0; v < VPR; ++v) copy_async_16(dst + swizzled_chunk<KT>(j, v), row + v * 16, key >= 0);
    }
    copy_async_commit();
    publish_gathered<C>(s, gathered, 1);  // the previous gathered tile, if any
    gathered = stage;
  }
}

// Visits the keys of `tiles` tiles, tile t's slot j holding key tile_keys(t)(j) (negative:
// an empty slot), calling after_tile() (by the math threads) after each. tile_base(t) is
// the first key of tile t when its keys are contiguous (key_of(j) = base + j inside the
// window), else -1. On the tensor-core paths the next tiles load while this one is scored.
// Called by the whole CTA; returns after a CTA barrier.
template <class C, class S, class TileKeys, class TileBase, class Visit, class AfterTile>
__device__ void score_tile_list(const TopkParams& p, const TopkSmem<C>& s, int tiles,
                                TileKeys tile_keys, TileBase tile_base, Visit visit,
                                AfterTile after_tile) {
  if constexpr (C::kWgmma) {
    // Warp-specialised: the producer warp fills a ring of k_stages() stages (waiting for
    // each stage's `empty` barrier), the two math warpgroups wait for `full`, score, and
    // release the stage (one arrival per warp) before visiting the next. No CTA barrier
    // per tile: each warpgroup runs as far ahead as the ring allows.
    constexpr int STAGES = layout_of<C>().k_stages();
    const unsigned pos0 = s.ring_pos;
    s.ring_pos = pos0 + unsigned(tiles);
    if (is_producer_warp<C>()) {
      // Stores of the CTA-wide steps before (the sort, the gathers) reached this region
      // through the generic proxy; the copy engine writes it next.
      fence_async_smem();
      int gathered = -1;
      for (int t = 0; t < tiles; ++t) {
        const RingSlot slot = ring_slot(pos0 + unsigned(t), STAGES);
        mbarrier_wait(s.ring_empty + slot.stage, slot.parity ^ 1u);
        produce_key_tile<C>(p, s, slot.stage, tile_base(t), tile_keys(t), gathered);
      }
      publish_gathered<C>(s, gathered, 0);
    } else {
      // Ping-pong (WINNOW_PINGPONG): the two math warpgroups take turns on the tensor
      // cores, warpgroup 0 first on every tile: each waits for its turn (named barrier
      // 2 + wg), issues its MMAs, hands the turn over (arrives on the other's), then runs
      // its epilogue while the other's MMAs run. Warpgroup 0 takes the first turn of the
      // list unasked and consumes the last hand-over at the end, so every list starts and
      // ends with no pending arrivals.
      const int wg = int(threadIdx.x) >> 7;
      auto hand_over = [wg] {
        if constexpr (WINNOW_PINGPONG) {
          if (wg == 0) named_barrier_arrive<3, C::kMathThreads>();
          else named_barrier_arrive<2, C::kMathThreads>();
        }
      };
      for (int t = 0; t < tiles; ++t) {
        const RingSlot slot = ring_slot(pos0 + unsigned(t), STAGES);
        mbarrier_wait(s.ring_full + slot.stage, slot.parity);
        if constexpr (WINNOW_PINGPONG) {
          if (wg == 1) named_barrier_sync<3, C::kMathThreads>();
          else if (t > 0) named_barrier_sync<2, C::kMathThreads>();
        }
        score_loaded_tile<C, S>(p, s, slot.stage, tile_keys(t), visit, hand_over);
        __syncwarp();  // the warp's reads of the stage are done
        if ((threadIdx.x & 31) == 0) mbarrier_arrive(s.ring_empty + slot.stage);
        after_tile();
      }
      if constexpr (WINNOW_PINGPONG) {
        if (wg == 0 && tiles > 0) named_barrier_sync<2, C::kMathThreads>();
      }
    }
    __syncthreads();  // the stages and s.q are read before anyone rewrites them
  } else if (C::kMma) {
    if (tiles > 0) load_key_tile<C>(p, s, 0, tile_keys(0));
    int stage = 0;
    for (int t = 0; t < tiles; ++t, stage ^= 1) {
      if (t + 1 < tiles) {
        load_key_tile<C>(p, s, stage ^ 1, tile_keys(t + 1));
      } else {
        copy_async_commit();  // an empty group: "all but the newest" is still this tile
      }
      copy_async_wait<1>();
      __syncthreads();
      score_loaded_tile<C, S>(p, s, stage, tile_keys(t), visit, [] {});
      after_tile();
    }
  } else {
    for (int t = 0; t < tiles; ++t) {
      load_key_tile<C>(p, s, 0, tile_keys(t));
      __syncthreads();
      score_loaded_tile<C, S>(p, s, 0, tile_keys(t), visit, [] {});
      after_tile();
    }
  }
}

// Visits every key of [begin, end) in tiles, calling after_tile() after each.
template <class C, class S, class Visit, class AfterTile>
__device__ void score_tiles(const TopkParams& p, const TopkSmem<C>& s, int begin, int end,
                            Visit visit, AfterTile after_tile) {
  constexpr int KT = C::kKeyTile;
  const int tiles = end > begin ? (end - begin + KT - 1) / KT : 0;
  score_tile_list<C, S>(
      p, s, tiles,
      [begin, end](int t) {
        const int t0 = begin + t * KT;
        return [t0, end](int j) { return t0 + j < end ? t0 + j : -1; };
      },
      [begin](int t) { return begin + t * KT; }, visit, after_tile);
}

// Visits every key of [begin, end) in tiles.
template <class C, class S, class Visit>
__device__ void score_range(const TopkParams& p, const TopkSmem<C>& s, int begin, int end,
                            Visit visit) {
  score_tiles<C, S>(p, s, begin, end, visit, [] {});
}

// A threshold t with exactly k of the distinct RankKeys that for_each yields at or above
// it (k >= 1, and at least k of them exist) and t's order key (high 32 bits) that of the
// k-th largest: the k-th largest itself, or, when the digits found so far already admit
// exactly k, their prefix with the lower index bits zero. Radix select, 8 bits a pass from
// the top; called by the whole CTA.
template <class C, class ForEach>
__device__ u64 radix_kth(const TopkSmem<C>& s, u32 k, ForEach for_each) {
  u32* hist = s.radix;
  u64* prefix_slot = reinterpret_cast<u64*>(s.radix + 256);
  u32* remaining_slot = s.radix + 258;
  u32* done_slot = s.radix + 259;
  if (threadIdx.x == 0) {
    *prefix_slot = 0;
    *remaining_slot = k;
    *done_slot = 0;
  }
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += C::kThreads) hist[i] = 0;
    __syncthreads();
    const u64 prefix = *prefix_slot;
    const u32 need = *remaining_slot;  // read by every thread before warp 0 rewrites it
    const u64 high = shift == 56 ? 0ull : (~0ull << (shift + 8));
    for_each([&](u64 v) {
      const bool in = (v & high) == prefix;
      if constexpr (WINNOW_RADIX_AGGREGATE) {
        // Warp-aggregated: keys near the k-th share their high digits, and 32 lanes adding
        // to one counter would serialise.
        const u32 digit = in ? u32(v >> shift) & 255u : 256u;
        const unsigned peers = __match_any_sync(__activemask(), digit);
        if (in && __ffs(peers) - 1 == int(threadIdx.x & 31))
          atomicAdd(&hist[digit], __popc(peers));
      } else {
        if (in) atomicAdd(&hist[u32(v >> shift) & 255u], 1u);
      }
    });
    __syncthreads();
    if (threadIdx.x < 32) {
      // Lane l holds digits 255 - 8l .. 248 - 8l; the lane whose range holds the need-th
      // largest entry picks the digit.
      const int lane = threadIdx.x;
      u32 cnt[8], sum = 0;
#pragma unroll
      for (int i = 0; i < 8; ++i) sum += (cnt[i] = hist[255 - 8 * lane - i]);
      u32 upto = sum;  // entries in this lane's digits and every higher one
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        u32 v = __shfl_up_sync(0xFFFFFFFFu, upto, o);
        if (lane >= o) upto += v;
      }
      u32 above = upto - sum;
      if (above < need && need <= upto) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          if (above + cnt[i] >= need) {
            *prefix_slot = prefix | (u64(255 - 8 * lane - i) << shift);
            *remaining_slot = need - above;
            // Every entry of this digit is needed and the order key (the high 32 bits) is
            // known: the prefix, lower bits zero, admits exactly the k largest (v >= it).
            if (above + cnt[i] == need && shift <= 32) *done_slot = 1;
            break;
          }
          above += cnt[i];
        }
      }
    }
    __syncthreads();
    if (*done_slot) break;
  }
  const u64 kth = *prefix_slot;
  __syncthreads();  // every thread has read it before a later call resets it
  return kth;
}

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
    if (b > st.gate) st.gate = b;
  }
}

// Keeps only the entries at or above the gate, in place. Called by the math threads (from
// inside the filter's tile loop).
template <class C>
__device__ void compact_candidates(const TopkSmem<C>& s, int r, u64* buf) {
  constexpr int N = C::kMathThreads;
  RowState& st = s.rows[r];
  const u32 n = st.count;
  const ThresholdBins bins = st.bins;
  const int gate = st.gate;
  u32* warp_totals = s.radix;  // [32] scratch
  u32 out = 0;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  math_sync<C>();
  for (u32 base = 0; base < n; base += N) {
    u32 i = base + threadIdx.x;
    u64 v = i < n ? buf[i] : 0ull;
    bool keep = i < n && bins.bin(rank_key_order(v)) >= gate;
    unsigned ballot = __ballot_sync(0xFFFFFFFFu, keep);
    if (lane == 0) warp_totals[warp] = __popc(ballot);
    math_sync<C>();
    u32 before = 0, total = 0;
    for (int w2 = 0; w2 < N / 32; ++w2) {
      if (w2 < warp) before += warp_totals[w2];
      total += warp_totals[w2];
    }
    before += __popc(ballot & ((1u << lane) - 1u));
    if (keep) buf[out + before] = v;
    out += total;
    math_sync<C>();
  }
  if (threadIdx.x == 0) st.count = out;
  math_sync<C>();
}

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

template <int N>
struct NextPow2 {
  static constexpr int value = N <= 1 ? 1 : 2 * NextPow2<(N + 1) / 2>::value;
};
template <>
struct NextPow2<1> {
  static constexpr int value = 1;
};

// Selects row r's top k (of its part of the window) into sel: RankKeys, zero after the
// st.selected chosen ones.
template <class C, class S>
__device__ void select_row(const TopkParams& p, const TopkSmem<C>& s, int r, u64* buf, u64* sel) {
  constexpr int K = C::kTopK, KP = NextPow2<C::kTopK>::value;
  RowState& st = s.rows[r];
  const int start = st.start, end = st.end;
  const u32 n_window = u32(end - start);
  if (threadIdx.x == 0) st.selected = 0;
  for (int i = threadIdx.x; i < KP; i += C::kThreads) sel[i] = 0ull;
  __syncthreads();
  auto emit_from = [&](u64 kth) {
    return [&, kth](u64 v) {
      if (v >= kth) sel[atomicAdd(&st.selected, 1u)] = v;
    };
  };
  if (st.overflow) {
    // Exact fallback: the buffer lost keys, so re-score the window for every pass.
    auto rescan = [&](auto f) {
      score_range<C, S>(p, s, start, end, [&](int rr, int key, float sc) {
        if (rr == r) f(rank_key(order_key(sc), key));
      });
    };
    u64 kth = n_window <= u32(K) ? 0ull : radix_kth<C>(s, K, rescan);
    rescan(emit_from(kth));
    if (threadIdx.x == 0) atomicAdd(&p.counters[0], 1u);
  } else {
    const u32 n = st.count;
    auto scan = [&](auto f) {
      for (u32 i = threadIdx.x; i < n; i += C::kThreads) f(buf[i]);
    };
    u64 kth = n <= u32(K) ? 0ull : radix_kth<C>(s, K, scan);
    scan(emit_from(kth));
  }
  __syncthreads();
}

// Sorts the chosen RankKeys of row r (in sel) and writes the row's outputs.
template <class C>
__device__ void write_row(const TopkParams& p, const TopkSmem<C>& s, int r, int row, u64* sel) {
  constexpr int K = C::kTopK, KP = NextPow2<C::kTopK>::value;
  // The key-tile stages are free now: sort there when the selection fits (each bitonic
  // step is then a shared-memory pass, not a round trip through L2).
  constexpr bool kInShared = long(KP) * 8 <= layout_of<C>().k_words() * 4;
  if constexpr (kInShared) {
    u64* v = reinterpret_cast<u64*>(s.k);
    for (int i = threadIdx.x; i < KP; i += C::kThreads) v[i] = sel[i];
    __syncthreads();
    sel = v;
  }
  sort_desc<C>(sel, KP, !C::kSorted);
  // On the wgmma path the copy engine (async proxy) rewrites these stages next.
  if constexpr (kInShared && C::kWgmma) fence_async_smem();
  const u32 chosen = s.rows[r].selected;
  const int base = C::kAbsolute ? 0 : s.rows[r].origin;
  for (int i = threadIdx.x; i < K; i += C::kThreads) {
    bool real = u32(i) < chosen;
    u64 v = sel[i];
    p.out_indices[row * p.out_indices_stride + i] = real ? rank_key_index(v) - base : -1;
    if (p.out_scores) {
      p.out_scores[row * p.out_scores_stride + i] =
          real ? order_key_score(rank_key_order(v)) : -__int_as_float(0x7F800000);
    }
  }
  __syncthreads();
}

// Key splits: stores this CTA's per-row selections; the last CTA of the row block to
// finish merges every part's selection exactly (radix select over the RankKeys, which
// are unique) and writes the outputs. Returns after the merge or after storing.
template <class C>
__device__ void store_or_merge_parts(const TopkParams& p, const TopkSmem<C>& s, int block,
                                     int split, u64* ws) {
  constexpr int R = C::kRows, K = C::kTopK, KP = NextPow2<C::kTopK>::value;
  constexpr int ROW_WORDS = C::kCapacity + KP;
  const int splits = p.key_splits;
  u64* parts = p.partials + (long long)block * splits * R * KP;
  for (int r = 0; r < R; ++r) {
    const u64* sel = ws + r * ROW_WORDS + C::kCapacity;
    u64* dst = parts + ((long long)split * R + r) * KP;
    for (int i = threadIdx.x; i < KP; i += C::kThreads) dst[i] = sel[i];
  }
  __threadfence();  // the parts are visible before the count says so
  __syncthreads();
  u32* last = s.radix + 260;
  if (threadIdx.x == 0) *last = atomicAdd(&p.block_done[block], 1u) == u32(splits - 1);
  __syncthreads();
  if (!*last) return;
  __threadfence();
  for (int r = 0; r < R; ++r) {
    const int row = block * R + r;
    if (row >= p.rows) break;
    RowState& st = s.rows[r];
    u64* sel = ws + r * ROW_WORDS + C::kCapacity;
    // Other CTAs wrote the parts: read past L1 (__ldcg). Zero entries are padding.
    auto scan = [&](auto f) {
      for (int sp = 0; sp < splits; ++sp) {
        const u64* src = parts + ((long long)sp * R + r) * KP;
        for (int i = threadIdx.x; i < KP; i += C::kThreads) {
          const u64 v = __ldcg(src + i);
          if (v != 0ull) f(v);
        }
      }
    };
    u32* real = s.radix + 262;
    if (threadIdx.x == 0) {
      *real = 0;
      st.selected = 0;
    }
    for (int i = threadIdx.x; i < KP; i += C::kThreads) sel[i] = 0ull;
    __syncthreads();
    scan([&](u64) { atomicAdd(real, 1u); });
    __syncthreads();
    const u64 kth = *real <= u32(K) ? 1ull : radix_kth<C>(s, K, scan);
    scan([&](u64 v) {
      if (v >= kth) sel[atomicAdd(&st.selected, 1u)] = v;
    });
    __syncthreads();
    write_row<C>(p, s, r, row, sel);
  }
}

// Writes the keys of hint entries [i0, min(i0 + KT, n)) that count (hint_entry_counts:
// keys, each above every earlier one; -1 for the others) to keys[i0 ..], and raises
// `running_max` (the largest counted entry so far, the same in every thread) past them.
// A prefix maximum by warp shuffles; warp_max: [warps] scratch in shared memory. Called
// by the whole CTA; the keys are visible to it after it returns.
template <class C>
__device__ void hint_tile_keys(const TopkParams& p, int i0, int n, int* keys, int* warp_max,
                               int& running_max) {
  constexpr int KT = C::kKeyTile, WARPS = C::kThreads / 32;
  static_assert(KT <= C::kThreads, "one hint entry per thread");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, i = i0 + int(threadIdx.x);
  const bool mine = int(threadIdx.x) < KT && i < n;
  int v = -1;
  if (mine) {
    const int key = p.sample_hint[i];
    v = hint_entry_counts(key, -1, p.num_keys) ? key : -1;
  }
  int incl = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int t = __shfl_up_sync(0xFFFFFFFFu, incl, o);
    if (lane >= o) incl = max(incl, t);
  }
  const int excl = __shfl_up_sync(0xFFFFFFFFu, incl, 1);
  __syncthreads();  // warp_max is free (an earlier call's readers are done)
  if (lane == 31) warp_max[warp] = incl;
  __syncthreads();
  int before = lane == 0 ? running_max : max(running_max, excl);
  for (int w = 0; w < warp; ++w) before = max(before, warp_max[w]);
  if (mine) keys[i] = hint_entry_counts(v, before, p.num_keys) ? v : -1;
  for (int w = 0; w < WARPS; ++w) running_max = max(running_max, warp_max[w]);
  __syncthreads();
}

// Sets each row's ThresholdBins and gate from a sample of its window (step 1 of
// topk_block), leaving the rows' counts at zero for the filter.
//
// The sample: a strided subset of the window, then the caller's hint keys inside it (the
// strided ones skipped), all distinct keys of the window. The strided keys come from the
// part of the window every row of the block sees when that part holds at least half of
// each row's window (all of a dense window, nearly all of a causal one), so one pass
// serves every row; otherwise each row draws its own. A window that fits the
// CandidateBuffer needs no gate (every key is kept): its row takes no strided keys, and a
// block of such rows scores no sample.
template <class C, class S>
__device__ void sample_rows(const TopkParams& p, const TopkSmem<C>& s, int row0, u64* ws) {
  constexpr int R = C::kRows, K = C::kTopK, CAP = C::kCapacity, KT = C::kKeyTile;
  constexpr int KP = NextPow2<C::kTopK>::value, ROW_WORDS = CAP + KP;
  auto needs_sample = [&](int r) {
    const int n = s.rows[r].end - s.rows[r].start;
    return n > K && n > CAP;
  };
  bool any_sample = false;
  for (int r = 0; r < R && row0 + r < p.rows; ++r) any_sample = any_sample || needs_sample(r);
  // The hint's counted keys go to row 0's selection list (2 KP ints, free until the
  // select step), so at most that many entries are read (TopkOp::max_sample_hint).
  const int hint_n = p.sample_hint && any_sample ? min(min(p.sample_hint_count, CAP), 2 * KP) : 0;
  int common_start = 0, common_end = 0x7FFFFFFF;
  for (int r = 0; r < R && row0 + r < p.rows; ++r) {
    if (s.rows[r].end > s.rows[r].start) {
      common_start = max(common_start, s.rows[r].start);
      common_end = min(common_end, s.rows[r].end);
    }
  }
  bool shared = true;
  for (int r = 0; r < R && row0 + r < p.rows; ++r) {
    const int n = s.rows[r].end - s.rows[r].start;
    shared = shared && (n == 0 || 2ll * (common_end - common_start) >= n);
  }
  // The window row r's strided keys come from, and their count (0: none).
  auto strided_start = [&](int r) { return shared ? common_start : s.rows[r].start; };
  auto strided_n = [&](int r) {
    return shared ? common_end - common_start : s.rows[r].end - s.rows[r].start;
  };
  // The strided sample's rank whose score becomes the first threshold: m = 2 k ns / n + 16,
  // at most k. About 2k of the row's n keys are at or above it (the k-th of a sample of 2k
  // would put the median there), so the first tiles append few keys while the histogram
  // learns the row. If fewer than k keys stay, the row takes the exact fallback (counted);
  // with m = k (the sample is the window) the sample's k keys always stay.
  auto sample_rank = [](long long ns, long long n) {
    return u32(min((long long)K, (2LL * K * ns + n - 1) / n + 16));
  };
  auto strided_size = [&](int r) {
    const int ns = min(min(C::kSample, strided_n(r)), CAP - hint_n);
    const int n = s.rows[r].end - s.rows[r].start;
    return needs_sample(r) && ns > 0 && u32(ns) >= sample_rank(ns, n) ? ns : 0;
  };
  // Shared: the largest count any row takes (rows differ only in whether they take one).
  auto pass_size = [&](int r) {
    int ns = strided_size(r);
    for (int rr = 1; shared && rr < R && row0 + rr < p.rows; ++rr) ns = max(ns, strided_size(rr));
    return ns;
  };
  if (threadIdx.x < R) {
    s.rows[threadIdx.x].count = 0;
    s.rows[threadIdx.x].sample_max = 0;
  }
  int* hint_keys = reinterpret_cast<int*>(ws + CAP);
  if (hint_n > 0) {
    int* warp_max = reinterpret_cast<int*>(s.hist);  // free until the filter clears it
    int running_max = -1;
    for (int i0 = 0; i0 < hint_n; i0 += KT) {
      hint_tile_keys<C>(p, i0, hint_n, hint_keys, warp_max, running_max);
    }
  }
  __syncthreads();

  // Each pass scores its strided keys (one shared pass, or one per row); the last pass
  // then scores the hint's keys (every row), at the same call site. So a row's first
  // strided_size(r) sample entries are its strided ones.
  const int passes = shared ? 1 : R;
  const int hint_tiles = (hint_n + KT - 1) / KT;
  for (int r = 0; r < passes; ++r) {
    const int ns = pass_size(r), start = strided_start(r), n = strided_n(r);
    const int strided_tiles = (ns + KT - 1) / KT;
    int tile = 0;
    score_tile_list<C, S>(
        p, s, strided_tiles + (r == passes - 1 ? hint_tiles : 0),
        [=](int t) {
          const bool hint = t >= strided_tiles;
          const int i0 = (hint ? t - strided_tiles : t) * KT;
          return [=](int j) {
            const int i = i0 + j;
            if (hint) return i < hint_n ? hint_keys[i] : -1;
            return i < ns ? strided_sample_key(i, start, n, ns) : -1;
          };
        },
        [](int) { return -1; },  // gathered keys
        [&](int rr, int key, float sc) {
          if (row0 + rr >= p.rows) return;
          RowState& st = s.rows[rr];
          if (tile >= strided_tiles) {
            // A hint key counts inside the row's window and when no strided key of the row.
            if (key < st.start || key >= st.end) return;
            if (is_strided_sample_key(key, strided_start(rr), strided_n(rr), strided_size(rr)))
              return;
          } else if ((!shared && rr != r) || strided_size(rr) == 0) {
            return;
          }
          const u32 ok = order_key(sc);
          ws[rr * ROW_WORDS + atomicAdd(&st.count, 1u)] = rank_key(ok, key);
          atomicMax(&st.sample_max, ok);
        },
        [&] { ++tile; });
  }

  for (int r = 0; r < R; ++r) {
    RowState& st = s.rows[r];
    const u32 got = st.count;  // every thread reads the same count
    const int ns = strided_size(r);
    const u64* buf = ws + r * ROW_WORDS;
    const long long n = st.end - st.start;
    u32 lo = 0;
    bool gated = false;
    if (ns > 0) {
      // The strided keys' sample_rank-th best (a guess of the row's 2k-th).
      lo = rank_key_order(radix_kth<C>(s, sample_rank(ns, n), [&](auto f) {
        for (int i = threadIdx.x; i < ns; i += C::kThreads) f(buf[i]);
      }));
      gated = true;
    }
    if (n > K && got > u32(ns) && got >= u32(K)) {
      // With hint keys: the whole sample's k-th best, a lower bound of the row's k-th
      // (distinct keys of its window), raises the edge when the hint holds good keys.
      lo = max(lo, rank_key_order(radix_kth<C>(s, K, [&](auto f) {
                 for (u32 i = threadIdx.x; i < got; i += C::kThreads) f(buf[i]);
               })));
      gated = true;
    }
    if (threadIdx.x == 0) {
      st.bins = gated ? make_threshold_bins(lo, st.sample_max, C::kBins)
                      : make_threshold_bins(0u, 0xFFFFFFFFu, C::kBins);
      st.gate = gated ? 1 : 0;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      st.count = 0;
      st.overflow = 0;
    }
  }
}

// Sample, then filter, for every row of the block; then select each row.
template <class C, class S>
__device__ void topk_block(const TopkParams& p, const TopkSmem<C>& s, int row0, int split,
                           u64* ws, PhaseClocks& clocks) {
  constexpr int R = C::kRows, K = C::kTopK, CAP = C::kCapacity;
  constexpr int ROW_WORDS = CAP + NextPow2<C::kTopK>::value;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

  // 1. Sample: the hint keys and a strided subset of each row's window set its bins.
  sample_rows<C, S>(p, s, row0, ws);
  clocks.mark(1);
  for (int i = threadIdx.x; i < R * C::kBins; i += C::kThreads) s.hist[i] = 0;
  __syncthreads();

  // 2. Filter: one pass over the union of the rows' windows.
  int begin = 0x7FFFFFFF, end = 0;
  for (int r = 0; r < R; ++r) {
    if (s.rows[r].end > s.rows[r].start) {
      begin = min(begin, s.rows[r].start);
      end = max(end, s.rows[r].end);
    }
  }
  int tile = 0;
  score_tiles<C, S>(
      p, s, begin, end,
      [&](int r, int key, float sc) {
        RowState& st = s.rows[r];
        if (key < st.start || key >= st.end) return;
        const u32 ok = order_key(sc);
        const int b = st.bins.bin(ok);
        // Keys below the gate are out and need no count: the gate only rises, and every
        // count the refresh reads is of a bin at or above it.
        if (b < st.gate) return;
        atomicAdd(&s.hist[r * C::kBins + b], 1u);
        const u32 pos = atomicAdd(&st.count, 1u);
        if (pos < u32(CAP)) ws[r * ROW_WORDS + pos] = rank_key(ok, key);
      },
      [&] {
        // Every 4 tiles warp r raises row r's gate from the histogram, with no barrier:
        // counts still being added only make the gate looser, and it only rises. Every
        // kCheckTiles tiles the whole CTA checks the buffers (a consistent count needs a
        // barrier) and compacts those past 3/4, which leaves room for kCheckTiles more
        // tiles of appends when the capacity allows.
        constexpr int kCheckTiles = CAP / 4 >= 16 * C::kKeyTile ? 16 : 4;
        ++tile;
        if ((tile & 3) == 0) {
          if constexpr (C::kWgmma) {
            // Rows alternate between the two math warpgroups (warps 0, 4, 1, 5, ...), so
            // that neither carries every refresh (R <= 8: 128 (row, head) pairs).
            const int r = (warp & 3) * 2 + (warp >> 2);
            if (warp < C::kMathThreads / 32 && r < R) refresh_gate<C>(s, r, lane);
          } else {
            for (int r = warp; r < R; r += C::kThreads / 32) refresh_gate<C>(s, r, lane);
          }
        }
        if (tile % kCheckTiles != 0) return;
        math_sync<C>();
        for (int r = 0; r < R; ++r) {
          RowState& st = s.rows[r];
          if (st.count > u32(CAP)) st.overflow = 1;  // every thread reads the same count
          if (!st.overflow && st.count > u32(CAP) / 4 * 3) {
            compact_candidates<C>(s, r, ws + r * ROW_WORDS);
          }
        }
        math_sync<C>();
      });
  // A drop in the last tiles counts too, and so does a sample threshold that turned out
  // above the row's k-th (fewer than k keys kept; see the sample).
  for (int r = 0; r < R; ++r) {
    const RowState& st = s.rows[r];
    const u32 need = min(u32(K), u32(st.end > st.start ? st.end - st.start : 0));
    if (st.count > u32(CAP) || st.count < need) s.rows[r].overflow = 1;
  }
  __syncthreads();

  clocks.mark(2);
  // 3. Select: each row's top k of its part, then the outputs (or the merge of parts).
  for (int r = 0; r < R; ++r) {
    const int row = row0 + r;
    if (row >= p.rows) break;
    u64* sel = ws + r * ROW_WORDS + CAP;
    select_row<C, S>(p, s, r, ws + r * ROW_WORDS, sel);
    clocks.mark(3);
    if (p.key_splits == 1) write_row<C>(p, s, r, row, sel);
    clocks.mark(4);
  }
  if (p.key_splits > 1) store_or_merge_parts<C>(p, s, row0 / R, split, ws);
}

// Writes the fp32 score of every (row, key); keys outside the row's window get -inf.
template <class C, class S>
__device__ void materialize_block(const TopkParams& p, const TopkSmem<C>& s, int row0) {
  score_range<C, S>(p, s, 0, p.num_keys, [&](int r, int key, float sc) {
    int row = row0 + r;
    if (row >= p.rows) return;
    const RowState& st = s.rows[r];
    bool inside = key >= st.start && key < st.end;
    p.out_scores[row * p.out_scores_stride + key] = inside ? sc : -__int_as_float(0x7F800000);
  });
}

// The next work item (row block x key part) for this CTA: a counter in the workspace,
// so a CTA that drew light items takes more, and no SM idles while items remain.
template <class C>
__device__ int next_work_item(const TopkParams& p, const TopkSmem<C>& s) {
  u32* slot = s.radix + 263;  // free scratch (see SmemLayout::radix_off)
  __syncthreads();            // every thread has read the previous item
  if (threadIdx.x == 0) *slot = atomicAdd(&p.counters[2], 1u);
  __syncthreads();
  return int(*slot);
}

template <class C, class S>
__device__ void topk_kernel(const TopkParams& p, const TmaMap* kmap, unsigned char* smem) {
  TopkSmem<C> s(smem);
  if constexpr (C::kWgmma) {
    s.kmap = kmap;
    constexpr int STAGES = layout_of<C>().k_stages();
    if (threadIdx.x == 0) {
      for (int i = 0; i < STAGES; ++i) {
        mbarrier_init(s.ring_full + i, 33);                   // 32 lanes + lane 0's bytes
        mbarrier_init(s.ring_empty + i, C::kMathThreads / 32);  // one arrival per math warp
      }
      mbarrier_init_fence();
    }
    if (is_producer_warp<C>() && (threadIdx.x & 31) == 0) tma_prefetch(kmap);
    // next_work_item's barrier publishes the initialised barriers.
  }
  constexpr long long CTA_WORDS =
      (long long)C::kRows * (C::kCapacity + NextPow2<C::kTopK>::value);
  u64* ws = p.workspace + blockIdx.x * CTA_WORDS;
  const int blocks = (p.rows + C::kRows - 1) / C::kRows;
  const int splits = C::kMaterialize ? 1 : p.key_splits;
  const int items = blocks * splits;
  PhaseClocks clocks;
  int items_done = 0;
  for (int w = next_work_item<C>(p, s); w < items; w = next_work_item<C>(p, s)) {
    // Causal windows grow with the row: the heaviest row blocks go first, so the last
    // items handed out (while other CTAs run idle) are the lightest.
    const int item = C::kWindow == 2 ? items - 1 - w : w;
    const int b = item / splits, split = item % splits;
    clocks.mark(-1);
    load_rows<C>(p, s, b * C::kRows, split);
    clocks.mark(0);
    ++items_done;
    if (C::kMaterialize) {
      materialize_block<C, S>(p, s, b * C::kRows);
    } else {
      topk_block<C, S>(p, s, b * C::kRows, split, ws, clocks);
    }
  }
  if constexpr (WINNOW_PHASE_CLOCKS) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
      printf("winnow phase clocks (CTA 0, %d items): rows %lld sample %lld filter %lld select %lld "
             "write %lld\n",
             items_done, clocks.total[0], clocks.total[1], clocks.total[2], clocks.total[3],
             clocks.total[4]);
    }
  }
}

}  // namespace winnow

// FlashPrefill-style block selection, fused: pooled-key block scores and the alpha * max
// threshold in one pass per (query head, query block), with no score matrix in device
// memory. ops/block/block_select.h states the rule; testing/block_reference.cpp is its CPU twin.
//
//   block_pool     mean of each 128-key block per KV head (fp32 sum in key order, x 1/128,
//                  rounded to bf16): the pooled keys kbar[kv][J][d].
//   block_score    one CTA per (head h, query block I), one warp per 16 query rows.
//                  Pass 1 streams kbar[0..I] through the tensor cores and keeps each row's
//                  running max and sum of exp (max-stabilised, on chip). Pass 2 recomputes
//                  the scores and sums exp(s - m_i) / Z_i over the 128 rows of I per key
//                  block J (a fixed order: bit-reproducible). Then the threshold, the
//                  must-keep blocks and the minimum budget, and the kept blocks in
//                  ascending order into the CTA's staged row.
//   block_offsets  exclusive scan of the kept counts: the CSR offsets.
//   block_compact  each staged row to its place in the CSR indices.
#pragma once
#include "block/block_params.cuh"
#include "common/element_decode.cuh"
#include "ptx/mma_sync.cuh"
#include "common/portable.cuh"
#include "common/score_ops.cuh"

namespace winnow {

__device__ __forceinline__ float minus_infinity() { return __int_as_float(0xFF800000); }

// exp2 by the special-function unit alone (ex2.approx.ftz: relative error about 2^-22, results
// below 2^-126 flushed to 0, exp2(-inf) = 0), for the softmax of the index passes and of the
// attention: block scores are checked against the CPU's double ones within 2e-3 + 2e-5 |s|
// and the attention's probabilities are rounded to bf16 next. (exp2f adds a range test and
// two multiplies around the same instruction, for subnormal results.)
__device__ __forceinline__ float exp2_approx(float x) {
#if defined(__CUDA_ARCH__)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  const float y = exp2f(x);
  return y < 1.17549435e-38f ? 0.0f : y;
#endif
}

// exp2 on the FMA and integer pipes, not the special-function unit (FlashAttention-4's
// trick, for a pass whose exponentials outnumber what MUFU issues beside the MMAs): x =
// r + f with r = round(x) and |f| <= 1/2, 2^f by a degree-5 polynomial (relative error
// below 2.2e-7, as ex2.approx's about 2^-22; exp2(0) = 1), 2^r added to the exponent bits. As
// exp2_approx: 0 below 2^-126 (and for -inf), NaN for NaN. For x <= 127.
__device__ __forceinline__ float exp2_poly(float x) {
  const float t = __fadd_rn(x, 12582912.0f);  // 1.5 x 2^23: round(x) in the low bits
  const float f = __fsub_rn(x, __fsub_rn(t, 12582912.0f));
  float p = 1.3218672247603536e-3f;  // relative least squares with p(0) = 1 exactly
  p = __fmaf_rn(p, f, 9.671698324382305e-3f);
  p = __fmaf_rn(p, f, 5.550893023610115e-2f);
  p = __fmaf_rn(p, f, 2.4022237956523895e-1f);
  p = __fmaf_rn(p, f, 6.931468844413757e-1f);
  p = __fmaf_rn(p, f, 1.0f);
  const float y = bits_float(float_bits(p) + (float_bits(t) << 23));
  return x >= -126.0f ? y : (x != x ? x : 0.0f);
}

// exp2(a - base) with -inf - -inf taken as 0 (an empty running max).
__device__ __forceinline__ float rescale(float a, float base) {
  return a == base ? 1.0f : exp2_approx(a - base);
}

// The q fragments (mma A operand) of 16 query rows of one head, bf16, in registers.
template <int D, int H>
__device__ __forceinline__ void load_q_fragments(const unsigned short* q, long long row0, int h,
                                                 int g, int t4, u32 (&a)[D / 16][4]) {
  const long long rs = (long long)H * D;
  const unsigned short* q0 = q + (row0 + g) * rs + (long long)h * D;
  const unsigned short* q1 = q0 + 8 * rs;
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    const int c = ks * 16 + 2 * t4;
    a[ks][0] = *reinterpret_cast<const u32*>(q0 + c);
    a[ks][1] = *reinterpret_cast<const u32*>(q1 + c);
    a[ks][2] = *reinterpret_cast<const u32*>(q0 + c + 8);
    a[ks][3] = *reinterpret_cast<const u32*>(q1 + c + 8);
  }
}

// 16 rows x 8 keys of q . k: the keys' rows (bf16, d contiguous) start at `keys`,
// `row_bytes` apart; c0 c1: row g, keys 2 t4, 2 t4 + 1; c2 c3: row g + 8. The B fragments
// of two k-steps come from one ldmatrix.x4 (lanes 0-7: the 8 key rows at d = 16 ks,
// 8-15 at 16 ks + 8, 16-31 the same for ks + 1).
template <int D>
__device__ __forceinline__ void dot_16x8(const u32 (&a)[D / 16][4], const char* keys,
                                         int row_bytes, int lane, float (&c)[4]) {
  static_assert(D % 32 == 0, "k-steps go in pairs");
  const char* row = keys + (lane & 7) * row_bytes + (lane >> 3) * 16;
  c[0] = c[1] = c[2] = c[3] = 0.0f;
#pragma unroll
  for (int ks = 0; ks < D / 16; ks += 2) {
    u32 b0, b1, b2, b3;
    ldmatrix_x4(row + ks * 32, b0, b1, b2, b3);
    mma_bf16_16816(a[ks], b0, b1, c[0], c[1], c[2], c[3]);
    mma_bf16_16816(a[ks + 1], b2, b3, c[0], c[1], c[2], c[3]);
  }
}

// The running (max, sum of exp2) of one row, merged with another thread's.
__device__ __forceinline__ void merge_softmax_stats(float& m, float& l, float m2, float l2) {
  const float mn = fmaxf(m, m2);
  l = __fadd_rn(__fmul_rn(l, rescale(m, mn)), __fmul_rn(l2, rescale(m2, mn)));
  m = mn;
}

// Block-wide reductions through `scratch` (32 words at least); every thread gets the result.
template <int kThreads>
__device__ float block_max(float v, float* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  __syncthreads();
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  v = scratch[0];
  for (int w = 1; w < kThreads / 32; ++w) v = fmaxf(v, scratch[w]);
  return v;
}

template <int kThreads>
__device__ int block_sum(int v, int* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  v = 0;
  for (int w = 0; w < kThreads / 32; ++w) v += scratch[w];
  return v;
}

// (score, block) a ranks before (score, block) b: higher score, then the smaller block.
__device__ __forceinline__ bool ranks_before(float sa, int ja, float sb, int jb) {
  return sa > sb || (sa == sb && ja < jb);
}

// The best block not yet kept among [0, n) (-1 when every block is kept).
template <int kThreads>
__device__ int best_unkept(const float* scores, const unsigned char* keep, int n, float* fs,
                           int* js) {
  float bs = minus_infinity();
  int bj = -1;
  for (int j = threadIdx.x; j < n; j += kThreads) {
    if (!keep[j] && (bj < 0 || ranks_before(scores[j], j, bs, bj))) bs = scores[j], bj = j;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float s2 = __shfl_xor_sync(0xFFFFFFFFu, bs, o);
    const int j2 = __shfl_xor_sync(0xFFFFFFFFu, bj, o);
    if (j2 >= 0 && (bj < 0 || ranks_before(s2, j2, bs, bj))) bs = s2, bj = j2;
  }
  __syncthreads();
  if ((threadIdx.x & 31) == 0) fs[threadIdx.x >> 5] = bs, js[threadIdx.x >> 5] = bj;
  __syncthreads();
  bs = fs[0], bj = js[0];
  for (int w = 1; w < kThreads / 32; ++w) {
    if (js[w] >= 0 && (bj < 0 || ranks_before(fs[w], js[w], bs, bj))) bs = fs[w], bj = js[w];
  }
  return bj;
}

// Pass 0: one CTA per (key block J, KV head), one thread per element of d.
template <class C>
__device__ void block_pool(const BlockSelectParams& p) {
  const int J = blockIdx.x, kv = blockIdx.y, e = threadIdx.x;
  if (e >= C::kDim) return;
  const long long rs = (long long)C::kKvHeads * C::kDim;
  const unsigned short* src = p.k + (long long)J * kBlockTokens * rs + kv * C::kDim + e;
  float acc = 0.0f;
  for (int t = 0; t < kBlockTokens; ++t) acc = __fadd_rn(acc, decode_bf16(src[t * rs]));
  p.pooled[((long long)kv * p.blocks + J) * C::kDim + e] =
      encode_bf16(__fmul_rn(acc, 1.0f / float(kBlockTokens)));
}

// The four scores of one 8-key chunk of a 16-row fragment (c: the mma C / wgmma D
// layout, c0 c1 row g, c2 c3 row g + 8, keys J0 and J0 + 1) in the exp2 domain; -inf for
// the blocks at or past n (not visible from the query block).
// A compile-time bool as a value (for generic lambdas).
template <bool B>
struct BoolTag {
  static constexpr bool value = B;
};

// kBounded false: every block of the chunk is visible (a tile inside [0, n)), no test.
template <class S, bool kBounded = true>
__device__ __forceinline__ void chunk_scores(const float (&c)[4], int J0, int n, float (&x)[4]) {
  const float kLog2e = 1.4426950408889634f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    ScoreArgs args{};
    args.dot = &c[i];
    const float v = __fmul_rn(S::eval(args), kLog2e);
    x[i] = !kBounded || J0 + (i & 1) < n ? v : minus_infinity();
  }
}

// Pass 1's step on one chunk: the thread's running (max, sum of exp2) of its two rows.
__device__ __forceinline__ void chunk_row_stats(const float (&x)[4], float (&m)[2], float (&l)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    // The running sum is rescaled only when the max grows (rarely, after the first
    // tiles): about one exp2 per score instead of one and a half.
    const float mx = fmaxf(m[r], fmaxf(x[2 * r], x[2 * r + 1]));
    if (mx > m[r]) {
      l[r] = __fmul_rn(l[r], rescale(m[r], mx));
      m[r] = mx;
    }
    // exp2(x - max), 0 for x = -inf (a block not visible) even while the max is -inf.
    const float mb = mx == minus_infinity() ? 0.0f : mx;
    l[r] = __fadd_rn(l[r], __fadd_rn(exp2_approx(x[2 * r] - mb), exp2_approx(x[2 * r + 1] - mb)));
  }
}

// Between the passes: each row's statistics merged over its quad (every row sees block
// 0, so l > 0) and the inverse of its sum.
__device__ __forceinline__ void quad_row_stats(float (&m)[2], float (&l)[2], float (&inv)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
#pragma unroll
    for (int o = 1; o < 4; o <<= 1)
      merge_softmax_stats(m[r], l[r], __shfl_xor_sync(0xFFFFFFFFu, m[r], o),
                          __shfl_xor_sync(0xFFFFFFFFu, l[r], o));
    inv[r] = __fdiv_rn(1.0f, l[r]);
  }
}

// Pass 2 on one chunk: p = exp2(x - m) / Z summed over the thread's two rows, per key (an
// invalid block has x = -inf, so p = 0).
__device__ __forceinline__ void chunk_column_sums(const float (&x)[4], const float (&m)[2],
                                                  const float (&inv)[2], float (&cs)[2]) {
  const float p0 = __fmul_rn(exp2_approx(x[0] - m[0]), inv[0]);
  const float p1 = __fmul_rn(exp2_approx(x[1] - m[0]), inv[0]);
  const float p2 = __fmul_rn(exp2_approx(x[2] - m[1]), inv[1]);
  const float p3 = __fmul_rn(exp2_approx(x[3] - m[1]), inv[1]);
  cs[0] = __fadd_rn(p0, p2);
  cs[1] = __fadd_rn(p1, p3);
}

// A chunk's column sums over the warp's 16 rows: the butterfly over the 8 row groups g
// (lanes 4 apart), a fixed order every lane of a column ends with.
__device__ __forceinline__ void warp_column_sums(float (&cs)[2]) {
#pragma unroll
  for (int o = 4; o < 32; o <<= 1) {
    cs[0] = __fadd_rn(cs[0], __shfl_xor_sync(0xFFFFFFFFu, cs[0], o));
    cs[1] = __fadd_rn(cs[1], __shfl_xor_sync(0xFFFFFFFFu, cs[1], o));
  }
}

// After the scores of query block I of head h are in block_scores[0..I]: the rule (keep J
// iff score >= alpha * max, or J is a must-keep block; then the minimum budget from the
// best remaining blocks), the kept blocks in ascending order into the row's staged list
// and its count; the scores to p.scores when asked. Every thread of the CTA (kThreads)
// takes part; its reductions (max, integer sums, the best block by a total order) do not
// depend on how the blocks are spread over the threads. I by reference: by value, NVVM
// orders one comparison of the inlined copy differently and the mma.sync kernel's PTX
// would change (it is byte-identical to the measured one this way).
template <int kThreads>
__device__ __forceinline__ void keep_blocks(const BlockSelectParams& p, const int& I, int h, int n,
                                            int lane, int warp, const float* block_scores,
                                            unsigned char* keep, float* fscratch, int* iscratch) {
  const BlockRule& R = p.rule;
  float mx = minus_infinity();
  for (int J = threadIdx.x; J < n; J += kThreads) mx = fmaxf(mx, block_scores[J]);
  mx = block_max<kThreads>(mx, fscratch);
  const float threshold = __fmul_rn(R.alpha, mx);
  const bool dense_row = I >= p.blocks - R.last_blocks;
  int kept = 0;
  for (int J = threadIdx.x; J < n; J += kThreads) {
    const bool must = J < R.sink_blocks || J > I - R.local_blocks || dense_row;
    keep[J] = must || block_scores[J] >= threshold;
    kept += keep[J];
  }
  kept = block_sum<kThreads>(kept, iscratch);
  const int want = min(R.min_blocks, n);
  for (; kept < want; ++kept) {
    const int j = best_unkept<kThreads>(block_scores, keep, n, fscratch, iscratch);
    __syncthreads();
    if (threadIdx.x == 0) keep[j] = 1;
    __syncthreads();
  }
  __syncthreads();
  const long long row_start = (long long)h * triangle(p.blocks) + triangle(I);
  if (warp == 0) {
    int* out = p.staged + row_start;
    int base = 0;
    for (int J0 = 0; J0 < n; J0 += 32) {
      const int J = J0 + lane;
      const bool k = J < n && keep[J];
      const unsigned b = __ballot_sync(0xFFFFFFFFu, k);
      if (k) out[base + __popc(b & ((1u << lane) - 1u))] = J;
      base += __popc(b);
    }
    if (lane == 0) p.counts[h * p.blocks + I] = base;
  }
  if (p.scores) {
    for (int J = threadIdx.x; J < n; J += kThreads) p.scores[row_start + J] = block_scores[J];
  }
}

template <class C, class S>
__device__ void block_score(const BlockSelectParams& p, unsigned char* smem) {
  constexpr int D = C::kDim, T = C::kTile, W = C::kThreads / 32, NT = T / 8;
  constexpr BlockScoreSmem L{D, T, C::kMaxBlocks, W};
  constexpr int RB = L.row_bytes();
  static_assert(W * 16 == kBlockTokens, "one warp per 16 query rows of the block");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
  // The largest query blocks first: they hold the most key blocks.
  const int I = p.blocks - 1 - int(blockIdx.x / C::kHeads);
  const int h = int(blockIdx.x % C::kHeads), kv = h / (C::kHeads / C::kKvHeads);
  const int n = I + 1, tiles = (n + T - 1) / T;
  float* block_scores = reinterpret_cast<float*>(smem + L.scores_off());
  float* partial = reinterpret_cast<float*>(smem + L.partial_off());
  unsigned char* keep = smem + L.keep_off();
  float* fscratch = reinterpret_cast<float*>(smem + L.reduce_off());
  int* iscratch = reinterpret_cast<int*>(smem + L.reduce_off()) + 64;

  u32 a[D / 16][4];
  load_q_fragments<D, C::kHeads>(p.q, (long long)I * kBlockTokens + warp * 16, h, g, t4, a);

  auto load_tile = [&](int tile, int stage) {
    char* dst = reinterpret_cast<char*>(smem) + stage * L.stage_bytes();
    constexpr int VPR = D * 2 / 16;
    for (int e = threadIdx.x; e < T * VPR; e += C::kThreads) {
      const int j = e / VPR, v = e % VPR, J = tile * T + j;
      const char* src = reinterpret_cast<const char*>(
                            p.pooled + ((long long)kv * p.blocks + (J < n ? J : 0)) * D) + v * 16;
      copy_async_16(dst + j * RB + v * 16, src, J < n);
    }
    copy_async_commit();
  };

  float m[2] = {minus_infinity(), minus_infinity()}, l[2] = {0.0f, 0.0f}, inv[2] = {0.0f, 0.0f};
  load_tile(0, 0);
  for (int it = 0; it < 2 * tiles; ++it) {
    const int tile = it % tiles;
    const bool second = it >= tiles;
    if (it + 1 < 2 * tiles) load_tile((it + 1) % tiles, (it + 1) & 1);
    else copy_async_commit();
    copy_async_wait<1>();
    __syncthreads();
    if (it == tiles) quad_row_stats(m, l, inv);  // pass 1 is over
    const char* keys = reinterpret_cast<const char*>(smem) + (it & 1) * L.stage_bytes();
    float colsum[NT][2];
    // One pass's steps over the tile's chunks; the bound test only where the tile reaches
    // past n (the last one). The same operations on the same values in every branch.
    auto chunks = [&](auto pass2, auto bounded) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        float c[4];
        dot_16x8<D>(a, keys + nt * 8 * RB, RB, lane, c);
        float x[4];
        chunk_scores<S, decltype(bounded)::value>(c, tile * T + nt * 8 + 2 * t4, n, x);
        if constexpr (decltype(pass2)::value) chunk_column_sums(x, m, inv, colsum[nt]);
        else chunk_row_stats(x, m, l);
      }
    };
    using Yes = BoolTag<true>;
    using No = BoolTag<false>;
    const bool bounded = (tile + 1) * T > n;
    if (!second) {
      if (bounded) chunks(No{}, Yes{});
      else chunks(No{}, No{});
    } else {
      if (bounded) chunks(Yes{}, Yes{});
      else chunks(Yes{}, No{});
    }
    if (second) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        warp_column_sums(colsum[nt]);
        if (g == 0) {
          partial[warp * T + nt * 8 + 2 * t4] = colsum[nt][0];
          partial[warp * T + nt * 8 + 2 * t4 + 1] = colsum[nt][1];
        }
      }
      __syncthreads();
      for (int j = threadIdx.x; j < T; j += C::kThreads) {
        const int J = tile * T + j;
        if (J >= n) continue;
        float s = partial[j];
        for (int w = 1; w < W; ++w) s = __fadd_rn(s, partial[w * T + j]);
        block_scores[J] = s;
      }
    }
    __syncthreads();
  }
  keep_blocks<C::kThreads>(p, I, h, n, lane, warp, block_scores, keep, fscratch, iscratch);
}


// The CSR offsets: an exclusive scan of the counts by one CTA of kScanThreads.
template <class C, int kScanThreads>
__device__ void block_offsets(const BlockSelectParams& p) {
  __shared__ int sums[kScanThreads];
  const int rows = C::kHeads * p.blocks, per = (rows + kScanThreads - 1) / kScanThreads;
  const int a = min(rows, int(threadIdx.x) * per), b = min(rows, a + per);
  int own = 0;
  for (int i = a; i < b; ++i) own += p.counts[i];
  sums[threadIdx.x] = own;
  __syncthreads();
  for (int o = 1; o < kScanThreads; o <<= 1) {
    const int v = int(threadIdx.x) >= o ? sums[threadIdx.x - o] : 0;
    __syncthreads();
    sums[threadIdx.x] += v;
    __syncthreads();
  }
  int run = sums[threadIdx.x] - own;
  for (int i = a; i < b; ++i) {
    p.offsets[i] = run;
    run += p.counts[i];
  }
  if (threadIdx.x == kScanThreads - 1) p.offsets[rows] = sums[threadIdx.x];
}

// One CTA per (head, query block): its staged row to the CSR indices.
template <class C>
__device__ void block_compact(const BlockSelectParams& p) {
  const int r = blockIdx.x, h = r / p.blocks, I = r % p.blocks;
  const int* src = p.staged + (long long)h * triangle(p.blocks) + triangle(I);
  int* dst = p.indices + p.offsets[r];
  for (int i = threadIdx.x; i < p.counts[r]; i += blockDim.x) dst[i] = src[i];
}

}  // namespace winnow

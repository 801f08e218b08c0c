// The retrieval mode's corpus stream: a persistent grid, each CTA scoring its
// key tiles against ALL queries of the pass on the tensor cores (wgmma m64n64: 64 keys of
// a warpgroup on the M side, the 64 queries on the N side), key chunks of 128 bytes of d
// brought by TMA into a ring of stages that a producer warp fills (mbarrier full/empty
// handshakes). Three uses of the same scoring code, so their scores have the same bits:
// the sample pass (every score of the sample tiles into `samples`), the filter (RankKeys
// at or above the query's threshold appended to its CandidateList by warp-aggregated
// atomics) and, compiled with kMaterialize, the score matrix.
#pragma once
#include "common/batched_copy.cuh"
#include "common/element_decode.cuh"
#include "ptx/grid_dependency.cuh"
#include "knn/knn_params.cuh"
#include "knn/knn_workspace.cuh"
#include "ptx/mbarrier.cuh"
#include "select/rank_order.cuh"
#include "common/score_ops.cuh"
#include "ptx/tma.cuh"
#include "ptx/wgmma_tiles.cuh"

// Tries of an mbarrier wait before the kernel traps: a handshake bug then ends the launch
// with an error instead of hanging the device (each try suspends for a short while).
#ifndef WINNOW_KNN_WAIT_LIMIT
#define WINNOW_KNN_WAIT_LIMIT (1u << 26)
#endif
// A diagnostic switch (through WINNOW_NVRTC_OPTIONS, either backend): 1 prints, before the
// trap, which thread gave up on which barrier (its shared-memory offset) and parity. Off by
// default: a printf call in the kernel is an extern call, which makes ptxas serialise the
// wgmma pipeline.
#ifndef WINNOW_KNN_WAIT_REPORT
#define WINNOW_KNN_WAIT_REPORT 0
#endif
// The filter's first test per score: one float compare against the query's threshold as a
// score held in registers (a superset of the exact RankKey test, which runs only behind
// it). 0: the exact test on every score (the slower form, kept to compare against).
#ifndef WINNOW_KNN_PREFILTER
#define WINNOW_KNN_PREFILTER 1
#endif

namespace winnow {

#if defined(__CUDA_ARCH__)
// mbarrier_wait with a bound (WINNOW_KNN_WAIT_LIMIT tries, then __trap).
__device__ __forceinline__ void knn_wait(u64* bar, unsigned parity) {
  for (u32 i = 0;; ++i) {
    u32 done;
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(shared_address(bar)), "r"(parity)
        : "memory");
    if (done) return;
    if (i >= WINNOW_KNN_WAIT_LIMIT) {
#if WINNOW_KNN_WAIT_REPORT
      printf("winnow knn_wait: CTA %d thread %d gave up on the mbarrier at shared offset %u, "
             "parity %u\n", int(blockIdx.x), int(threadIdx.x), shared_address(bar), parity);
#endif
      __trap();
    }
  }
}

// Sum of squares of 8 fp16 / bf16 elements in order, onto acc (one rounding each: fma).
template <int ELEM>
__device__ __forceinline__ float knn_square_sum8(const uint4& v, float acc) {
  const u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const unsigned short h = (unsigned short)(w[i >> 1] >> ((i & 1) * 16));
    const float x = ELEM == kElemBF16 ? decode_bf16(h) : decode_f16_fast(h);
    acc = __fmaf_rn(x, x, acc);
  }
  return acc;
}

// Appends RankKey rk to query n's CandidateList: the lanes that got here share one atomic
// per query (all of them when every key passes: ties, a fallback round). The list's order
// is not part of the result: the select is exact over it.
__device__ __forceinline__ void knn_append(const KnnParams& p, int n, u64 rk, int lane) {
  const unsigned act = __activemask();
  const unsigned peers = __match_any_sync(act, n);
  const int leader = __ffs(peers) - 1;
  u32 base = 0;
  if (lane == leader) base = atomicAdd(&p.rows[n].count, u32(__popc(peers)));
  base = __shfl_sync(peers, base, leader);
  const u32 at = base + u32(__popc(peers & ((1u << lane) - 1u)));
  if (at < u32(p.capacity)) p.lists[(long long)n * p.capacity + at] = rk;
}

// The stream over this CTA's tiles (tile i of the pass's list: i * sample_stride in the
// sample pass, i otherwise; CTA b takes i = b, b + grid, ...). C: WinnowKnnConfig, S: the
// score functor.
template <class C, class S>
__device__ void knn_stream(const KnnParams& p, const TmaMap* kmap, unsigned char* smem) {
  grid_dependency_trigger();  // the next launch may start (grid_dependency.cuh)
  constexpr int RB = C::kDim * 2, NC = RB / kKnnChunkBytes, Q = kKnnQueries, ST = C::kStages;
  static_assert(RB % kKnnChunkBytes == 0 && C::kThreads == kKnnStreamThreads, "knn tile shape");
  constexpr KnnStreamSmem L{RB, ST};
  // A fallback round waits for the select before it at once, and ends at once when it has
  // nothing to rerun (the same word for every thread). The other launches copy the queries
  // before they wait (grid_dependency.cuh): the copy reads only the caller's q.
  if (!C::kMaterialize && p.round > 0) {
    grid_dependency_wait();
    if (p.counters[kKnnRoundRows + p.round] == 0) return;
  }
  unsigned char* qs = smem;
  unsigned char* ring = smem + L.ring_off();
  u64* thr = reinterpret_cast<u64*>(smem + L.thresholds_off());
  u32* skip = reinterpret_cast<u32*>(smem + L.skip_off());
  float* qsq = reinterpret_cast<float*>(smem + L.qsq_off());
  float* wq = reinterpret_cast<float*>(smem + L.w_off());
  float* pf = reinterpret_cast<float*>(smem + L.prefilter_off());
  u32* fixed = reinterpret_cast<u32*>(smem + L.fixed_off());
  u32* stage_counts = reinterpret_cast<u32*>(smem + L.stage_count_off());
  u64* stage_keys = reinterpret_cast<u64*>(smem + L.stage_keys_off());
  u64* full = reinterpret_cast<u64*>(smem + L.barriers_off());
  u64* empty = full + ST;
  const int tid = threadIdx.x;
  const bool sample = !C::kMaterialize && p.sample_pass;

  // The queries as the swizzled B operand (rows past the pass's queries are zeros): 16-byte
  // chunks where the rows allow (every launch pays this; element by element it took a
  // large share of the sample pass in ncu), eight loads in flight per thread
  // (batched_copy.cuh), else element by element.
  const unsigned short* qg = static_cast<const unsigned short*>(p.q);
  if ((reinterpret_cast<unsigned long long>(qg) & 15u) == 0 && (p.q_row_stride & 7) == 0) {
    constexpr int CPR = RB / 16;  // 16-byte chunks per query row
    batched_copy<C::kThreads, 8>(
        Q * CPR, tid,
        [&](int i) {
          const int r = i / CPR, c = i % CPR;
          return r < p.queries ? *reinterpret_cast<const uint4*>(qg + r * p.q_row_stride + 8 * c)
                               : make_uint4(0u, 0u, 0u, 0u);
        },
        [&](int i, const uint4& v) {
          *reinterpret_cast<uint4*>(qs + swizzled_chunk<Q>(i / CPR, i % CPR)) = v;
        });
  } else {
    batched_copy<C::kThreads, 8>(
        Q * (RB / 2), tid,
        [&](int i) {
          const int r = i / (RB / 2), e = i % (RB / 2);
          return r < p.queries ? qg[r * p.q_row_stride + e] : (unsigned short)0;
        },
        [&](int i, unsigned short v) {
          const int r = i / (RB / 2), e = i % (RB / 2);
          *reinterpret_cast<unsigned short*>(qs + swizzled_chunk<Q>(r, (2 * e) >> 4) + ((2 * e) & 15)) = v;
        });
  }
  // |q|^2 below reads the copy.
  if (C::kUsesQSq) __syncthreads();
  // What earlier launches of the call wrote (the query states, the counters) and the
  // workspace they read are touched only from here on.
  grid_dependency_wait();
  if (tid < Q) {
    const bool real = tid < p.queries;
    bool active = real;
    if (!C::kMaterialize && !sample) {
      const KnnRowState rs = p.rows[tid];
      thr[tid] = rs.threshold;
      fixed[tid] = rs.fixed;
      active = real && (p.round == 0 || rs.retry != 0);
      // The prefilter: score s can pass the exact test (order_key(s) at or above the
      // threshold's order key t) only if !(s < order_key_score(t)), NaN scores included;
      // where t stands for no real score (a NaN pattern), the compare with NaN passes
      // everything; t = 0 admits every score (-inf); a query not filtered: +inf (only
      // +inf and NaN go on to the exact test, which rejects them).
      const u32 t = u32(rs.threshold >> 32);
      pf[tid] = !active ? __int_as_float(0x7F800000) : t == 0 ? __int_as_float(0xFF800000) : order_key_score(t);
    }
    skip[tid] = active ? 0u : 1u;
    wq[tid] = C::kUsesW && real ? p.w[tid * p.w_row_stride] : 0.0f;
  }
  if (C::kUsesQSq && tid < 4 * Q) {
    // |q|^2 of query tid / 4: four threads each sum a quarter of d in element order from
    // the swizzled copy (16-byte chunks of 8 elements; d is a multiple of 64), then the
    // quarters are added pairwise, (0 + 1) + (2 + 3): the same in every mode. One thread
    // per query summing all of d from global memory, one load after another, in every
    // launch made l2 with the key norms given much slower than ip; four threads with
    // 16-byte loads cut most of that, and from shared memory the loads wait on no L2
    // round trips.
    constexpr int CHUNKS = C::kDim / 32;  // 16-byte chunks in a quarter of d
    static_assert(C::kDim % 32 == 0, "|q|^2 by quarters of whole chunks");
    const int n = tid >> 2, part = tid & 3;
    float s = 0.0f;
    if (n < p.queries) {
#pragma unroll 4
      for (int c = 0; c < CHUNKS; ++c)
        s = knn_square_sum8<C::kElem>(
            *reinterpret_cast<const uint4*>(qs + swizzled_chunk<Q>(n, part * CHUNKS + c)), s);
    }
    s = __fadd_rn(s, __shfl_xor_sync(0xFFFFFFFFu, s, 1));
    s = __fadd_rn(s, __shfl_xor_sync(0xFFFFFFFFu, s, 2));
    if (part == 0) qsq[n] = s;
  } else if (!C::kUsesQSq && tid < Q) {
    qsq[tid] = 0.0f;
  }
  for (int i = tid; i < kKnnMathWarps * Q; i += C::kThreads) stage_counts[i] = 0;
  if (tid == 0) {
    for (int i = 0; i < ST; ++i) {
      mbarrier_init(full + i, 1);
      mbarrier_init(empty + i, 8);  // one arrival per math warp
    }
    mbarrier_init_fence();
  }
  fence_async_smem();  // the query stores, read by wgmma through the async proxy
  __syncthreads();

  const int total = sample ? p.sample_tiles : p.key_tiles;
  const int stride = sample ? p.sample_stride : 1;
  const int warp_all = tid >> 5, lane = tid & 31;
  if (warp_all == 8) {  // the producer warp: lane 0 issues every copy
    if (lane == 0) {
      tma_prefetch(kmap);
      unsigned pos = 0;
      for (int i = blockIdx.x; i < total; i += gridDim.x) {
        const int tile = i * stride;
        for (int c = 0; c < NC; ++c, ++pos) {
          const RingSlot slot = ring_slot(pos, ST);
          knn_wait(empty + slot.stage, slot.parity ^ 1u);
          mbarrier_arrive_expect_tx(full + slot.stage, unsigned(kKnnStageBytes));
          tma_load_2d(ring + slot.stage * kKnnStageBytes, kmap, full + slot.stage,
                      c * kKnnChunkBytes, tile * kKnnKeyTile);
        }
      }
    }
    return;
  }

  const int wg = tid >> 7, warp = warp_all & 3, g = lane >> 2, t4 = lane & 3;
  const u32 q_lo = wgmma_desc_lo(qs);
  u32* scount = stage_counts + warp_all * Q;                 // this warp's staging
  u64* skeys = stage_keys + warp_all * Q * kKnnStageSlots;
  // The thread's 16 queries' prefilter scores (query 8 j + 2 t4 + b at 2 j + b), fixed for
  // the launch.
  float pfr[16];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
#pragma unroll
    for (int b = 0; b < 2; ++b) pfr[2 * j + b] = C::kMaterialize || sample ? 0.0f : pf[8 * j + 2 * t4 + b];
  }
  // Their |q|^2 and w too (l2, cosine, weighted programs): read once, not at every score.
  float qsqr[16], wr[16];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      qsqr[2 * j + b] = C::kUsesQSq ? qsq[8 * j + 2 * t4 + b] : 0.0f;
      wr[2 * j + b] = C::kUsesW ? wq[8 * j + 2 * t4 + b] : 0.0f;
    }
  }
  // A radix fallback round counts its survivors' next digit (knn_refine).
  const bool radix = C::kRadix && !C::kMaterialize && !sample && p.round > 0;
  // The previous tile's reservations (see the tile's end): query lane + 32 h's slot base
  // and count of staged entries (0: none).
  static_assert(Q == 64, "two queries a lane");
  u32 res_base[2] = {0u, 0u}, res_m[2] = {0u, 0u};
  // Writes the reserved entries from the staging to the lists (the staging is free again
  // after it).
  auto write_reserved = [&] {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int q = lane + 32 * h;
      const u32 m = res_m[h], base = res_base[h];
      for (u32 s2 = 0; s2 < m; ++s2) {
        if (base + s2 < u32(p.capacity))
          p.lists[(long long)q * p.capacity + base + s2] = skeys[q * kKnnStageSlots + s2];
      }
      res_m[h] = 0u;
    }
    __syncwarp();
  };
  unsigned pos = 0;
  for (int i = blockIdx.x; i < total; i += gridDim.x, pos += NC) {
    const int tile = i * stride;
    float acc[32];
    float ksq_half = 0.0f;  // this lane's half of key (16 warp + lane / 2)'s |k|^2
    const int key0 = tile * kKnnKeyTile + wg * 64 + warp * 16 + g;
    // |k|^2 of the thread's two keys (g and g + 8 of the warp's 16) when the caller gave
    // them: loaded now, used after the tile's MMAs.
    const bool ksq_given = C::kUsesKSq && p.ksq != nullptr;
    float ksq_in[2] = {0.0f, 0.0f};
    if (ksq_given) {
#pragma unroll
      for (int h = 0; h < 2; ++h) ksq_in[h] = key0 + 8 * h < p.num_keys ? p.ksq[key0 + 8 * h] : 0.0f;
    }
    int prev_stage = 0;
#pragma unroll 1
    for (int c = 0; c < NC; ++c) {
      const RingSlot slot = ring_slot(pos + unsigned(c), ST);
      knn_wait(full + slot.stage, slot.parity);
      const unsigned char* st = ring + slot.stage * kKnnStageBytes;
      const u32 a_lo = wgmma_desc_lo(st + wg * 64 * kKnnChunkBytes);
      // |k|^2 from the stage (both it and the MMAs only read it).
      auto key_norms = [&] {
        const int row = wg * 64 + warp * 16 + (lane >> 1);
#pragma unroll
        for (int v = 0; v < 4; ++v) {
          const int chunk = 4 * (lane & 1) + v;
          const uint4 x = *reinterpret_cast<const uint4*>(st + row * 128 + ((chunk ^ (row & 7)) << 4));
          ksq_half = knn_square_sum8<C::kElem>(x, ksq_half);
        }
      };
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kKnnChunkBytes; kk += 32) {
        wgmma_m64n<64, C::kElem>(acc, wgmma_desc_from_lo(a_lo, kk),
                                 wgmma_desc_from_lo(q_lo, swizzled_at<Q>(0, c * kKnnChunkBytes + kk)),
                                 (c > 0 || kk > 0) ? 1 : 0);
      }
      wgmma_commit();
      // While the MMAs run: before them, the sums would hold back every chunk's wgmma
      // issue (l2 then takes well over ip's time).
      if (C::kUsesKSq && !ksq_given) key_norms();
      if (c > 0) {  // the previous chunk's MMAs are done: its stage goes back to the producer
        wgmma_wait<1>();
        __syncwarp();
        if (lane == 0) mbarrier_arrive(empty + prev_stage);
      }
      prev_stage = slot.stage;
    }
    // The previous tile's survivors, while this tile's last MMAs run.
    if (!C::kMaterialize && !sample) write_reserved();
    wgmma_wait<0>();
    wgmma_pin(acc);
    __syncwarp();
    if (lane == 0) mbarrier_arrive(empty + prev_stage);

    // |k|^2 of the thread's two keys, given, or from the lanes that summed their halves.
    float ksq[2] = {ksq_in[0], ksq_in[1]};
    if (C::kUsesKSq && !ksq_given) {
      const float ksq_lane = __fadd_rn(ksq_half, __shfl_xor_sync(0xFFFFFFFFu, ksq_half, 1));
      ksq[0] = __shfl_sync(0xFFFFFFFFu, ksq_lane, 2 * g);
      ksq[1] = __shfl_sync(0xFFFFFFFFu, ksq_lane, 2 * (g + 8));
    }
    const int slot0 = i * kKnnKeyTile + wg * 64 + warp * 16 + g;  // the sample's slot
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        // Accumulator 4 j + e: key g (+ 8 for e >= 2), query 8 j + 2 t4 (+ 1 for odd e).
        const int n = 8 * j + 2 * t4 + (e & 1), h = e >> 1;
        const int key = key0 + 8 * h;
        // A key of the corpus and a query of the pass being filtered (read where needed:
        // the filter reads it only behind the prefilter).
        auto real = [&] { return key < p.num_keys && skip[n] == 0; };
        ScoreArgs a;
        const float dot = acc[4 * j + e];
        a.dot = &dot;
        a.w = wr + 2 * j + (e & 1);
        a.kscale = C::kUsesKScale && real() ? p.kscale[key] : 1.0f;
        a.qsq = qsqr + 2 * j + (e & 1);
        a.ksq = ksq[h];
        const float score = S::eval(a);
        if constexpr (C::kMaterialize) {
          if (real()) p.out_scores[n * p.out_scores_stride + key] = score;
        } else if (sample) {
          if (n < p.queries)
            p.samples[(long long)n * p.sample_cap + slot0 + 8 * h] = real() ? order_key(score) : 0u;
        } else if (!WINNOW_KNN_PREFILTER || !(score < pfr[2 * j + (e & 1)])) {
          const u64 rk = rank_key(order_key(score), key);
          if (real() && rk >= thr[n]) {
            // A survivor is rare (the threshold aims at sqrt(k capacity) of N per query):
            // no warp vote per score on the common path. It takes a slot of the warp's
            // staging for its query (a shared atomic), or, when the slots are full (ties,
            // a fallback round), goes straight to the list. In a radix fallback round it
            // is also counted in its query's histogram (knn_digit: -1 above the group).
            if (radix) {
              const int digit = knn_digit(rk, thr[n], fixed[n]);
              if (digit >= 0) atomicAdd(p.hist + n * kKnnDigits + digit, 1u);
            }
            const u32 at = atomicAdd(scount + n, 1u);
            if (at < u32(kKnnStageSlots)) {
              skeys[n * kKnnStageSlots + at] = rk;
            } else {
              knn_append(p, n, rk, lane);
            }
          }
        }
      }
    }
    if (!C::kMaterialize && !sample) {
      // The tile's staged survivors: one reservation per query that has any, issued now and
      // written at the next tile's last MMAs (write_reserved), so that the atomics' round
      // trip to L2 is hidden behind a tile instead of holding the warp (at k = 8192 about
      // 15 of the 64 queries had survivors in a warp's tile: two round trips a tile).
      __syncwarp();
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int q = lane + 32 * h;
        const u32 c = scount[q];
        res_m[h] = min(c, u32(kKnnStageSlots));
        if (c != 0) {
          scount[q] = 0;
          res_base[h] = atomicAdd(&p.rows[q].count, res_m[h]);
        }
      }
    }
  }
  if (!C::kMaterialize && !sample) write_reserved();
}
#endif

}  // namespace winnow

// The retrieval mode's per-query steps, one CTA per query of the pass: the first threshold
// from the sample, and the exact select over the query's CandidateList with its fallback.
//
// Exactness: the list holds every key whose RankKey is at or above the threshold (no
// overflow) and at least min(k, N) of them, or the row is not answered from it. A row that
// fails is counted once (counters[kKnnFallbackRows]) and reruns the filter with a new
// threshold: after an overflow the k-th best of the stored entries (a subset of the
// corpus, so its k-th best is at or below the true k-th best), after too few survivors 0
// (every key). Rows still failing after the last round are counted in
// counters[kKnnUnresolvedRows] and written as -1. The stored entries are the first
// survivors to arrive, so those rounds need not converge.
// With C::kRadix (every top-k plan) the rounds after the first instead refine the
// threshold by the histogram of their survivors' next digit (knn_refine): each fixes
// kKnnDigitBits more bits of the need-th best RankKey, keeping at least need survivors, so
// every row is answered within kKnnRadixRounds rounds (C::kRounds), whatever its keys.
#pragma once
#include "common/batched_copy.cuh"
#include "select/bitonic_sort.cuh"
#include "ptx/grid_dependency.cuh"
#include "select/index_rank.cuh"
#include "knn/knn_params.cuh"
#include "knn/knn_workspace.cuh"
#include "select/radix_select.cuh"
#include "select/rank_order.cuh"

namespace winnow {

// What radix_kth and sort_desc need of the CTA: its width.
struct KnnSelectCta {
  static constexpr int kThreads = kKnnSelectThreads;
};

// The select kernels' shared memory (knn_select_smem_bytes).
struct KnnSelectSmem {
  u32* radix;  // [256] bins + the kScratchRadix* slots
  u32* taken;  // entries gathered into `sel`
  u64* sel;    // [next_pow2(k)]
  __device__ explicit KnnSelectSmem(unsigned char* base) {
    radix = reinterpret_cast<u32*>(base);
    taken = radix + kScratchWords;
    sel = reinterpret_cast<u64*>(base + kScratchWords * 4 + 64);
  }
  // The staging region after a sort list of kp entries (knn_select_stage_bytes).
  __device__ void* stage(int kp) const { return sel + kp; }
};

#if defined(__CUDA_ARCH__) || defined(WINNOW_EMULATED)
// The order key (index bits zero) of the m-th best (m >= 1) of the n sample order keys at v
// (0: no score), every index admitted: a row's first threshold. The whole CTA calls it.
template <class C>
__device__ u64 knn_sample_threshold(const KnnParams& p, unsigned char* smem, const u32* v, int n,
                                    u32 m) {
  const KnnSelectSmem s(smem);
  // The passes read shared memory for the first ns scores, the rest from global memory
  // (at N = 5M the 65408 scores of a query exceed the staging; reading all of them from
  // L2 in every pass made the passes wait on L2).
  u32* staged = static_cast<u32*>(s.stage(next_pow2(C::kTopK)));
  const int ns = min(n, int(p.stage_bytes / 4));
  batched_copy<kKnnSelectThreads, 8>(
      ns, threadIdx.x, [&](int i) { return v[i]; }, [&](int i, u32 x) { staged[i] = x; });
  __syncthreads();
  // Only the order key of the m-th best is kept (every index admitted), so the radix
  // passes stop after the high 32 bits: 4 passes, not 8.
  const u64 thr = radix_kth<KnnSelectCta, 32>(s, m, [&](auto f) {
    for (int i = threadIdx.x; i < ns; i += kKnnSelectThreads) f(rank_key(staged[i], i));
    for (int i = ns + threadIdx.x; i < n; i += kKnnSelectThreads) f(rank_key(v[i], i));
  });
  return thr & 0xFFFFFFFF00000000ull;
}

// The first threshold of query blockIdx.x: the sample's rank-th best score, every index
// admitted (RankKeys from (order key << 32) up). No sample: 0, every key.
//
// It also starts the pass's query states (the host clears them only where no sample runs):
// query r's whole state, and by CTA 0 the states past the pass's queries and the round
// counts (an earlier pass's are in them).
template <class C>
__device__ void knn_threshold(const KnnParams& p, unsigned char* smem) {
  grid_dependency_trigger();  // the next launch may start (grid_dependency.cuh)
  grid_dependency_wait();
  const int r = blockIdx.x;
  if (r == 0) {
    for (int i = p.queries + int(threadIdx.x); i < kKnnQueries; i += kKnnSelectThreads)
      p.rows[i] = KnnRowState{};
    for (int i = kKnnRoundRows + int(threadIdx.x); i < 64; i += kKnnSelectThreads) p.counters[i] = 0u;
  }
  const u32 m = u32(min(p.sample_rank, p.sample_valid));
  u64 thr = 0;
  if (p.sample_tiles > 0 && m > 0)
    thr = knn_sample_threshold<C>(p, smem, p.samples + (long long)r * p.sample_cap,
                                  p.sample_tiles * kKnnKeyTile, m);
  if (threadIdx.x == 0) {
    KnnRowState rs{};
    rs.threshold = thr;
    p.rows[r] = rs;
  }
}

// Row r's outputs (the need = min(k, keys of its window) best), or its next fallback round
// (see the top of the file): the retrieval mode's select (knn_select) and the paged decode
// stream's (templates/paged/paged_stream_select.cuh). The whole CTA calls it, after
// grid_dependency_wait.
template <class C>
__device__ void knn_select_row(const KnnParams& p, unsigned char* smem, int r, u32 need) {
  constexpr int K = C::kTopK, KP = next_pow2(C::kTopK);
  const KnnSelectSmem s(smem);
  KnnRowState* rs = p.rows + r;
  if (p.round > 0 && rs->retry == 0) return;  // answered in an earlier round
  const u32 count = rs->count, cap = u32(p.capacity);
  const u64 old_threshold = rs->threshold;
  __syncthreads();  // every thread has read the state before thread 0 rewrites it
  const u32 stored = min(count, cap);
  const u64* list = p.lists + (long long)r * p.capacity;
  if (long(stored) * 8 <= p.stage_bytes && count <= cap && count >= need) {
    // An answered row's passes read shared memory.
    u64* staged = static_cast<u64*>(s.stage(KP));
    batched_copy<kKnnSelectThreads, 8>(
        int(stored), threadIdx.x, [&](int i) { return list[i]; },
        [&](int i, u64 x) { staged[i] = x; });
    __syncthreads();
    list = staged;
  }
  auto scan = [&](auto f) {
    for (u32 i = threadIdx.x; i < stored; i += kKnnSelectThreads) f(list[i]);
  };
  const bool answered = count <= cap && count >= need;
  int* out_idx = p.out_indices + r * p.out_indices_stride;
  float* out_sc = p.out_scores ? p.out_scores + r * p.out_scores_stride : nullptr;
  if (answered || p.round == C::kRounds) {
    u32 chosen = 0;
    bool placed = false;  // the chosen entries are written already (index order)
    if (answered && need > 0) {
      // Exactly `need` distinct RankKeys (all of them when stored == need).
      gather_best<KnnSelectCta>(s, need, stored, scan, s.sel, KP, s.taken);
      chosen = need;
      // Sorted: by score; unsorted: by index, ascending (one answer per row either way).
      // Unsorted rows go straight to their slots through a bitmap over their indices' span
      // in the staging region (free after gather_best) where it fits (index_rank.cuh), else
      // through the sort as sorted ones.
      if constexpr (!C::kSorted) {
        // Spans up to 128 KP keys (the fused kernel's reach): marking a wider one costs more
        // than the sort (a 1M-key row's select was slower so).
        const long long words_cap = p.stage_bytes / 4 < 6LL * KP ? p.stage_bytes / 4 : 6LL * KP;
        placed = index_order_place<kKnnSelectThreads>(
            s.sel, need, static_cast<u32*>(s.stage(KP)), words_cap, s.radix,
            [&](u32 slot, u64 v) {
              out_idx[slot] = rank_key_index(v) + p.key_offset;
              if (out_sc) out_sc[slot] = output_score(v, true, p.negate_scores);
            });
      }
      if (!placed) sort_desc<KnnSelectCta>(s.sel, KP, !C::kSorted);
    } else if (!answered && threadIdx.x == 0) {
      atomicAdd(p.counters + kKnnUnresolvedRows, 1u);
    }
    for (int i = int(threadIdx.x) + (placed ? int(chosen) : 0); i < K; i += kKnnSelectThreads) {
      const bool real = u32(i) < chosen;
      const u64 v = real ? s.sel[i] : 0ull;
      out_idx[i] = real ? rank_key_index(v) + p.key_offset : -1;
      if (out_sc) out_sc[i] = output_score(v, real, p.negate_scores);
    }
    if (threadIdx.x == 0) rs->retry = 0;
    return;
  }
  // The fallback: a new threshold and another round.
  u64 thr = 0;
  u32 fixed = 0;
  u32* hist = p.hist + (long long)r * kKnnDigits;
  if (C::kRadix && p.round > 0) {
    // A radix round (its count is at least need, and over the capacity): the next digit of
    // the need-th best RankKey from the round's histogram, staged in shared memory.
    u32* h = static_cast<u32*>(s.stage(KP));
    for (int i = threadIdx.x; i < kKnnDigits; i += kKnnSelectThreads) h[i] = hist[i];
    __syncthreads();
    if (threadIdx.x == 0) {
      const KnnRefined next = knn_refine(h, count, need, old_threshold, rs->fixed);
      s.sel[0] = next.threshold;
      s.taken[0] = next.fixed;
    }
    __syncthreads();
    thr = s.sel[0];
    fixed = s.taken[0];
  } else if (count > cap) {
    thr = max(old_threshold, radix_kth<KnnSelectCta>(s, u32(K), scan));
  }
  __syncthreads();  // every pass over the list is done
  // The next round's histogram starts at zero.
  if (C::kRadix) {
    for (int i = threadIdx.x; i < kKnnDigits; i += kKnnSelectThreads) hist[i] = 0u;
  }
  if (threadIdx.x == 0) {
    if (p.round == 0) atomicAdd(p.counters + kKnnFallbackRows, 1u);
    rs->threshold = thr;
    rs->fixed = fixed;
    rs->count = 0;
    rs->retry = 1;
    atomicAdd(p.counters + kKnnRoundRows + p.round + 1, 1u);
  }
}

// Query blockIdx.x's outputs, or its next fallback round.
template <class C>
__device__ void knn_select(const KnnParams& p, unsigned char* smem) {
  grid_dependency_trigger();  // the next launch may start (grid_dependency.cuh)
  grid_dependency_wait();
  knn_select_row<C>(p, smem, blockIdx.x, min(u32(C::kTopK), u32(p.num_keys)));
}
#endif

}  // namespace winnow

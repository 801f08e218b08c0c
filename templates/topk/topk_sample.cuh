// The sample that sets each row's first threshold: the caller's hint keys and a strided
// subset of the window, scored, and their k-th best as the low edge of the bins.
#pragma once
#include "topk/key_tile_loop.cuh"
#include "select/radix_select.cuh"
#include "select/rank_order.cuh"
#include "topk/sample_keys.cuh"
#include "topk/topk_params.cuh"
#include "topk/topk_smem.cuh"

namespace winnow {

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
  constexpr int KP = next_pow2(C::kTopK);
  constexpr TopkWorkspace W = workspace_of<C>();
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
  // In 32 bits (no 64-bit division: sample_keys.cuh): 2 k ns + n - 1 < 2^30 + 2^31.
  static_assert(K <= 8192 && C::kSample <= kMaxStridedSample, "the sample's 32-bit arithmetic");
  auto sample_rank = [](int ns, int n) {
    return min(u32(K), (2u * u32(K) * u32(ns) + u32(n) - 1u) / u32(n) + 16u);
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
  int* hint_keys = reinterpret_cast<int*>(ws + W.selection(0));
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
          ws[W.candidates(rr) + atomicAdd(&st.count, 1u)] = rank_key(ok, key);
          atomicMax(&st.sample_max, ok);
        },
        [&] { ++tile; }, [](int) {});
  }

  for (int r = 0; r < R; ++r) {
    RowState& st = s.rows[r];
    const u32 got = st.count;  // every thread reads the same count
    const int ns = strided_size(r);
    const u64* buf = ws + W.candidates(r);
    const long long n = st.end - st.start;
    u32 lo = 0;
    bool gated = false;
    if (ns > 0) {
      // The strided keys' sample_rank-th best (a guess of the row's 2k-th); only its order
      // key is used, so the radix passes stop there (LowestShift 32: 4 passes, not 8).
      lo = rank_key_order(radix_kth<C, 32>(s, sample_rank(ns, int(n)), [&](auto f) {
        for (int i = threadIdx.x; i < ns; i += C::kThreads) f(buf[i]);
      }));
      gated = true;
    }
    if (n > K && got > u32(ns) && got >= u32(K)) {
      // With hint keys: the whole sample's k-th best, a lower bound of the row's k-th
      // (distinct keys of its window), raises the edge when the hint holds good keys.
      lo = max(lo, rank_key_order(radix_kth<C, 32>(s, K, [&](auto f) {
                 for (u32 i = threadIdx.x; i < got; i += C::kThreads) f(buf[i]);
               })));
      gated = true;
    }
    if (threadIdx.x == 0) {
      st.bins = gated ? make_threshold_bins(lo, st.sample_max, C::kBins)
                      : make_threshold_bins(0u, 0xFFFFFFFFu, C::kBins);
      st.gate = gated ? 1 : 0;
      st.gate_score = gate_edge_score(st.bins, st.gate);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      st.count = 0;
      st.overflow = 0;
    }
  }
}

}  // namespace winnow

// The fused score + exact top-k kernel and its materialize mode: the orchestration of
// one work item; each step lives in its own header (included below).
//
// One CTA takes a block of C::kRows query rows at a time (persistent grid, work items
// drawn from a counter, heaviest first for causal windows). For each row it
//   1. scores a sample of its window (the caller's hint keys inside it, and a strided
//      subset) and takes a rank of it as the low edge of the ThresholdBins: the strided
//      keys' (2 k ns / n + 16)-th best, a guess of the row's 2k-th, raised to the whole
//      sample's k-th best when hint keys are in it (a lower bound of the row's k-th); a
//      guess that keeps fewer than k keys sends the row to the exact fallback, counted
//      (topk_sample.cuh);
//   2. streams the window in key tiles (key_tile_loop.cuh, tile_scoring.cuh): scores each
//      (row, key), keeps a histogram of bins, and appends keys whose bin is at or above the
//      row's gate to its CandidateBuffer; the gate rises from the histogram
//      (candidate_gate.cuh);
//   3. selects the exact top k from the CandidateBuffer by radix select on RankKeys
//      (unique, so exactly k survive), or, if the buffer ever overflowed, by radix select
//      over re-scored keys (the exact fallback, counted; topk_select.cuh,
//      radix_select.cuh), then writes the outputs or merges key parts (topk_output.cuh,
//      topk_merge.cuh).
// The generated stub defines the config C (shape and plan constants) and the score
// functor S, and instantiates topk_kernel<C, S> in one extern "C" entry point.
#pragma once
#include "debug/barrier_audit.cuh"  // first: it audits the __syncthreads() of the rest
#include "select/bitonic_sort.cuh"
#include "topk/candidate_gate.cuh"
#include "topk/key_tile_loop.cuh"
#include "ptx/mbarrier.cuh"
#include "debug/phase_clocks.cuh"
#include "select/radix_select.cuh"
#include "select/rank_order.cuh"
#include "topk/tile_scoring.cuh"
#include "ptx/tma.cuh"
#include "topk/topk_merge.cuh"
#include "topk/topk_output.cuh"
#include "topk/topk_params.cuh"
#include "topk/topk_rows.cuh"
#include "topk/topk_sample.cuh"
#include "topk/topk_select.cuh"
#include "topk/topk_smem.cuh"

// How many key tiles apart the filter raises each row's gate (gate_refresh_tiles). A
// refresh costs one warp about a hundred instructions per row; a longer interval lets more
// keys through to the histogram and the buffer meanwhile. It never changes the outputs:
// the gate only excludes keys below a bin the histogram has justified, and a row that
// overflows takes the exact fallback. A staler gate keeps more entries in a compaction, so
// it can only make an overflow likelier. Every 8 tiles was 4-9 % faster than every 4 at
// dsa-prefill 64K to 1M (k = 2048, the buffer checked every 16 tiles), with no fallback;
// every 2 was slower (docs/decisions/0055-gate-refresh-every-8-tiles.md). A plan whose
// buffer is checked every 4 tiles (smaller k, such as csa-1m's) keeps every 4: not
// measured at 8. -DWINNOW_GATE_REFRESH_TILES=N (experimental, a power of two) forces N.
#ifdef WINNOW_GATE_REFRESH_TILES
static_assert(WINNOW_GATE_REFRESH_TILES > 0 &&
                  (WINNOW_GATE_REFRESH_TILES & (WINNOW_GATE_REFRESH_TILES - 1)) == 0,
              "WINNOW_GATE_REFRESH_TILES: a power of two");
#endif

namespace winnow {

// The gate refresh interval of a plan whose buffer is checked every check_tiles tiles.
WINNOW_HD constexpr int gate_refresh_tiles([[maybe_unused]] int check_tiles) {
#ifdef WINNOW_GATE_REFRESH_TILES
  return WINNOW_GATE_REFRESH_TILES;
#else
  return check_tiles >= 16 ? 8 : 4;
#endif
}

// Sample, then filter, for every row of the block; then select each row.
template <class C, class S>
__device__ void topk_block(const TopkParams& p, const TopkSmem<C>& s, int row0, int split,
                           u64* ws, PhaseClocks& clocks) {
  constexpr int R = C::kRows, K = C::kTopK, CAP = C::kCapacity;
  constexpr TopkWorkspace W = workspace_of<C>();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

  // Every row's window within k keys (one part, index order, no scores asked for): each
  // of its keys is selected whatever its score, so the outputs are the window's positions
  // in order, -1 padded, and nothing is scored (a prompt or a decode request shorter than
  // k). The select would write the same (it orders the chosen keys by index here). Every
  // thread reads the same row states, so the CTA leaves together, the ring untouched.
  if constexpr (!C::kSorted) {
    bool within_k = p.key_splits == 1 && p.out_scores == nullptr;
    for (int r = 0; r < R && within_k; ++r) within_k = s.rows[r].end - s.rows[r].start <= K;
    if (within_k) {
      for (int e = threadIdx.x; e < R * K; e += C::kThreads) {
        const int r = e / K, i = e % K, row = row0 + r;
        if (row >= p.rows) continue;
        const RowState& st = s.rows[r];
        const int base = C::kAbsolute ? -p.key_offset : st.origin;  // as write_row
        p.out_indices[row * p.out_indices_stride + i] = i < st.end - st.start ? st.start + i - base : -1;
      }
      return;
    }
  }

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
  // Every kCheckTiles tiles the math threads check the buffers (a consistent count needs a
  // barrier) and compact those past 3/4, which leaves room for kCheckTiles more tiles of
  // appends when the capacity allows. Every kRefreshTiles tiles each row's gate rises from
  // its histogram, with no barrier: counts still being added only make the gate looser,
  // and it only rises. On the wgmma plain form the producer warp raises them (one writer
  // of every gate), between its loads: a refresh on a math warp held its warpgroup back at
  // the next MMA (docs/decisions/0061-gate-refresh-on-the-producer-warp.md). Elsewhere warp
  // r raises row r's.
  constexpr int kCheckTiles = CAP / 4 >= 16 * C::kKeyTile ? 16 : 4;
  constexpr int kRefreshTiles = gate_refresh_tiles(kCheckTiles);
  int tile = 0;
  score_tiles<C, S>(
      p, s, begin, end,
      [&](int r, int key, float sc) {
        RowState& st = s.rows[r];
        // Most scores fall below the gate: one float compare decides them (NaN passes).
        if (sc < st.gate_score) return;
        if (key < st.start || key >= st.end) return;
        const u32 ok = order_key(sc);
        const int b = st.bins.bin(ok);
        // Keys below the gate are out and need no count: the gate only rises, and every
        // count the refresh reads is of a bin at or above it.
        if (b < st.gate) return;
        atomicAdd(&s.hist[r * C::kBins + b], 1u);
        const u32 pos = atomicAdd(&st.count, 1u);
        if (pos < u32(CAP)) ws[W.candidates(r) + pos] = rank_key(ok, key);
      },
      [&] {
        ++tile;
        if constexpr (!producer_runs_steps<C>()) {
          if ((tile & (kRefreshTiles - 1)) == 0) {
            if constexpr (C::kWgmma) {
              // Rows alternate between the two math warpgroups (warps 0, 4, 1, 5, ...), so
              // that neither carries every refresh (R <= 8: 128 (row, head) pairs).
              const int r = (warp & 3) * 2 + (warp >> 2);
              if (warp < C::kMathThreads / 32 && r < R) refresh_gate<C>(s, r, lane);
            } else {
              for (int r = warp; r < R; r += C::kThreads / 32) refresh_gate<C>(s, r, lane);
            }
          }
        }
        if (tile % kCheckTiles != 0) return;
        visitor_sync<C>();
        for (int r = 0; r < R; ++r) {
          RowState& st = s.rows[r];
          if (st.count > u32(CAP)) st.overflow = 1;  // every thread reads the same count
          if (!st.overflow && st.count > u32(CAP) / 4 * 3) {
            compact_candidates<C>(s, r, ws + W.candidates(r));
          }
        }
        visitor_sync<C>();
      },
      [&](int t) {
        if (((t + 1) & (kRefreshTiles - 1)) == 0) {
          for (int r = 0; r < R; ++r) refresh_gate<C>(s, r, lane);
        }
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
    u64* sel = ws + W.selection(r);
    select_row<C, S>(p, s, r, ws + W.candidates(r), sel);
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
  u32* slot = s.radix + kScratchNextItem;
  __syncthreads();            // every thread has read the previous item
  if (threadIdx.x == 0) *slot = atomicAdd(&p.counters[2], 1u);
  __syncthreads();
  return int(*slot);
}

template <class C, class S>
__device__ void topk_kernel(const TopkParams& p, const TmaMap* kmap, unsigned char* smem) {
  TopkSmem<C> s(smem);
  barrier_audit_begin();
  if constexpr (C::kWgmma) {
    s.kmap = kmap;
    constexpr int STAGES = layout_of<C>().k_stages();
    if (threadIdx.x == 0) {
      for (int i = 0; i < STAGES; ++i) {
        mbarrier_init(s.ring_full + i, 33);  // 32 lanes + lane 0's bytes
        // One arrival per math thread, after its own reads of the stage: a warp's reads
        // ordered by __syncwarp before lane 0's arrival are ordered too, but racecheck
        // does not follow that chain (it reports hazards at the producer's writes).
        mbarrier_init(s.ring_empty + i, C::kMathThreads);
      }
      mbarrier_init_fence();
    }
    if (is_producer_warp<C>() && (threadIdx.x & 31) == 0) tma_prefetch(kmap);
    // next_work_item's barrier publishes the initialised barriers.
  }
  u64* ws = p.workspace + blockIdx.x * workspace_of<C>().cta_words();
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
    load_rows<C, S>(p, s, b * C::kRows, split);
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
  barrier_audit_end();
}

}  // namespace winnow

// The stream path's page stream (templates/paged/paged_stream_params.cuh): a fixed grid whose
// CTA c streams the c-th of stream_ctas equal shares of the pass's pages, taken in request
// order (prefix sums from the prepare kernel), so that a batch mixing 1K and 1M contexts
// spreads its pages evenly over the SMs whatever the lengths, and a CTA loads the q rows
// of only the one or two requests its share spans (a request switch stalls both math
// warpgroups: items of 8 pages taken from an atomic counter would switch at almost
// every item). The producer warp brings each page's 64 keys and 64
// scales by TMA (one 66-row box of the cache viewed as [num_blocks * 66, 128] bytes) into a
// ring of stages of 2 kPagedWgPages pages; math warpgroup h scores pages h kPagedWgPages ..
// of a stage, one after another, on wgmma m64n64 (64 keys x 64 heads, the row's q as the B
// operand in shared memory), one row of the request after another, sums the weighted heads
// next to the accumulators (wgmma_lane_partials: the fused top-k kernel's bits for the same
// program), sums the quad's partials so that each lane holds one key of the page pair (one
// filter epilogue for 32 keys a warp: ballot, reservation and barriers a page pair) and
// applies the post step (the key scale). Two uses of the same scoring:
//   sample pass (knn.sample_pass): every score of the request's sampled pages into the
//     row's sample slots (order keys, 0 past the row's window);
//   filter (knn.round r): RankKeys at or above the row's threshold appended to the row's
//     CandidateList (one atomic per warp and row), and in a radix round (r > 0) counted in
//     the row's digit histogram (knn_digit); in round r > 0 only requests with a row the
//     select sent back are streamed, and a launch with none ends at once.
// A block table entry outside the cache is not loaded; the request is flagged bad.
#pragma once
#include "ptx/grid_dependency.cuh"
#include "knn/knn_params.cuh"
#include "knn/knn_workspace.cuh"
#include "ptx/mbarrier.cuh"
#include "paged/paged_page_score.cuh"
#include "paged/paged_stream_params.cuh"
#include "select/rank_order.cuh"
#include "common/scaled_index.cuh"
#include "common/ring_slot.cuh"
#include "common/score_ops.cuh"
#include "topk/tile_scoring.cuh"
#include "ptx/tma.cuh"
#include "ptx/wgmma_tiles.cuh"
#if defined(__CUDA_ARCH__)
#include "knn/knn_stream.cuh"  // knn_wait
#endif

namespace winnow {

#if defined(__CUDA_ARCH__) || defined(WINNOW_EMULATED)
// Named barrier of the math warpgroups (the producer warp never takes part).
inline constexpr int kPagedMathBarrier = 1;

// A ring wait: on the GPU the retrieval stream's bounded one (a handshake bug traps after
// WINNOW_KNN_WAIT_LIMIT tries instead of hanging the device); the emulation's own wait has
// a watchdog.
__device__ __forceinline__ void paged_wait(u64* bar, unsigned parity) {
#if defined(__CUDA_ARCH__)
  knn_wait(bar, parity);
#else
  mbarrier_wait(bar, parity);
#endif
}

// The producer: lane 0 of warp 8. Streams this CTA's share of the pass's pages (request
// order, up to 2 kPagedWgPages pages of one request a stage), then marks the next stage as the end.
template <class C>
__device__ void paged_produce(const PagedStreamParams& ps, const TmaMap* cmap, unsigned char* ring,
                              PagedStage* meta, u64* full, u64* empty, bool sample) {
  constexpr int ST = C::kStages, NN = C::kNextN, SP = 2 * kPagedWgPages;  // pages a stage
  constexpr int stage_bytes = kPagedStageBytes;
  const KnnParams& p = ps.knn;
  const int* off = ps.page_offset + (sample ? 0 : ps.batch + 1);
  const int total = off[ps.batch];
  const int cta = int(blockIdx.x), ctas = ps.stream_ctas;
  const int begin = scaled_index(cta, total, ctas), end = scaled_index(cta + 1, total, ctas);
  tma_prefetch(cmap);
  unsigned pos = 0;
  // The request of the share's first page: the last r with off[r] <= begin.
  int r = 0;
  if (begin < end) {
    int hi = ps.batch - 1;
    while (r < hi) {
      const int mid = (r + hi + 1) / 2;
      if (off[mid] <= begin) r = mid; else hi = mid - 1;
    }
  }
  for (int gp = begin; gp < end;) {
    while (off[r + 1] <= gp) ++r;  // requests with no page of this pass are passed over
    const int req_end = min(end, off[r + 1]);
    if (!sample && p.round > 0) {  // a fallback round streams only what it reruns
      bool rerun = false;
      for (int j = 0; j < NN; ++j) rerun = rerun || p.rows[r * NN + j].retry != 0;
      if (!rerun) {
        gp = req_end;
        continue;
      }
    }
    const int pages = ps.req_pages[r], sampled = ps.req_sample_pages[r];
    const int first = gp - off[r];
    const int count = min(SP, req_end - gp);
    gp += count;
    const RingSlot slot = ring_slot(pos++, ST);
    paged_wait(empty + slot.stage, slot.parity ^ 1u);
    PagedStage& m = meta[slot.stage];
    m.request = r;
    m.first = first;
    m.count = count;
    long long block[SP];  // registers: the loops below are unrolled
#pragma unroll
    for (int h = 0; h < SP; ++h) block[h] = 0;
    unsigned bytes = 0;
#pragma unroll
    for (int h = 0; h < SP; ++h) {
      if (h >= count) break;
      const int page = sample ? paged_sample_page(first + h, sampled, pages) : first + h;
      block[h] = ps.block_table[(long long)r * ps.block_table_stride + page];
      m.page[h] = page;
      m.ok[h] = block[h] >= 0 && block[h] < ps.num_blocks;
      if (!m.ok[h]) ps.bad[r] = 1u;
      bytes += m.ok[h] ? unsigned(kPagedBoxBytes) : 0u;
    }
    if (bytes == 0) {
      mbarrier_arrive(full + slot.stage);
      continue;
    }
    mbarrier_arrive_expect_tx(full + slot.stage, bytes);
#pragma unroll
    for (int h = 0; h < SP; ++h) {
      if (h < count && m.ok[h])
        tma_load_2d(ring + slot.stage * stage_bytes + h * kPagedPageSlot, cmap,
                    full + slot.stage, 0, int(block[h] * kPagedBoxRows));
    }
  }
  const RingSlot slot = ring_slot(pos, ST);
  paged_wait(empty + slot.stage, slot.parity ^ 1u);
  meta[slot.stage].request = -1;
  mbarrier_arrive(full + slot.stage);
}

// C: the generated config (kStages, kNextN, kTopK, kRadix, kHeads = 64, kWgmma, kMma, the
// score's uses); S: the score functor (a head-sum program).
template <class C, class S>
__device__ void paged_stream(const PagedStreamParams& ps, const TmaMap* cmap, unsigned char* smem) {
  grid_dependency_trigger();  // the next launch may start (grid_dependency.cuh)
  constexpr int ST = C::kStages, NN = C::kNextN, H = kPagedHeads, WP = kPagedWgPages;
  static_assert(C::kHeads == H && S::kHeadSum && C::kWgmma && C::kMma == kElemE4M3,
                "the stream path: 64 heads of fp8, a head-sum score");
  static_assert(WP == 2, "two pages a warpgroup and stage");
  constexpr int stage_bytes = kPagedStageBytes;
  const KnnParams& p = ps.knn;
  const bool sample = p.sample_pass != 0;
  grid_dependency_wait();
  // A fallback round with no row to rerun ends at once (the same word for every thread).
  if (!sample && p.round > 0 && p.counters[kKnnRoundRows + p.round] == 0) return;
  constexpr PagedStreamSmem L{ST, NN};
  unsigned char* ring = smem + L.ring_off();
  unsigned char* qs = smem + L.q_off();
  float* ws = reinterpret_cast<float*>(smem + L.w_off());
  u64* thr = reinterpret_cast<u64*>(smem + L.thr_off());
  u32* fixed = reinterpret_cast<u32*>(smem + L.fixed_off());
  float* pf = reinterpret_cast<float*>(smem + L.pf_off());
  u32* active = reinterpret_cast<u32*>(smem + L.active_off());
  int* visible = reinterpret_cast<int*>(smem + L.visible_off());
  PagedStage* meta = reinterpret_cast<PagedStage*>(smem + L.meta_off());
  u64* full = reinterpret_cast<u64*>(smem + L.barriers_off());
  u64* empty = full + ST;
  const int tid = threadIdx.x;
  if (tid == 0) {
    for (int i = 0; i < ST; ++i) {
      mbarrier_init(full + i, 1);
      // One arrival per math thread: each thread's own reads of the stage (its metadata
      // included, which the producer rewrites) are released by its own arrive. One lane's
      // arrive after a __syncwarp is ordered too, but compute-sanitizer's racecheck does
      // not follow that chain and reported the producer's rewrite of meta[].request as a
      // hazard.
      mbarrier_init(empty + i, 256);
    }
    mbarrier_init_fence();
  }
  __syncthreads();
  const int warp_all = tid >> 5, lane = tid & 31;
  if (warp_all == 8) {
    if (lane == 0) paged_produce<C>(ps, cmap, ring, meta, full, empty, sample);
    return;
  }

  const int wg = tid >> 7, warp = warp_all & 3, g = lane >> 2, t4 = lane & 3;
  const bool radix = C::kRadix && !sample && p.round > 0;
  const int cap = p.capacity;
  int cur = -1;  // the request whose q rows are in shared memory
  // The request's q rows, weights and row states into shared memory, by the 256 math
  // threads, once every math warp is done with the previous request's (its MMAs waited).
  auto load_request = [&](int r) {
    named_barrier_sync<kPagedMathBarrier, 256>();
    for (int j = 0; j < NN; ++j)
      paged_load_query<C, S>(ps, r, j, qs + j * H * kPageDim, ws + j * H, tid, 256);
    if (tid < NN) {
      const int row = r * NN + tid;
      const bool filters = (ps.row_flags[row] & kPagedRowFilters) != 0;
      const KnnRowState rs = p.rows[row];
      const bool on = filters && (sample || p.round == 0 || rs.retry != 0);
      active[tid] = on ? 1u : 0u;
      thr[tid] = rs.threshold;
      fixed[tid] = rs.fixed;
      visible[tid] = ps.row_visible[row];
      // The prefilter (knn_stream.cuh's): a score below the threshold's order key as a
      // float cannot pass the exact test; 0 admits every score.
      const u32 t = u32(rs.threshold >> 32);
      pf[tid] = !on || sample ? __int_as_float(0xFF800000) : t == 0 ? __int_as_float(0xFF800000) : order_key_score(t);
    }
    fence_async_smem();  // the q stores, read by wgmma through the async proxy
    named_barrier_sync<kPagedMathBarrier, 256>();
  };

  // Each warp's survivors of a page wait one page for their list slots: the reservation's
  // atomic (one per warp, row and page) is issued on one page and its result read on the
  // next page of the same row slot, or after the stream, so that its round trip to L2
  // overlaps a page's work (read at once, it is the stream's largest stall in ncu).
  // Registers (the row slot loop is unrolled): the warp's mask, the leader's ticket,
  // the lane's RankKey, the row.
  u32 pend_mask[NN], pend_ticket[NN];
  u64 pend_rk[NN];
  int pend_row[NN];
#pragma unroll
  for (int j = 0; j < NN; ++j) pend_mask[j] = 0u, pend_ticket[j] = 0u, pend_rk[j] = 0ull, pend_row[j] = 0;
  // Writes row slot j's pending survivors at the slots their reservation returned (the
  // whole warp: the mask is the warp's ballot).
  auto settle = [&](int j) {
    const u32 b = pend_mask[j];
    if (b == 0u) return;
    const u32 base = __shfl_sync(0xFFFFFFFFu, pend_ticket[j], __ffs(b) - 1);
    if ((b >> lane) & 1u) {
      const u32 at = base + u32(__popc(b & ((1u << lane) - 1u)));
      if (at < u32(cap)) p.lists[(long long)pend_row[j] * cap + at] = pend_rk[j];
    }
    pend_mask[j] = 0u;
  };
  for (unsigned pos = 0;; ++pos) {
    const RingSlot slot = ring_slot(pos, ST);
    paged_wait(full + slot.stage, slot.parity);
    // The stage's description, read from shared memory field by field (a copy of the
    // struct indexed by the warpgroup went to local memory).
    const PagedStage& m = meta[slot.stage];
    const int request = m.request;
    if (request < 0) break;
    // This warpgroup's pages of the stage: wg WP .. wg WP + WP - 1 (the first `have`).
    const int have = min(WP, m.count - wg * WP);
    if (request != cur) {
      load_request(request);
      cur = request;
    }
    const int key0 = warp * 16 + g;  // the thread's keys of a page: key0 and key0 + 8
    // The lane's own key after the quad's reduction (below): page `lp` of this
    // warpgroup's, key0 + 8 (t4 & 1) of it.
    const int lp = t4 >> 1;
    const int mine = key0 + 8 * (t4 & 1);
    const int lpage = wg * WP + lp;  // the lane's page in the stage
    const bool lane_key = lp < have && m.ok[lpage] != 0;
    const int pos_key = m.page[lpage] * kPageKeys + mine, list_index = m.first + lpage;
    float score[NN];  // the lane's key's score for each row of the request
#pragma unroll
    for (int j = 0; j < NN; ++j) score[j] = 0.0f;
    if (have > 0) {
      const PagedPagePair pp = paged_page_pair<C>(
          ring + slot.stage * stage_bytes + wg * WP * kPagedPageSlot, m.ok[wg * WP] != 0,
          have > 1 && m.ok[wg * WP + 1] != 0, key0);
#pragma unroll
      for (int j = 0; j < NN; ++j) {
        if (!active[j]) continue;  // the same for the whole CTA
        score[j] = paged_pair_score<C, S>(pp, qs + j * H * kPageDim, ws + j * H, t4);
      }
    }
    // Every read of the stage (its pages by the MMAs, which have completed, the scales, its
    // description) is done: release it before the filter, so that the producer refills it
    // while this warp tests and appends (at two pages a warpgroup the ring has two stages).
    mbarrier_arrive(empty + slot.stage);
    if (have > 0) {
#pragma unroll
      for (int j = 0; j < NN; ++j) {
        if (!active[j]) continue;  // the same for the whole CTA
        const int row = cur * NN + j;
        const bool real = lane_key && pos_key < visible[j];
        if (sample) {
          if (lane_key)
            p.samples[(long long)row * p.sample_cap + list_index * kPageKeys + mine] =
                real ? order_key(score[j]) : 0u;
          continue;
        }
        bool pass_thr = false;
        u64 rk = 0;
        if (real && !(score[j] < pf[j])) {
          rk = rank_key(order_key(score[j]), pos_key);
          pass_thr = rk >= thr[j];
        }
        if (radix && pass_thr) {
          const int digit = knn_digit(rk, thr[j], fixed[j]);
          if (digit >= 0) atomicAdd(p.hist + (long long)row * kKnnDigits + digit, 1u);
        }
        // One reservation per warp and row for the warp's survivors, settled a page later.
        settle(j);
        const unsigned b = __ballot_sync(0xFFFFFFFFu, pass_thr);
        if (b != 0u) {
          if (lane == __ffs(b) - 1) pend_ticket[j] = atomicAdd(&p.rows[row].count, u32(__popc(b)));
          pend_mask[j] = b;
          pend_rk[j] = rk;
          pend_row[j] = row;
        }
      }
    }
  }
#pragma unroll
  for (int j = 0; j < NN; ++j) settle(j);
}
#endif

}  // namespace winnow

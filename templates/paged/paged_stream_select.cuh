// The stream path's per-row launches (templates/paged/paged_stream_params.cuh), one CTA of
// kKnnSelectThreads per query row:
//   paged_stream_threshold: the row's first threshold from its request's sample (the
//     retrieval mode's knn_sample_threshold; 0, every key, where the row's window fits the
//     list or the row is not filtered) and its whole state;
//   paged_stream_select: round 0 answers a bad request's rows (-1, counted as bad
//     windows) and the rows that are not filtered (their window fits in k: every position
//     in order, -1 padded); every filtered row goes through the retrieval mode's exact
//     select and radix fallback rounds (knn_select_row) with need = min(k, its window).
// A request that was not streamed has its block table entries checked here (at most
// k / 64 + 1 of them): a bad entry makes it bad as a streamed one's does.
#pragma once
#include "ptx/grid_dependency.cuh"
#include "knn/knn_select.cuh"
#include "paged/paged_stream_params.cuh"

namespace winnow {

#if defined(__CUDA_ARCH__) || defined(WINNOW_EMULATED)
template <class C>
__device__ void paged_stream_threshold(const PagedStreamParams& ps, unsigned char* smem) {
  grid_dependency_trigger();  // the next launch may start (grid_dependency.cuh)
  grid_dependency_wait();
  const KnnParams& p = ps.knn;
  const int row = blockIdx.x, r = row / ps.next_n;
  const int v = ps.row_visible[row], sampled = ps.req_sample_pages[r], pages = ps.req_pages[r];
  u64 thr = 0;
  if ((ps.row_flags[row] & kPagedRowFilters) != 0 && sampled > 0 && v > p.capacity) {
    // The sampled keys the row sees: a page a thread, summed in the radix bins (free until
    // knn_sample_threshold's passes clear them).
    static_assert(kPagedMaxSamplePages <= kKnnSelectThreads, "a sampled page a thread");
    u32* sum = KnnSelectSmem(smem).radix;
    if (threadIdx.x == 0) *sum = 0u;
    __syncthreads();
    if (int(threadIdx.x) < sampled)
      atomicAdd(sum, u32(paged_sample_page_valid(int(threadIdx.x), sampled, pages, v)));
    __syncthreads();
    const int valid = int(*sum);
    __syncthreads();  // every thread has read the sum before the passes clear the bins
    if (valid > 0)
      thr = knn_sample_threshold<C>(p, smem, p.samples + (long long)row * p.sample_cap,
                                    sampled * kPageKeys,
                                    u32(paged_sample_rank(ps.k, p.capacity, valid, v)));
  }
  if (threadIdx.x == 0) {
    KnnRowState rs{};
    rs.threshold = thr;
    p.rows[row] = rs;
  }
}

template <class C>
__device__ void paged_stream_select(const PagedStreamParams& ps, unsigned char* smem) {
  grid_dependency_trigger();  // the next launch may start (grid_dependency.cuh)
  grid_dependency_wait();
  const KnnParams& p = ps.knn;
  const int row = blockIdx.x, r = row / ps.next_n;
  const int flags = ps.row_flags[row], v = ps.row_visible[row];
  int* out = p.out_indices + (long long)row * p.out_indices_stride;
  if (p.round == 0) {
    // The verdict goes through the select's scratch word `taken` (written again only after
    // knn_select_row's first barrier): a static __shared__ word would sit beside the
    // 1024-aligned dynamic shared memory, which already takes all the opt-in size.
    u32* bad = KnnSelectSmem(smem).taken;
    if (threadIdx.x == 0) {
      bool b = (flags & kPagedRowBad) != 0 || ps.bad[r] != 0u;
      if (!b && ps.req_pages[r] == 0) {  // not streamed: its entries are checked here
        const int* lens = ps.context_lens + (long long)r * ps.lens_stride;
        const int n = paged_request_keys(lens, ps.next_n, ps.lens_per_query != 0);
        for (int i = 0; i * kPageKeys < n && !b; ++i) {
          const long long blk = ps.block_table[(long long)r * ps.block_table_stride + i];
          b = blk < 0 || blk >= ps.num_blocks;
        }
      }
      *bad = b ? 1u : 0u;
      if (b) atomicAdd(p.counters + 1, 1u);  // the bad windows' counter (TopkOp's layout)
    }
    __syncthreads();
    const bool is_bad = *bad != 0u;
    if (is_bad || (flags & kPagedRowFilters) == 0) {
      // Every position of the window in order (none for a bad request), -1 after it.
      for (int i = threadIdx.x; i < C::kTopK; i += kKnnSelectThreads)
        out[i] = !is_bad && i < v ? i : -1;
      if (threadIdx.x == 0) p.rows[row].retry = 0;
      return;
    }
  }
  knn_select_row<C>(p, smem, row, min(u32(C::kTopK), u32(v)));
}
#endif

}  // namespace winnow

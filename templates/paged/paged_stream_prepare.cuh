// The stream path's first launch (templates/paged/paged_stream_params.cuh): one CTA reads every
// request's lengths on the device and writes the call's plan: each row's visible keys and
// whether it is filtered (rows whose window fits in k, unsorted, are answered by position
// alone), each request's pages to stream and its sample's pages, and the pages of the
// sample pass and of the filter as prefix sums (the stream's CTAs split them evenly); it
// clears the call's counters and bad-block flags and sets every row's state to threshold
// 0 (every key; the threshold launch raises the sampled rows', where the call has one). A
// request whose length is negative or above max_keys is bad (its rows are -1, counted as
// bad windows by the select).
#pragma once
#include "ptx/grid_dependency.cuh"
#include "knn/knn_params.cuh"
#include "paged/paged_cache.cuh"
#include "paged/paged_stream_params.cuh"

namespace winnow {

#if defined(__CUDA_ARCH__) || defined(WINNOW_EMULATED)
// Launched with kPagedPrepareThreads threads, one CTA, first of the call's launches.
template <int THREADS>
__device__ void paged_stream_prepare(const PagedStreamParams& p) {
  grid_dependency_trigger();  // the next launch may start (grid_dependency.cuh)
  __shared__ int scan[2][THREADS];
  __shared__ int carry[2];
  const int tid = threadIdx.x;
  if (tid == 0) {
    carry[0] = carry[1] = 0;
    p.page_offset[0] = 0;
    p.page_offset[p.batch + 1] = 0;
  }
  for (int i = tid; i < 64; i += THREADS) p.knn.counters[i] = 0u;
  for (int i = tid; i < p.batch * p.next_n; i += THREADS) p.knn.rows[i] = KnnRowState{};
  __syncthreads();
  for (int r0 = 0; r0 < p.batch; r0 += THREADS) {
    const int r = r0 + tid;
    int share[2] = {0, 0};  // the request's pages in the sample pass and in the filter
    if (r < p.batch) {
      const int* lens = p.context_lens + (long long)r * p.lens_stride;
      const bool per_query = p.lens_per_query != 0;
      const int n = paged_request_keys(lens, p.next_n, per_query);
      const bool bad = paged_request_bad(lens, p.next_n, per_query, p.max_keys);
      bool streams = false;
      int widest = 0;  // the widest filtered window
      for (int j = 0; j < p.next_n; ++j) {
        const int v = bad ? 0 : paged_visible_keys(lens, p.next_n, j, per_query);
        const bool filters = !bad && v > 0 && (p.sorted != 0 || v > p.k);
        p.row_visible[r * p.next_n + j] = v;
        p.row_flags[r * p.next_n + j] = (filters ? kPagedRowFilters : 0) | (bad ? kPagedRowBad : 0);
        streams = streams || filters;
        if (filters && v > widest) widest = v;
      }
      const int pages = streams ? (n + kPageKeys - 1) / kPageKeys : 0;
      const int sampled = streams && widest > p.knn.capacity
                              ? paged_sample_pages(n, pages, p.k, p.knn.capacity)
                              : 0;
      p.req_pages[r] = pages;
      p.req_sample_pages[r] = sampled;
      p.bad[r] = 0u;
      share[0] = sampled;
      share[1] = pages;
    }
    scan[0][tid] = share[0];
    scan[1][tid] = share[1];
    __syncthreads();
    // Inclusive scans (Hillis-Steele): THREADS is at most 1024, so ten steps.
    for (int d = 1; d < THREADS; d *= 2) {
      const int a = tid >= d ? scan[0][tid - d] : 0, b = tid >= d ? scan[1][tid - d] : 0;
      __syncthreads();
      scan[0][tid] += a;
      scan[1][tid] += b;
      __syncthreads();
    }
    if (r < p.batch) {
      p.page_offset[r + 1] = carry[0] + scan[0][tid];
      p.page_offset[p.batch + 1 + r + 1] = carry[1] + scan[1][tid];
    }
    __syncthreads();
    if (tid == THREADS - 1) {
      carry[0] += scan[0][tid];
      carry[1] += scan[1][tid];
    }
    __syncthreads();
  }
}
#endif

}  // namespace winnow

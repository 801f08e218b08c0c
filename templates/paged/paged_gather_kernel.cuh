// The paged decode op's two small kernels (ops/paged/paged_topk.h): they turn the engines' paged
// key cache into the ragged contiguous form the fused top-k kernel reads with per-row
// windows, as vLLM's cp_gather_indexer_k_quant_cache does for prefill, but with every
// length read on the device and a grid that does not depend on the lengths.
//   paged_windows: one CTA. Scans the requests' key counts into packed key offsets and
//     page offsets and writes each query row's window [offset, offset + visible).
//   paged_gather: a fixed grid striding over the touched pages (the page offsets say how
//     many): copies each page's live keys and scales to its packed place.
// A request whose length is negative or above max_keys, whose packed keys would pass the
// gathered capacity, or whose block table names a block outside [0, num_blocks) gets bad
// windows (start 1 > end 0): the top-k kernel writes -1 rows and counts them.
#pragma once
#include "paged/paged_cache.cuh"
#include "paged/paged_params.cuh"

namespace winnow {

__device__ __forceinline__ void paged_mark_bad(const PagedParams& p, int r) {
  for (int j = 0; j < p.next_n; ++j) {
    p.window_start[r * p.next_n + j] = 1;
    p.window_end[r * p.next_n + j] = 0;
  }
}

// Launched with kPagedScanThreads threads, one CTA.
template <int THREADS>
__device__ void paged_windows(const PagedParams& p) {
  __shared__ long long keys[THREADS], pages[THREADS];
  __shared__ long long carry_keys, carry_pages;
  const int tid = threadIdx.x;
  if (tid == 0) {
    carry_keys = 0;
    carry_pages = 0;
    p.page_offset[0] = 0;
  }
  __syncthreads();
  for (int r0 = 0; r0 < p.batch; r0 += THREADS) {
    const int r = r0 + tid;
    int n = 0;
    bool bad = false;
    if (r < p.batch) {
      const int* lens = p.context_lens + (long long)r * p.lens_stride;
      n = paged_request_keys(lens, p.next_n, p.lens_per_query != 0);
      bad = n < 0 || n > p.max_keys;
      if (p.lens_per_query) {
        for (int j = 0; j < p.next_n; ++j) bad = bad || lens[j] < 0;
      }
      if (bad) n = 0;
    }
    keys[tid] = n;
    pages[tid] = (n + kPageKeys - 1) / kPageKeys;
    __syncthreads();
    // Inclusive scans (Hillis-Steele): THREADS is at most 1024, so ten steps.
    for (int d = 1; d < THREADS; d *= 2) {
      const long long a = tid >= d ? keys[tid - d] : 0, b = tid >= d ? pages[tid - d] : 0;
      __syncthreads();
      keys[tid] += a;
      pages[tid] += b;
      __syncthreads();
    }
    if (r < p.batch) {
      const long long start = carry_keys + keys[tid] - n;
      p.key_offset[r] = start;
      p.page_offset[r + 1] = carry_pages + pages[tid];
      const int* lens = p.context_lens + (long long)r * p.lens_stride;
      if (bad || start + n > p.capacity) {
        paged_mark_bad(p, r);
      } else {
        for (int j = 0; j < p.next_n; ++j) {
          const int v = paged_visible_keys(lens, p.next_n, j, p.lens_per_query != 0);
          p.window_start[r * p.next_n + j] = int(start);
          p.window_end[r * p.next_n + j] = int(start + v);
        }
      }
    }
    __syncthreads();
    if (tid == THREADS - 1) {
      carry_keys += keys[tid];
      carry_pages += pages[tid];
    }
    __syncthreads();
  }
}

// Launched with kPagedGatherThreads threads and any fixed grid.
template <int THREADS>
__device__ void paged_gather(const PagedParams& p) {
  const long long total = p.page_offset[p.batch];
  for (long long g = blockIdx.x; g < total; g += gridDim.x) {
    // The request of page g: the last r with page_offset[r] <= g.
    int lo = 0, hi = p.batch - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (p.page_offset[mid] <= g) lo = mid; else hi = mid - 1;
    }
    const int r = lo;
    const int page = int(g - p.page_offset[r]);
    const long long start = p.key_offset[r];
    const int* lens = p.context_lens + (long long)r * p.lens_stride;
    const int n_keys = paged_request_keys(lens, p.next_n, p.lens_per_query != 0);
    if (start + n_keys > p.capacity) continue;  // past the buffers: marked bad
    const int live = min(kPageKeys, n_keys - page * kPageKeys);
    const long long block = p.block_table[(long long)r * p.block_table_stride + page];
    if (block < 0 || block >= p.num_blocks) {
      if (threadIdx.x == 0) paged_mark_bad(p, r);
      continue;
    }
    const unsigned char* src = p.cache + block * kPageBytes;
    const long long first = start + (long long)page * kPageKeys;
    // Keys: live rows of 128 bytes as 16-byte vectors; the next request's keys follow
    // at once, so rows past `live` are not written.
    const uint4* ks = reinterpret_cast<const uint4*>(src);
    uint4* kd = reinterpret_cast<uint4*>(p.keys + first * kPageDim);
    for (int i = threadIdx.x; i < live * (kPageDim / 16); i += THREADS) kd[i] = ks[i];
    const float* ss = reinterpret_cast<const float*>(src + kPageKeyBytes);
    for (int i = threadIdx.x; i < live; i += THREADS) p.scales[first + i] = ss[i];
  }
}

}  // namespace winnow

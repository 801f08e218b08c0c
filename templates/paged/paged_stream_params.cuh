// The paged decode op's stream path (WINNOW_PAGED_STREAM=1): its run-time
// arguments, its sizes and the rules that both the host and the kernels follow (which
// pages a request's sample takes, the sample's rank), one definition for both.
//
// The path is the retrieval mode's (templates/knn/knn_stream.cuh, knn_select.cuh) per query
// row instead of per batch of 64 queries: a sample of each long request's pages sets each
// row's first threshold, one fixed-grid stream whose CTA c takes the c-th equal share of
// all the pass's pages in request order (every row of the request scored on each page;
// a share spans one or two requests, so the q rows are loaded once or twice) appends the keys at
// or above the row's threshold to the row's CandidateList, and the retrieval mode's exact
// select and radix fallback rounds (knn_select_row) answer each row. Rows whose window fits
// in k (unsorted) are every key of the window in position order: never scored.
#pragma once
#include "knn/knn_params.cuh"
#include "knn/knn_workspace.cuh"
#include "paged/paged_cache.cuh"
#include "common/portable.cuh"
#include "common/scaled_index.cuh"

namespace winnow {

// A ring stage holds 2 kPagedWgPages pages, two for each math warpgroup (wgmma M = 64
// keys = a page; each lane of a warp ends the page pair with one key of its own: one
// epilogue for both pages); a page's box is its 64 key rows and the 2 rows of its
// scales (the cache viewed as [num_blocks * 66, 128] bytes), at a 1024-byte aligned place
// (the 128-byte swizzle).
inline constexpr int kPagedBoxRows = kPageBytes / 128;  // 66
inline constexpr int kPagedBoxBytes = kPageBytes;       // 8448
inline constexpr int kPagedPageSlot = 9 * 1024;         // a page's place in a stage
inline constexpr int kPagedWgPages = 2;
inline constexpr int kPagedStageBytes = 2 * kPagedWgPages * kPagedPageSlot;
inline constexpr int kPagedStreamThreads = 256 + 32;  // two math warpgroups + the producer
inline constexpr int kPagedHeads = 64;                // wgmma N: the engines' head count
// The sample of one request: at most this many pages (8192 keys).
inline constexpr int kPagedMaxSamplePages = 128;
inline constexpr int kPagedMinSamplePages = 8;
static_assert(kPagedMaxSamplePages * kPageKeys <= 8192, "paged_sample_rank's 32-bit product");
// The prepare kernel: one CTA.
inline constexpr int kPagedPrepareThreads = 1024;

// Per row flags (row_flags).
enum : int { kPagedRowFilters = 1, kPagedRowBad = 2 };

struct PagedStreamParams {
  KnnParams knn;  // counters, row states, lists, histograms, samples, outputs, round
  const unsigned char* q;        // fp8 [B, next_n, 64, 128]
  long long q_request_stride;    // bytes
  long long q_query_stride;      // bytes
  const float* w;                // [B * next_n, 64] (row stride w_row_stride) or null
  long long w_row_stride;
  const int* block_table;
  long long block_table_stride;  // elements
  const int* context_lens;       // [B] or [B, next_n]
  long long lens_stride;         // elements
  long long num_blocks;
  int batch, next_n, max_keys, lens_per_query;
  int k, sorted;
  // The workspace's per-call state (written by paged_stream_prepare).
  int* row_visible;         // [B * next_n]: keys the row sees (0 for a bad request)
  int* row_flags;           // [B * next_n]: kPagedRow*
  int* req_pages;           // [B]: pages the filter streams (0: no row filters)
  int* req_sample_pages;    // [B]: pages of the sample (0: none)
  int* page_offset;         // [2][B + 1]: prefix sums of the sample's, then the filter's pages
  int stream_ctas;          // the stream's grid: CTA c streams the c-th share of the pages
  unsigned* bad;            // [B]: a block table entry outside the cache was met
  // The hint (paged_stream_hint.cuh): int32 [B * next_n][k] token positions, -1 padded
  // (row stride hint_stride elements), or null.
  const int* hint;
  long long hint_stride;
  const unsigned char* cache;  // the hint's keys are read from it (the stream reads by TMA)
};

// Whether a request is bad by its lengths (its rows are -1): its key count is negative or
// above max_keys, or a per-query length is negative.
WINNOW_HD bool paged_request_bad(const int* lens, int next_n, bool per_query, int max_keys) {
  const int n = paged_request_keys(lens, next_n, per_query);
  bool bad = n < 0 || n > max_keys;
  for (int j = 0; per_query && j < next_n; ++j) bad = bad || lens[j] < 0;
  return bad;
}

// The pages of a request's sample: none when no row needs one (its window fits the list),
// else 16 n / max(k, 1024) keys as the retrieval mode's rule (knn_sample), in whole pages,
// at least kPagedMinSamplePages and at most kPagedMaxSamplePages (and the request's).
WINNOW_HD int paged_sample_pages(int n, int pages, int k, int capacity) {
  if (n <= capacity) return 0;
  const long long kk = k > 1024 ? k : 1024;
  long long s = (16 * (long long)n / kk + kPageKeys - 1) / kPageKeys;
  if (s < kPagedMinSamplePages) s = kPagedMinSamplePages;
  if (s > kPagedMaxSamplePages) s = kPagedMaxSamplePages;
  if (s > pages) s = pages;
  return int(s);
}
// The i-th sampled page (of s, spread evenly over the request's `pages`).
WINNOW_HD int paged_sample_page(int i, int s, int pages) { return scaled_index(i, pages, s); }
// The keys of the i-th sampled page (of s over the request's `pages`) that a row seeing v
// keys sees (0..kPageKeys); the threshold kernel sums them over the sample, a page a thread.
WINNOW_HD int paged_sample_page_valid(int i, int s, int pages, int v) {
  const int left = v - paged_sample_page(i, s, pages) * kPageKeys;
  return left <= 0 ? 0 : left < kPageKeys ? left : kPageKeys;
}
// floor(sqrt(x)), a bit at a time: no division and no floating point (every thread of the
// threshold kernel computes the rank; Newton steps of fp64 division each were a visible
// share of that short kernel's time).
WINNOW_HD u32 floor_sqrt(u32 x) {
  u32 r = 0;
  for (u32 b = 1u << 15; b != 0u; b >>= 1) {
    const u32 t = r | b;
    if (t * t <= x) r = t;
  }
  return r;
}
// The rank of the row's first threshold among its `valid` sampled scores: N rank / valid
// at sqrt(k capacity) expected survivors, as knn_sample aims (1..valid; v > 0 keys seen).
// In 32 bits: k capacity <= 8192 * 32768 = 2^28, sqrt(k capacity) valid <= 2^14 * 8192.
WINNOW_HD int paged_sample_rank(int k, int capacity, int valid, int v) {
  const u32 mid = floor_sqrt(u32(k) * u32(capacity));
  const u32 rank = (mid * u32(valid) + u32(v) / 2u) / u32(v);
  return rank < 1u ? 1 : rank > u32(valid) ? valid : int(rank);
}

// The hint kernel (paged_stream_hint.cuh): a CTA per query row, one page pair a math
// warpgroup. Its shared memory: the row's q rows (the wgmma B operand), the page pairs (the
// hint's keys gathered into the box layout; before them, the sort of its positions), the
// row's weights, each warp's least RankKey and two flags.
inline constexpr int kPagedHintThreads = kKnnSelectThreads;
struct PagedHintSmem {
  static constexpr int kPairs = kPagedHintThreads / 128;  // math warpgroups
  WINNOW_HD static constexpr long q_off() { return 0; }
  WINNOW_HD static constexpr long pages_off() { return long(kPagedHeads) * kPageDim; }
  WINNOW_HD static constexpr long w_off() {
    return pages_off() + long(kPairs) * kPagedWgPages * kPagedPageSlot;
  }
  WINNOW_HD static constexpr long least_off() { return w_off() + kPagedHeads * 4L; }
  WINNOW_HD static constexpr long flags_off() { return least_off() + kPagedHintThreads / 32 * 8L; }
  WINNOW_HD static constexpr long bytes() { return flags_off() + 16; }
};
static_assert(PagedHintSmem::pages_off() % 1024 == 0, "page slots on the swizzle period");
static_assert(8L * 8192 <= PagedHintSmem::w_off() - PagedHintSmem::pages_off(),
              "the sort of k <= 8192 positions fits the page slots");

// What the producer tells the math warps about a ring stage.
struct PagedStage {
  int request;  // -1: the stream is over
  int first;    // index of the stage's first page in the request's page list
  int count;    // pages in the stage (1 to 2 kPagedWgPages; page h belongs to math
                // warpgroup h / kPagedWgPages)
  int page[2 * kPagedWgPages];  // position page numbers
  int ok[2 * kPagedWgPages];    // the block was inside the cache (else nothing was loaded)
};

// The stream kernel's shared memory: the ring, the current request's q rows (the wgmma B
// operand, swizzled), its weights and row states, the stages' descriptions, the barriers.
struct PagedStreamSmem {
  int stages, next_n;
  WINNOW_HD constexpr long ring_off() const { return 0; }
  WINNOW_HD constexpr long q_off() const { return long(stages) * kPagedStageBytes; }
  WINNOW_HD constexpr long w_off() const { return q_off() + long(next_n) * kPagedHeads * kPageDim; }
  WINNOW_HD constexpr long thr_off() const { return w_off() + long(next_n) * kPagedHeads * 4; }
  WINNOW_HD constexpr long fixed_off() const { return thr_off() + 8L * next_n; }
  WINNOW_HD constexpr long pf_off() const { return fixed_off() + 4L * next_n; }
  WINNOW_HD constexpr long active_off() const { return pf_off() + 4L * next_n; }
  WINNOW_HD constexpr long visible_off() const { return active_off() + 4L * next_n; }
  WINNOW_HD constexpr long meta_off() const { return (visible_off() + 4L * next_n + 15) / 16 * 16; }
  WINNOW_HD constexpr long barriers_off() const {
    return (meta_off() + long(stages) * long(sizeof(PagedStage)) + 7) / 8 * 8;
  }
  WINNOW_HD constexpr long bytes() const { return barriers_off() + 16L * stages; }
};

}  // namespace winnow

// The stream path's threshold from a hint (templates/paged/paged_stream_params.cuh): the
// launch that replaces the sample pass and the threshold launch when the call gives the
// previous step's selection, int32 [B * next_n][k] token positions (-1 padded), one CTA of
// kPagedHintThreads per query row.
//
// When the row's hint holds k distinct positions inside the row's window (and the request
// is not bad), its keys are gathered from the cache into page slots in the TMA box layout
// and scored with the row's new query as the page stream scores them (paged_page_score.cuh:
// the same score bit for bit), and the row's threshold is the least of their RankKeys: k
// distinct keys of the window are at or above it, so it is at or below the k-th best, and
// the filter keeps at least k keys (a sound bound whatever the hint: stale positions only
// make it lower). Any other hint (a -1, a position outside the window, a duplicate, a
// block outside the cache) gives no bound: threshold 0, every key, as a row whose window fits the
// list; a window above the list then overflows and the select's fallback rounds answer
// it, exact as ever (counted as fallback rows).
//
// Everything but the row state's write runs before grid_dependency_wait, beside the
// prepare kernel (which clears the row states this one then sets).
#pragma once
#include "ptx/grid_dependency.cuh"
#include "knn/knn_select.cuh"
#include "paged/paged_page_score.cuh"
#include "paged/paged_stream_params.cuh"
#include "select/bitonic_sort.cuh"
#include "select/rank_order.cuh"

namespace winnow {

#if defined(__CUDA_ARCH__) || defined(WINNOW_EMULATED)
template <class C, class S>
__device__ void paged_stream_hint(const PagedStreamParams& ps, unsigned char* smem) {
  grid_dependency_trigger();  // the next launch may start (grid_dependency.cuh)
  constexpr int K = C::kTopK, NN = C::kNextN, T = kPagedHintThreads, WP = kPagedWgPages;
  constexpr int kPages = (K + kPageKeys - 1) / kPageKeys;  // the hint's keys, 64 a page slot
  constexpr int kSlots = PagedHintSmem::kPairs * WP;       // page slots a batch
  using L = PagedHintSmem;
  unsigned char* qs = smem + L::q_off();
  unsigned char* pages = smem + L::pages_off();
  float* ws = reinterpret_cast<float*>(smem + L::w_off());
  u64* least = reinterpret_cast<u64*>(smem + L::least_off());
  u32* flags = reinterpret_cast<u32*>(smem + L::flags_off());  // [0] no bound, [1] unordered
  const int row = blockIdx.x, r = row / NN, j = row % NN, tid = threadIdx.x;
  const int* lens = ps.context_lens + (long long)r * ps.lens_stride;
  const bool per_query = ps.lens_per_query != 0;
  const int* hint = ps.hint + (long long)row * ps.hint_stride;
  const int* table = ps.block_table + (long long)r * ps.block_table_stride;
  const int v = paged_visible_keys(lens, NN, j, per_query);
  if (tid == 0) {
    flags[0] = paged_request_bad(lens, NN, per_query, ps.max_keys) ? 1u : 0u;
    flags[1] = 0u;
  }
  __syncthreads();
  // Every position inside the window; ascending positions (an unsorted output's) are
  // distinct, others are sorted to find duplicates.
  for (int i = tid; i < K; i += T) {
    const int t = hint[i];
    if (t < 0 || t >= v) flags[0] = 1u;
    if (i > 0 && hint[i - 1] >= t) flags[1] = 1u;
  }
  __syncthreads();
  if (flags[0] == 0u && flags[1] != 0u) {
    constexpr int KP = next_pow2(K);
    u64* sorted = reinterpret_cast<u64*>(pages);  // position + 1, 0 past k
    for (int i = tid; i < KP; i += T) sorted[i] = i < K ? u64(hint[i]) + 1ull : 0ull;
    __syncthreads();
    sort_desc<KnnSelectCta>(sorted, KP, false);
    __syncthreads();
    for (int i = tid; i + 1 < K; i += T)
      if (sorted[i] == sorted[i + 1]) flags[0] = 1u;
    __syncthreads();
  }
  u64 mine = ~0ull;  // the least RankKey of the thread's keys
  if (flags[0] == 0u) {
    paged_load_query<C, S>(ps, r, j, qs, ws, tid, T);
    const int wg = tid >> 7, lane = tid & 31, t4 = lane & 3;
    const int key0 = ((tid >> 5) & 3) * 16 + (lane >> 2);
    for (int first = 0; first < kPages; first += kSlots) {
      __syncthreads();  // the previous batch's slots are read
      // Slot s holds the hint's keys 64 (first + s) ..: each key's 8 chunks at its row of
      // the swizzled box, its scale at rows 64, 65 (paged_page_pair's place).
      for (int i = tid; i < kSlots * kPageKeys * 9; i += T) {
        const int s = i / (kPageKeys * 9), key = (i / 9) % kPageKeys, c = i % 9;
        const int at = (first + s) * kPageKeys + key;
        if (at >= K) continue;
        const int t = hint[at];
        const long long blk = table[t / kPageKeys];
        if (blk < 0 || blk >= ps.num_blocks) {
          flags[0] = 1u;  // the stream flags the request bad
          continue;
        }
        const unsigned char* src = ps.cache + blk * kPageBytes;
        unsigned char* slot = pages + s * kPagedPageSlot;
        if (c < 8) {
          *reinterpret_cast<uint4*>(slot + key * 128 + ((c ^ (key & 7)) << 4)) =
              *reinterpret_cast<const uint4*>(src + (t % kPageKeys) * kPageDim + c * 16);
        } else {
          const int srow = kPageKeys + (key >> 5), byte = (4 * key) & 127;
          *reinterpret_cast<float*>(slot + srow * 128 + (((byte >> 4) ^ (srow & 7)) << 4) + (byte & 15)) =
              *reinterpret_cast<const float*>(src + kPageKeyBytes + 4 * (t % kPageKeys));
        }
      }
      fence_async_smem();  // the slots and q, read by wgmma through the async proxy
      __syncthreads();
      const int p0 = first + wg * WP;  // the warpgroup's pair: hint pages p0, p0 + 1
      const PagedPagePair pp =
          paged_page_pair<C>(pages + wg * WP * kPagedPageSlot, p0 < kPages, p0 + 1 < kPages, key0);
      const float score = paged_pair_score<C, S>(pp, qs, ws, t4);
      const int at = (p0 + (t4 >> 1)) * kPageKeys + key0 + 8 * (t4 & 1);
      if (at < K) {
        const u64 rk = rank_key(order_key(score), hint[at]);
        mine = rk < mine ? rk : mine;
      }
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    const u64 other = __shfl_xor_sync(0xFFFFFFFFu, mine, o);
    mine = other < mine ? other : mine;
  }
  if ((tid & 31) == 0) least[tid >> 5] = mine;
  __syncthreads();
  grid_dependency_wait();  // the prepare kernel has cleared the row states
  if (tid == 0) {
    u64 thr = ~0ull;
    for (int w = 0; w < T / 32; ++w) thr = least[w] < thr ? least[w] : thr;
    KnnRowState rs{};
    rs.threshold = flags[0] == 0u ? thr : 0ull;
    ps.knn.rows[row] = rs;
  }
}
#endif

}  // namespace winnow

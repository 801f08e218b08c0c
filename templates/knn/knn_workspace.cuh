// The retrieval mode's sizes, for the host (plan, workspace) and the kernels alike: the
// tile shape, the workspace regions, the stream kernel's shared memory and the sample.
#pragma once
#include "knn/knn_params.cuh"
#include "common/portable.cuh"
#include "common/smem_layout.cuh"
#include "topk/topk_workspace.cuh"

namespace winnow {

inline constexpr int kKnnKeyTile = 128;     // keys per tile: two warpgroups of 64 (wgmma M)
inline constexpr int kKnnChunkBytes = 128;  // bytes of d per ring stage (one swizzle atom)
inline constexpr int kKnnQueries = 64;      // queries per pass: the wgmma N side
inline constexpr int kKnnStageBytes = kKnnKeyTile * kKnnChunkBytes;
inline constexpr int kKnnStreamThreads = 256 + 32;  // two math warpgroups + the producer warp
// The per-query kernels (the first threshold, the select, the shard merge): one CTA of 1024
// threads per query (256 left them latency-bound: the threshold's radix passes over up to
// 65408 sample scores, the select's sort of 8192 entries).
inline constexpr int kKnnSelectThreads = 1024;
inline constexpr int kKnnMaxStages = 8;
// The filter's survivors are staged in shared memory per (math warp, query), this many
// slots each, and go to the query's CandidateList at the end of every tile with one global
// reservation per (warp, query) that has any (an append waiting on a global atomic per
// survivor made large k far slower than small k). A slot's overflow
// goes straight to the list.
inline constexpr int kKnnStageSlots = 4;
inline constexpr int kKnnMathWarps = 8;
// The sample region: at most 16 MB less the counters, the row states and the fallback's
// histograms.
inline constexpr int kKnnMaxSampleCap = 63360;  // multiple of kKnnKeyTile

// The exact fallback's radix refinement (every top-k plan, knn_select.cuh): each round
// fixes the next kKnnDigitBits bits of the need-th best RankKey from a histogram of the
// survivors that share the bits fixed so far, so a row is answered after at most
// ceil(64 / kKnnDigitBits) + 1 fallback rounds whatever the order and the ties of its keys.
inline constexpr int kKnnDigitBits = 11;
inline constexpr int kKnnDigits = 1 << kKnnDigitBits;
inline constexpr int kKnnRadixRounds = (64 + kKnnDigitBits - 1) / kKnnDigitBits + 1;

// CandidateList entries per query: 4 max(k, 1024) (the retrieval mode's workspace bound).
WINNOW_HD int knn_capacity(int k) { return 4 * (k > 1024 ? k : 1024); }

struct KnnWorkspace {
  int capacity, sample_cap;
  WINNOW_HD static constexpr long long counters_bytes() { return 256; }
  WINNOW_HD constexpr long long rows_offset() const { return counters_bytes(); }
  // [kKnnQueries][kKnnDigits] u32: each query's histogram of its fallback round.
  WINNOW_HD constexpr long long hist_offset() const {
    return rows_offset() + kKnnQueries * (long long)sizeof(KnnRowState);
  }
  WINNOW_HD constexpr long long lists_offset() const {
    return hist_offset() + (long long)kKnnQueries * kKnnDigits * 4;
  }
  WINNOW_HD constexpr long long samples_offset() const {
    return lists_offset() + (long long)kKnnQueries * capacity * 8;
  }
  WINNOW_HD constexpr long long bytes() const {
    return samples_offset() + (long long)kKnnQueries * sample_cap * 4;
  }
};

// The stream kernel's shared memory: the pass's queries (the wgmma B operand, swizzled),
// the key-chunk ring, per-query thresholds, skip flags, |q|^2, w and prefilter scores, the
// ring barriers.
struct KnnStreamSmem {
  int dim_bytes, stages;
  WINNOW_HD constexpr long queries_bytes() const { return long(kKnnQueries) * dim_bytes; }
  WINNOW_HD constexpr long ring_off() const { return queries_bytes(); }
  WINNOW_HD constexpr long thresholds_off() const { return ring_off() + long(stages) * kKnnStageBytes; }
  WINNOW_HD constexpr long skip_off() const { return thresholds_off() + kKnnQueries * 8; }
  WINNOW_HD constexpr long qsq_off() const { return skip_off() + kKnnQueries * 4; }
  WINNOW_HD constexpr long w_off() const { return qsq_off() + kKnnQueries * 4; }
  // Per-query threshold scores of the filter's prefilter (templates/knn/knn_stream.cuh).
  WINNOW_HD constexpr long prefilter_off() const { return w_off() + kKnnQueries * 4; }
  // Per-query known top bits of the threshold (KnnRowState::fixed; radix fallback rounds).
  WINNOW_HD constexpr long fixed_off() const { return prefilter_off() + kKnnQueries * 4; }
  // The survivors' staging: [kKnnMathWarps][kKnnQueries] counts, then as many groups of
  // kKnnStageSlots RankKeys.
  WINNOW_HD constexpr long stage_count_off() const { return fixed_off() + kKnnQueries * 4; }
  WINNOW_HD constexpr long stage_keys_off() const {
    return stage_count_off() + long(kKnnMathWarps) * kKnnQueries * 4;
  }
  WINNOW_HD constexpr long barriers_off() const {
    return stage_keys_off() + long(kKnnMathWarps) * kKnnQueries * kKnnStageSlots * 8;
  }
  WINNOW_HD constexpr long bytes() const { return barriers_off() + 2L * stages * 8; }
};

// The select kernels' shared memory: the radix bins and scratch, then the sort list.
WINNOW_HD constexpr long knn_select_smem_bytes(int k) {
  return long(kScratchWords) * 4 + 64 + long(next_pow2(k)) * 8;
}
// The retrieval mode's threshold and select kernels also stage what their radix passes
// read (the sample's order keys, the query's list) in shared memory after the sort list,
// up to this many bytes in all: each pass over global memory waited on L2 once per entry
// (the loop's warp-aggregated histogram keeps the loads from overlapping). All of sm_90's
// opt-in shared memory: at
// k = 8192 the list (~2k entries a query) then fits beside the 64 KB sort list.
inline constexpr long kKnnSelectSmemTarget = 227 * 1024;
WINNOW_HD constexpr long knn_select_stage_bytes(int k, long smem_limit) {
  const long limit = smem_limit < kKnnSelectSmemTarget ? smem_limit : kKnnSelectSmemTarget;
  const long rest = limit - knn_select_smem_bytes(k);
  return rest > 0 ? rest / 16 * 16 : 0;
}

// The sample pass: `tiles` key tiles, tile j * stride for j < tiles (a strided subset of
// the corpus), `valid` real keys among them; the first threshold is their rank-th best
// score. The rank aims the expected survivors N rank / valid at sqrt(k capacity), the
// geometric middle of [k, capacity]: fewer than k (a fallback round) or more than the
// capacity (another) are then several standard deviations away. No sample (tiles 0,
// threshold 0) when the whole corpus fits the list. sample_keys > 0 (a tuned plan's): at
// least that many keys (whole tiles, at most max_cap), never fewer than the rule's
// 16 N / max(k, 1024).
struct KnnSample {
  int tiles, stride, valid, rank;
};
WINNOW_HD KnnSample knn_sample(long long num_keys, int k, int capacity, int max_cap,
                               int sample_keys = 0) {
  KnnSample s{0, 1, 0, 0};
  if (num_keys <= capacity) return s;
  const long long key_tiles = (num_keys + kKnnKeyTile - 1) / kKnnKeyTile;
  const long long kk = k > 1024 ? k : 1024;
  // 16 N / max(k, 1024) keys: the rank is then 11 at k = 128 and 32 at k >= 1024 (N = 1M),
  // still several standard deviations from k and the capacity; 32 N / .. made the sample
  // pass itself a large share of the time.
  const long long rule = 16 * num_keys / kk;
  long long want = ((sample_keys > rule ? sample_keys : rule) + kKnnKeyTile - 1) / kKnnKeyTile;
  long long tiles = want < max_cap / kKnnKeyTile ? want : max_cap / kKnnKeyTile;
  if (tiles > key_tiles) tiles = key_tiles;
  if (tiles < 1) tiles = 1;
  s.tiles = int(tiles);
  s.stride = int(key_tiles / tiles);
  const bool last_sampled = (tiles - 1) * s.stride == key_tiles - 1;
  s.valid = int(tiles * kKnnKeyTile - (last_sampled ? key_tiles * kKnnKeyTile - num_keys : 0));
  double mid = 1.0;  // sqrt(k * capacity), by Newton steps (no libm on the host side here)
  const double target = double(k) * double(capacity);
  for (int i = 0; i < 64; ++i) mid = 0.5 * (mid + target / mid);
  long long rank = (long long)(mid * double(s.valid) / double(num_keys) + 0.5);
  if (rank < 1) rank = 1;
  if (rank > s.valid) rank = s.valid;
  s.rank = int(rank);
  return s;
}

// The radix refinement's steps, on the host and the device alike. A row's state: the
// threshold L (every key at or above it is a survivor: at least need of them) and `fixed`,
// how many top bits of the need-th best RankKey are known (they are L's: 0 at first).
//
// The digit that survivor rk adds to the histogram: its next kKnnDigitBits bits (fewer
// at the end) when its top `fixed` bits are L's, else -1 (it ranks above the group).
WINNOW_HD int knn_digit(u64 rk, u64 threshold, u32 fixed) {
  if (fixed >= 64) return -1;
  if (fixed > 0 && (rk >> (64 - fixed)) != (threshold >> (64 - fixed))) return -1;
  const u32 rest = 64 - fixed, bits = rest < u32(kKnnDigitBits) ? rest : u32(kKnnDigitBits);
  return int((rk >> (rest - bits)) & ((1ull << bits) - 1ull));
}

// From a round's histogram `hist` (of the survivors at or above L whose top `fixed` bits
// are L's) and its survivor count (at least need): the next L and `fixed`, and how many
// keys will survive it (at least need; at most need once all 64 bits are fixed).
struct KnnRefined {
  u64 threshold;
  u32 fixed, survivors;
};
WINNOW_HD KnnRefined knn_refine(const u32* hist, u32 count, u32 need, u64 threshold, u32 fixed) {
  const u32 rest = 64 - fixed, bits = rest < u32(kKnnDigitBits) ? rest : u32(kKnnDigitBits);
  u32 in_group = 0;
  for (int d = 0; d < (1 << bits); ++d) in_group += hist[d];
  u32 cum = count - in_group;  // survivors above the group (fewer than need)
  int d = (1 << bits) - 1;
  for (; d > 0 && cum + hist[d] < need; --d) cum += hist[d];
  const u64 prefix = fixed == 0 ? 0ull : threshold >> rest;
  const u32 after = rest - bits;  // bits still unknown
  const u64 low = ((prefix << bits) | u64(d)) << after;
  KnnRefined r;
  r.threshold = low > threshold ? low : threshold;
  r.fixed = fixed + bits;
  r.survivors = cum + hist[d];
  return r;
}

}  // namespace winnow

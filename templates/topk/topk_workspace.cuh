// The topk kernel's device workspace, laid out once for the host (ops/topk/topk_op.cpp sizes it and
// points the kernel's parameters into it) and the kernel (which addresses it):
//   [0, 256)                 the counters (TopkParams::counters)
//   buffers                  per resident CTA, per row: its CandidateBuffer (capacity
//                            RankKeys), then its selection list (next_pow2(k) RankKeys)
//   partials                 key splits: per CTA-sized block of rows x part x row, one
//                            part's selection (next_pow2(k) RankKeys)
//   block_done               key splits: one count per row block (uint32)
#pragma once
#include "common/portable.cuh"

namespace winnow {

// The smallest power of two >= n (1 for n <= 1).
WINNOW_HD constexpr int next_pow2(int n) {
  int p = 1;
  while (p < n) p <<= 1;
  return p;
}

struct TopkWorkspace {
  int rows;      // rows per CTA
  int capacity;  // CandidateBuffer entries per row
  int k_pow2;    // next_pow2(k): a selection list
  // In RankKeys (8 bytes), from one CTA's buffers (int: at most 16 rows of 2^18 + 2^13).
  WINNOW_HD constexpr int row_words() const { return capacity + k_pow2; }
  WINNOW_HD constexpr long long cta_words() const { return (long long)rows * row_words(); }
  WINNOW_HD constexpr int candidates(int r) const { return r * row_words(); }
  WINNOW_HD constexpr int selection(int r) const { return r * row_words() + capacity; }
  // In RankKeys, from the partials: part `split` of row r of row block `block`.
  WINNOW_HD constexpr long long partial(long long block, int splits, int split, int r) const {
    return ((block * splits + split) * rows + r) * (long long)k_pow2;
  }
  // Bytes, from the workspace's start, for `ctas` resident CTAs.
  WINNOW_HD static constexpr long long counters_bytes() { return 256; }
  WINNOW_HD constexpr long long buffers_offset() const { return counters_bytes(); }
  WINNOW_HD constexpr long long partials_offset(long long ctas) const {
    return buffers_offset() + ctas * cta_words() * 8;
  }
  WINNOW_HD constexpr long long block_done_offset(long long ctas) const {
    return partials_offset(ctas) + ctas * rows * (long long)k_pow2 * 8;
  }
  WINNOW_HD constexpr long long bytes(long long ctas) const {
    return block_done_offset(ctas) + ctas * 4;
  }
  // What one more resident CTA adds.
  WINNOW_HD constexpr long long bytes_per_cta() const {
    return cta_words() * 8 + rows * (long long)k_pow2 * 8 + 4;
  }
};

}  // namespace winnow

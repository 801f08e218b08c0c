// Shared-memory layout of the topk kernel, as constexpr arithmetic that the host also
// compiles (the plan checks the size against the device's limit with the same numbers).
#pragma once
#include "common/portable.cuh"

namespace winnow {

// Words after the radix histogram (SmemLayout::radix_off: 256 bins, then these): named
// scratch slots of the topk kernel's CTA-wide steps.
enum : int {
  kScratchRadixPrefix = 256,     // u64 (words 256-257): radix_kth's digits so far
  kScratchRadixRemaining = 258,  // radix_kth: entries still to take
  kScratchRadixDone = 259,       // radix_kth: the digits so far admit exactly k
  kScratchMergeLast = 260,       // store_or_merge_parts: this CTA merges
  kScratchMergeReal = 262,       // store_or_merge_parts: entries in the parts
  kScratchNextItem = 263,        // next_work_item's broadcast
  kScratchWords = 264,
};

// The most shared memory each of two CTAs can have on one SM: sm_90a and sm_100a hold
// 228 KB per SM, of which each CTA's system use takes 1 KB.
// (An enumerator: a namespace-scope constant would be emitted into every kernel's PTX.)
enum : long { kTwoCtaSmemBytes = (228L * 1024) / 2 - 1024 };

struct SmemLayout {
  int rows, heads, dim, key_tile, bins;
  // 0: q and k tiles held as fp32 (CUDA-core dots); 1 or 2: held in their stored
  // 8- or 16-bit form for mma.sync.
  int mma_bytes = 0;
  // The head-sum form keeps one sum per (16-head block, key) instead of a dot per head.
  bool head_sums = false;
  // wgmma: q and k tiles unpadded and 128-byte swizzled (wgmma_tiles.cuh), each starting
  // on a 1024-byte boundary; one head sum per (row, key).
  bool swizzled = false;
  // Key-tile stages; 0: k_stages()'s choice.
  int stages = 0;
  // Padded strides keep threads of a warp on different banks: fp32 rows by one word,
  // stored rows by 16 bytes (4 words: the 8 rows of an mma fragment hit 8 bank groups).
  WINNOW_HD constexpr int key_stride() const { return dim + 1; }
  WINNOW_HD constexpr int raw_row_bytes() const { return dim * mma_bytes + (swizzled ? 0 : 16); }
  WINNOW_HD static constexpr long align256(long words) { return (words + 255) / 256 * 256; }
  WINNOW_HD constexpr int dot_stride() const { return heads + 1; }
  // Offsets in 4-byte words.
  WINNOW_HD constexpr long q_words() const {
    const long w = long(rows) * heads * raw_row_bytes() / 4;
    return !mma_bytes ? long(rows) * heads * dim : swizzled ? align256(w) : w;
  }
  // One key-tile stage (the next tiles load while this one is scored).
  WINNOW_HD constexpr long k_stage_words() const {
    return mma_bytes ? long(key_tile) * raw_row_bytes() / 4 : long(key_tile) * key_stride();
  }
  // Stages: the wgmma path keeps four of 8-bit tiles unless the fourth is what leaves
  // room for one CTA per SM instead of two (then three), and three of 16-bit ones (their
  // 256-byte rows take twice the room); mma.sync two, CUDA cores one. (A fourth fp8 stage
  // put dsa-glm's H = 32 layout at 119 KB, one CTA per SM, which was much slower than
  // three stages and two CTAs.)
  WINNOW_HD constexpr int k_stages() const {
    if (stages > 0) return stages;
    if (!swizzled) return mma_bytes ? 2 : 1;
    if (mma_bytes != 1) return 3;
    SmemLayout four = *this, three = *this;
    four.stages = 4;
    three.stages = 3;
    return four.bytes() > kTwoCtaSmemBytes && three.bytes() <= kTwoCtaSmemBytes ? 3 : 4;
  }
  WINNOW_HD constexpr long k_words() const { return k_stage_words() * k_stages(); }
  WINNOW_HD constexpr long k_off() const { return q_words(); }
  WINNOW_HD constexpr long kscale_off() const { return k_off() + k_words(); }
  // Key scales per stage: the tensor-core path copies them with the key tile.
  WINNOW_HD constexpr long ksq_off() const { return kscale_off() + long(key_tile) * k_stages(); }
  WINNOW_HD constexpr long dots_off() const { return ksq_off() + key_tile; }
  WINNOW_HD constexpr long dots_words() const {
    return long(rows) * key_tile * (swizzled ? 1 : head_sums ? heads / 16 : dot_stride());
  }
  WINNOW_HD constexpr long w_off() const { return dots_off() + dots_words(); }
  WINNOW_HD constexpr long qsq_off() const { return w_off() + long(rows) * heads; }
  WINNOW_HD constexpr long hist_off() const { return qsq_off() + long(rows) * heads; }
  WINNOW_HD constexpr long radix_off() const { return hist_off() + long(rows) * bins; }
  // radix: a 256-bin histogram and the scratch slots above.
  WINNOW_HD constexpr long rows_off() const { return radix_off() + kScratchWords; }
  // Per row: a RowState of 16 words.
  WINNOW_HD constexpr long barriers_off() const { return (rows_off() + long(rows) * 16 + 1) / 2 * 2; }
  // The wgmma path's key-tile ring: a `full` and an `empty` mbarrier (8 bytes) per stage.
  WINNOW_HD constexpr long barrier_words() const { return swizzled ? 4L * k_stages() : 0; }
  WINNOW_HD constexpr long total_words() const { return barriers_off() + barrier_words(); }
  WINNOW_HD constexpr long bytes() const { return total_words() * 4; }
};

}  // namespace winnow

// Run-time arguments and shared-memory sizes of the block-select and block-sparse
// attention kernels. Included by the host (ops/block_*.cpp) and by NVRTC, so the
// layout is one definition; only plain types.
#pragma once
#include "common/portable.cuh"
#include "ptx/tma_map.cuh"

namespace winnow {

// Tokens per block, for pooling, selection and attention (FlashPrefill's block).
enum : int { kBlockTokens = 128 };

// Visible (causal) blocks of query blocks [0, i): i (i + 1) / 2. Row i of a head's
// staged index list starts here.
WINNOW_HD long long triangle(long long i) { return i * (i + 1) / 2; }

// The threshold rule of one call (ops/block/block_select.h defines the meaning).
struct BlockRule {
  float alpha;
  int sink_blocks;
  int local_blocks;
  int last_blocks;
  int min_blocks;
  int pad0;
};

struct BlockSelectParams {
  const unsigned short* q;   // [L][heads][d] bf16
  const unsigned short* k;   // [L][kv_heads][d] bf16
  unsigned short* pooled;    // workspace: [kv_heads][blocks][d] bf16 mean keys
  int* staged;               // workspace: per head, row I at triangle(I): kept blocks
  int* counts;               // workspace: [heads * blocks] kept per (head, query block)
  int* offsets;              // out: [heads * blocks + 1] CSR offsets
  int* indices;              // out: [offsets[last]] CSR key-block indices, ascending
  float* scores;             // out, optional: per head triangle(blocks) block scores
  int seq_len;
  int blocks;                // seq_len / 128
  BlockRule rule;
};

struct BlockAttentionParams {
  const unsigned short* q;   // [L][heads][d] bf16
  const unsigned short* k;   // [L][kv_heads][d]
  const unsigned short* v;   // [L][kv_heads][d]
  const int* offsets;        // [heads * blocks + 1]
  const int* indices;        // key blocks per (head, query block), ascending
  unsigned short* out;       // [L][heads][d] bf16
  int seq_len;
  int blocks;
  float scale_log2;          // softmax scale times log2(e)
  int pad0;
};

// Shared memory of the score pass: two stages of `tile` pooled keys (rows padded by
// 16 bytes so the 8 rows of an mma fragment fall on different banks), the block scores
// of one query block, the warps' partial column sums, and the kept flags.
struct BlockScoreSmem {
  int dim, tile, max_blocks, warps;
  WINNOW_HD constexpr int row_bytes() const { return dim * 2 + 16; }
  WINNOW_HD constexpr long stage_bytes() const { return long(tile) * row_bytes(); }
  WINNOW_HD constexpr long scores_off() const { return 2 * stage_bytes(); }
  WINNOW_HD constexpr long partial_off() const { return scores_off() + 4L * max_blocks; }
  WINNOW_HD constexpr long keep_off() const { return partial_off() + 4L * warps * tile; }
  // 16-byte aligned: the reductions store words (max_blocks need not be a multiple of 4).
  WINNOW_HD constexpr long reduce_off() const { return (keep_off() + max_blocks + 15) / 16 * 16; }
  WINNOW_HD constexpr long bytes() const { return reduce_off() + 16L * 32; }
};

// Shared memory of the attention kernel: two stages of (K tile, V tile), padded rows.
struct AttentionSmem {
  int dim, tile;
  WINNOW_HD constexpr int row_bytes() const { return dim * 2 + 16; }
  WINNOW_HD constexpr long stage_bytes() const { return 2L * tile * row_bytes(); }
  WINNOW_HD constexpr long bytes() const { return 2 * stage_bytes(); }
};

// The sm_90a wgmma attention kernel (templates/block/block_attention_wgmma.cuh): the arguments
// of the mma.sync kernel and the tensor maps of k and v ([L][kv_heads * d * 2] bytes,
// boxes of 128 bytes x 128 keys, 128-byte swizzle: ops/common/key_tensor_map.h), by value.
struct BlockAttentionWgmmaParams {
  BlockAttentionParams a;
  TmaMap k_map;
  TmaMap v_map;
};

// Its shared memory (1024-byte aligned): the q tile (128 rows), a ring of kStages stages of
// (K tile, V tile) of 128 keys, each tile d * 2 / 128 swizzled atoms of 128 rows x 128
// bytes, then the ring's full and empty mbarriers.
// Its CTA: two math warpgroups, then the producer warpgroup (one thread of it issues the
// loads). A whole warpgroup, so that setmaxnreg can move its registers to the math ones:
// 128 x 24 + 256 x 240 = 64512 of the SM's 65536 (at launch ptxas allots 168 a thread).
enum : int {
  kWgmmaAttentionThreads = 384,
  kWgmmaAttentionMathThreads = 256,
  kWgmmaAttentionProducerRegs = 24,
  kWgmmaAttentionMathRegs = 240
};

struct WgmmaAttentionSmem {
  int dim;
  enum : int { kStages = 2 };
  WINNOW_HD constexpr long tile_bytes() const { return long(kBlockTokens) * dim * 2; }
  WINNOW_HD constexpr long stage_off(int s) const { return tile_bytes() * (1 + 2L * s); }
  WINNOW_HD constexpr long barriers_off() const { return stage_off(kStages); }
  // full and empty mbarriers of the K ring, then of the V ring (K and V of a stage are
  // released apart: K once S is complete, V once P V is).
  WINNOW_HD constexpr long bytes() const { return barriers_off() + 32L * kStages; }
};

// The sm_90a wgmma form of the score pass (templates/block/block_score_wgmma.cuh): the mma.sync
// kernel's arguments and the tensor map of the pooled keys ([kv_heads * blocks rows][d * 2]
// bytes, boxes of 128 bytes x one score tile of blocks, 128-byte swizzle), by value.
struct BlockSelectWgmmaParams {
  BlockSelectParams s;
  TmaMap pooled_map;
};

// Its CTA: two math warpgroups of 64 query rows (8 warps of 16, as the mma.sync kernel's),
// no producer warp (the warp that releases a ring stage last issues its next load). Its
// registers are capped at 128 a thread (__maxnreg__), so that two CTAs fit an SM
// (2 x 8 warps x 128 x 32 = 65536).
enum : int {
  kWgmmaScoreThreads = 256,
  kWgmmaScoreRegs = 128,
  kWgmmaScoreTile = 128
};

// Its shared memory (1024-byte aligned): the q tile (128 rows, swizzled), a ring of kStages
// stages of `tile` pooled keys (d * 2 / 128 swizzled atoms of tile rows x 128 bytes each),
// the block scores of the query block, the rows' statistics of pass 1 (m, 1 / l per row),
// the kept flags, the reductions' scratch (16-byte aligned), the stages' release counters
// and full mbarriers. At d = 128, tile 128, 2048 blocks: 108.5 KB, two CTAs per SM.
struct WgmmaScoreSmem {
  int dim, tile, max_blocks;
  enum : int { kStages = 2, kWarps = kWgmmaScoreThreads / 32 };
  WINNOW_HD constexpr long q_bytes() const { return long(kBlockTokens) * dim * 2; }
  WINNOW_HD constexpr long tile_bytes() const { return long(tile) * dim * 2; }
  WINNOW_HD constexpr long stage_off(int s) const { return q_bytes() + tile_bytes() * s; }
  WINNOW_HD constexpr long scores_off() const { return stage_off(kStages); }
  WINNOW_HD constexpr long stats_off() const { return scores_off() + (4L * max_blocks + 15) / 16 * 16; }
  WINNOW_HD constexpr long keep_off() const { return stats_off() + 8L * kBlockTokens; }
  WINNOW_HD constexpr long reduce_off() const { return (keep_off() + max_blocks + 15) / 16 * 16; }
  WINNOW_HD constexpr long counters_off() const { return reduce_off() + 16L * 32; }
  WINNOW_HD constexpr long barriers_off() const { return counters_off() + 16; }
  WINNOW_HD constexpr long bytes() const { return barriers_off() + 8L * kStages; }
};

}  // namespace winnow

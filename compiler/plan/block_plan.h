// BlockSpec: what the block-select and block-sparse attention kernels are specialised on
// (heads, KV heads, head dim, the largest sequence); BlockPlan: their tiling. Plain
// structs, printed into the cache key beside the score program.
#pragma once
#include <string>

namespace winnow::plan {

struct BlockSpec {
  int heads = 32;
  int kv_heads = 8;
  int head_dim = 128;
  int max_blocks = 2048;  // query / key blocks of 128 tokens: sequences up to 256K
};

struct BlockPlan {
  int threads = 256;        // 8 warps x 16 query rows = one 128-token query block
  int score_tile = 64;      // pooled key blocks per stage of the score pass
  int attention_tile = 64;  // keys per stage of the attention kernel
  int scan_threads = 1024;  // the CSR offsets are scanned by one CTA
  long score_smem = 0;      // bytes (templates/block/block_params.cuh BlockScoreSmem)
  long attention_smem = 0;  // bytes (AttentionSmem; WgmmaAttentionSmem on the wgmma kernel)
  // 1: the attention kernel is the sm_90a wgmma one (kWgmmaAttentionThreads threads, one
  // 128-key tile per listed block); set by use_wgmma_attention.
  int attention_wgmma = 0;
  // 1: the score pass is the sm_90a wgmma one (kWgmmaScoreThreads threads, score_tile
  // kWgmmaScoreTile); set by use_wgmma_score.
  int score_wgmma = 0;
};

// The plan for the spec; false (with `why`) when it does not fit `smem_limit` bytes.
bool choose_block_plan(const BlockSpec& spec, long smem_limit, BlockPlan* out, std::string* why);

// Moves `plan`'s attention kernel to the wgmma one; false (with `why`) when its shared
// memory does not fit `smem_limit` bytes.
bool use_wgmma_attention(const BlockSpec& spec, long smem_limit, BlockPlan* plan, std::string* why);

// Moves `plan`'s score pass to the wgmma one (tiles of kWgmmaScoreTile blocks); false
// (with `why`) when its shared memory does not fit `smem_limit` bytes.
bool use_wgmma_score(const BlockSpec& spec, long smem_limit, BlockPlan* plan, std::string* why);

// Canonical text of spec + plan, for the cache key and `winnow compile`.
std::string describe(const BlockSpec& spec, const BlockPlan& plan);

}  // namespace winnow::plan

#include "compiler/plan/block_plan.h"

#include <fmt/format.h>

#include "block/block_params.cuh"

namespace winnow::plan {

bool choose_block_plan(const BlockSpec& spec, long smem_limit, BlockPlan* out, std::string* why) {
  BlockPlan p;
  p.score_smem =
      winnow::BlockScoreSmem{spec.head_dim, p.score_tile, spec.max_blocks, p.threads / 32}.bytes();
  p.attention_smem = winnow::AttentionSmem{spec.head_dim, p.attention_tile}.bytes();
  const long need = p.score_smem > p.attention_smem ? p.score_smem : p.attention_smem;
  if (need > smem_limit) {
    *why = fmt::format("head_dim = {} with {} blocks needs {} bytes of shared memory per block, "
                       "more than the {} the target allows",
                       spec.head_dim, spec.max_blocks, need, smem_limit);
    return false;
  }
  *out = p;
  return true;
}

bool use_wgmma_attention(const BlockSpec& spec, long smem_limit, BlockPlan* plan, std::string* why) {
  const long need = winnow::WgmmaAttentionSmem{spec.head_dim}.bytes();
  if (need > smem_limit) {
    *why = fmt::format("the wgmma attention kernel with head_dim = {} needs {} bytes of shared "
                       "memory per block, more than the {} the target allows",
                       spec.head_dim, need, smem_limit);
    return false;
  }
  plan->attention_wgmma = 1;
  plan->attention_smem = need;
  return true;
}

bool use_wgmma_score(const BlockSpec& spec, long smem_limit, BlockPlan* plan, std::string* why) {
  const long need =
      winnow::WgmmaScoreSmem{spec.head_dim, winnow::kWgmmaScoreTile, spec.max_blocks}.bytes();
  if (need > smem_limit) {
    *why = fmt::format("the wgmma score pass with head_dim = {} and {} blocks needs {} bytes of "
                       "shared memory per block, more than the {} the target allows",
                       spec.head_dim, spec.max_blocks, need, smem_limit);
    return false;
  }
  plan->score_wgmma = 1;
  plan->score_tile = winnow::kWgmmaScoreTile;
  plan->score_smem = need;
  return true;
}

std::string describe(const BlockSpec& s, const BlockPlan& p) {
  // The wgmma kernels' marks only when chosen: the default plan's text (and key) as before.
  return fmt::format(
      "block spec heads={} kv_heads={} dim={} block={} max_blocks={}\n"
      "block plan threads={} score_tile={} attention_tile={} scan_threads={} score_smem={} "
      "attention_smem={}{}{}\n",
      s.heads, s.kv_heads, s.head_dim, int(winnow::kBlockTokens), s.max_blocks, p.threads,
      p.score_tile, p.attention_tile, p.scan_threads, p.score_smem, p.attention_smem,
      p.attention_wgmma ? " attention_wgmma=1" : "", p.score_wgmma ? " score_wgmma=1" : "");
}

}  // namespace winnow::plan

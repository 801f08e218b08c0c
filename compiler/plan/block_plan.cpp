#include "compiler/plan/block_plan.h"

#include <fmt/format.h>

#include "winnow/block_params.cuh"

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

std::string describe(const BlockSpec& s, const BlockPlan& p) {
  return fmt::format(
      "block spec heads={} kv_heads={} dim={} block={} max_blocks={}\n"
      "block plan threads={} score_tile={} attention_tile={} scan_threads={} score_smem={} "
      "attention_smem={}\n",
      s.heads, s.kv_heads, s.head_dim, int(winnow::kBlockTokens), s.max_blocks, p.threads,
      p.score_tile, p.attention_tile, p.scan_threads, p.score_smem, p.attention_smem);
}

}  // namespace winnow::plan

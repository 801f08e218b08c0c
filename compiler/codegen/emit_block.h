// Generated stubs of block-select (pool, score + threshold, offsets, compact: one module,
// four entry points) and of the block-sparse attention kernel.
#pragma once
#include "compiler/codegen/emit_cuda.h"
#include "compiler/plan/block_plan.h"

namespace winnow::codegen {

inline constexpr const char* kBlockPoolEntry = "winnow_block_pool";
inline constexpr const char* kBlockScoreEntry = "winnow_block_score";
inline constexpr const char* kBlockOffsetsEntry = "winnow_block_offsets";
inline constexpr const char* kBlockCompactEntry = "winnow_block_compact";
inline constexpr const char* kBlockAttentionEntry = "winnow_block_attention";

// `score` is the block score program over one pooled key (dot(0) = q . kbar); `entry` of
// the result names the score kernel, the others use the constants above.
GeneratedKernel emit_block_select(const ir::Expr& score, const plan::BlockSpec& spec,
                                  const plan::BlockPlan& plan);
GeneratedKernel emit_block_attention(const plan::BlockSpec& spec, const plan::BlockPlan& plan);

}  // namespace winnow::codegen

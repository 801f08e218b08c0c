#include "ops/block/block_select.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "compiler/codegen/emit_block.h"
#include "compiler/lower/lower.h"
#include "ops/common/key_tensor_map.h"
#include "ops/common/tensor_rules.h"

namespace winnow::ops {
namespace {

// Workspace: pooled keys, then the counts, then the staged rows (each 256-byte aligned).
struct SelectWorkspace {
  size_t pooled = 0, counts = 0, staged = 0, total = 0;
  SelectWorkspace(const BlockProblem& p, int64_t seq_len) {
    auto up = [](size_t n) { return (n + 255) / 256 * 256; };
    const size_t nb = size_t(block_count(seq_len));
    counts = up(size_t(p.kv_heads) * nb * size_t(p.head_dim) * 2);
    staged = counts + up(size_t(p.heads) * nb * 4);
    total = staged + up(size_t(index_capacity(p, seq_len)) * 4);
  }
};

}  // namespace

ir::Expr block_score_program(int head_dim) {
  return ir::canonicalise(
      ir::binary(ir::BinaryOp::Mul, ir::dot(0), ir::constant(1.0f / std::sqrt(float(head_dim)))));
}

BlockSelectOp::BlockSelectOp(const BlockProblem& p, const rt::Context* ctx)
    : BlockOp(p, ctx, "winnow_block_select") {
  m_.use_wgmma(p.score_wgmma, "WINNOW_BLOCK_SCORE_WGMMA", true, plan::use_wgmma_score);
  score_ = lower::lower_score(block_score_program(p.head_dim), 1, nullptr);
  m_.program = ir::print(score_) + "\n" + m_.program;
  m_.generated = codegen::emit_block_select(score_, m_.spec, m_.plan);
}

std::unique_ptr<BlockSelectOp> BlockSelectOp::create(const BlockProblem& p,
                                                     const rt::Context* ctx) {
  return std::unique_ptr<BlockSelectOp>(new BlockSelectOp(p, ctx));
}

void BlockSelectOp::load() {
  pool_ = m_.load(codegen::kBlockPoolEntry, 0);
  select_ = m_.load(codegen::kBlockScoreEntry, int(m_.plan.score_smem));
  offsets_ = m_.load(codegen::kBlockOffsetsEntry, 0);
  compact_ = m_.load(codegen::kBlockCompactEntry, 0);
}

std::string BlockSelectOp::launch_info() const {
  if (!select_) return "not loaded";
  return m_.plan.score_wgmma ? m_.describe("score (wgmma)", *select_, kWgmmaScoreThreads)
                             : m_.describe("score", *select_);
}

size_t BlockSelectOp::workspace_bytes(int64_t seq_len) const {
  return SelectWorkspace(m_.problem, seq_len).total;
}

void BlockSelectOp::execute(const TensorView& q, const TensorView& k, const BlockSelectRule& rule,
                            const TensorView& out_offsets, const TensorView& out_indices,
                            const TensorView* out_scores, void* workspace,
                            size_t workspace_bytes, CUstream stream) const {
  const BlockProblem& p = m_.problem;
  const int device = m_.ctx ? m_.ctx->info().ordinal : 0;
  validate_block_rule(rule);
  const int64_t L = validate_block_inputs(p, device, q, k, nullptr);
  validate_block_index(p, device, L, out_offsets, out_indices);
  const int64_t nb = block_count(L);
  if (out_scores && out_scores->present())
    check_vector("scores", *out_scores, DType::F32, device, index_capacity(p, L),
                 "heads * nb (nb + 1) / 2");
  const SelectWorkspace ws(p, L);
  if (workspace == nullptr || reinterpret_cast<uintptr_t>(workspace) % 256 != 0)
    fail("workspace: null or not 256-byte aligned");
  if (workspace_bytes < ws.total)
    throw WorkspaceTooSmall(fmt::format("workspace: {} bytes given, {} needed for L = {}",
                                        workspace_bytes, ws.total, L));
  if (!pool_) throw_not_built(built());
  m_.ctx->bind();
  auto* base = static_cast<unsigned char*>(workspace);
  BlockSelectParams a{};
  a.q = static_cast<const unsigned short*>(q.data);
  a.k = static_cast<const unsigned short*>(k.data);
  a.pooled = reinterpret_cast<unsigned short*>(base);
  a.counts = reinterpret_cast<int*>(base + ws.counts);
  a.staged = reinterpret_cast<int*>(base + ws.staged);
  a.offsets = static_cast<int*>(out_offsets.data);
  a.indices = static_cast<int*>(out_indices.data);
  a.scores = out_scores && out_scores->present() ? static_cast<float*>(out_scores->data) : nullptr;
  a.seq_len = int(L);
  a.blocks = int(nb);
  a.rule = {rule.alpha, rule.sink_blocks, rule.local_blocks, rule.last_blocks, rule.min_blocks, 0};
  void* args[] = {&a};
  const unsigned rows = unsigned(p.heads * nb);
  pool_->launch(unsigned(nb), unsigned(p.kv_heads), unsigned(p.head_dim), stream, args);
  if (m_.plan.score_wgmma) {
    // The pooled keys as bytes [kv_heads * nb][d * 2], boxes of 128 bytes x one score tile.
    BlockSelectWgmmaParams w{};
    w.s = a;
    const TensorView pooled = contiguous_view(a.pooled, DType::BF16, {p.kv_heads * nb, p.head_dim});
    const CUtensorMap map =
        key_tensor_map(pooled, p.kv_heads * nb, p.head_dim * 2, m_.plan.score_tile);
    static_assert(sizeof(CUtensorMap) == sizeof(TmaMap), "the opaque bytes");
    std::memcpy(&w.pooled_map, &map, sizeof map);
    void* wargs[] = {&w};
    select_->launch(rows, 1, unsigned(kWgmmaScoreThreads), stream, wargs);
  } else {
    select_->launch(rows, 1, unsigned(m_.plan.threads), stream, args);
  }
  offsets_->launch(1, 1, unsigned(m_.plan.scan_threads), stream, args);
  compact_->launch(rows, 1, 128, stream, args);
}

}  // namespace winnow::ops

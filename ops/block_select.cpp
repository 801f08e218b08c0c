#include "ops/block_select.h"

#include <fmt/format.h>

#include <cmath>

#include "compiler/codegen/emit_block.h"
#include "compiler/lower/lower.h"
#include "ops/block_module.h"
#include "ops/tensor_rules.h"

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

struct BlockSelectOp::Impl {
  BlockModule m;
  ir::Expr score;
  std::shared_ptr<const rt::LoadedKernel> pool, select, offsets, compact;
  Impl(const BlockProblem& p, const rt::Context* ctx) : m(p, ctx, "winnow_block_select") {}
};

BlockSelectOp::BlockSelectOp(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
BlockSelectOp::~BlockSelectOp() = default;

std::unique_ptr<BlockSelectOp> BlockSelectOp::create(const BlockProblem& p,
                                                     const rt::Context* ctx) {
  auto impl = std::make_unique<Impl>(p, ctx);
  BlockModule& m = impl->m;
  impl->score = lower::lower_score(block_score_program(p.head_dim), 1, nullptr);
  m.program = ir::print(impl->score) + "\n" + m.program;
  m.generated = codegen::emit_block_select(impl->score, m.spec, m.plan);
  return std::unique_ptr<BlockSelectOp>(new BlockSelectOp(std::move(impl)));
}

const BlockProblem& BlockSelectOp::problem() const { return impl_->m.problem; }
const std::string& BlockSelectOp::source() const { return impl_->m.generated.source; }
std::string BlockSelectOp::plan_text() const { return impl_->m.program; }
const std::string& BlockSelectOp::content_key() const { return impl_->m.module.key; }
std::string BlockSelectOp::launch_info() const {
  const Impl& i = *impl_;
  if (!i.select) return "not loaded";
  return i.m.describe("score", *i.select);
}
bool BlockSelectOp::built() const { return !impl_->m.module.cubin.empty(); }
const std::vector<char>& BlockSelectOp::cubin() const { return impl_->m.module.cubin; }
backend::CompileRequest BlockSelectOp::compile_request() const {
  return impl_->m.compile_request();
}

void BlockSelectOp::build(rt::CubinCache& cache, const backend::Backend& be) {
  Impl& i = *impl_;
  if (!i.m.build(cache, be)) return;
  i.pool = i.m.load(codegen::kBlockPoolEntry, 0);
  i.select = i.m.load(codegen::kBlockScoreEntry, int(i.m.plan.score_smem));
  i.offsets = i.m.load(codegen::kBlockOffsetsEntry, 0);
  i.compact = i.m.load(codegen::kBlockCompactEntry, 0);
}

size_t BlockSelectOp::workspace_bytes(int64_t seq_len) const {
  return SelectWorkspace(impl_->m.problem, seq_len).total;
}

void BlockSelectOp::execute(const TensorView& q, const TensorView& k, const BlockSelectRule& rule,
                            const TensorView& out_offsets, const TensorView& out_indices,
                            const TensorView* out_scores, void* workspace,
                            size_t workspace_bytes, CUstream stream) const {
  const Impl& m = *impl_;
  const BlockProblem& p = m.m.problem;
  const int device = m.m.ctx ? m.m.ctx->info().ordinal : 0;
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
  if (!m.pool) throw_not_built(built());
  m.m.ctx->bind();
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
  m.pool->launch(unsigned(nb), unsigned(p.kv_heads), unsigned(p.head_dim), stream, args);
  m.select->launch(rows, 1, unsigned(m.m.plan.threads), stream, args);
  m.offsets->launch(1, 1, unsigned(m.m.plan.scan_threads), stream, args);
  m.compact->launch(rows, 1, 128, stream, args);
}

}  // namespace winnow::ops

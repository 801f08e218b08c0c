#include "ops/block_attention.h"

#include <cmath>

#include "compiler/codegen/emit_block.h"
#include "ops/block_module.h"
#include "ops/tensor_rules.h"

namespace winnow::ops {

struct BlockAttentionOp::Impl {
  BlockModule m;
  std::shared_ptr<const rt::LoadedKernel> kernel;
  Impl(const BlockProblem& p, const rt::Context* ctx) : m(p, ctx, "winnow_block_attention") {}
};

BlockAttentionOp::BlockAttentionOp(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
BlockAttentionOp::~BlockAttentionOp() = default;

std::unique_ptr<BlockAttentionOp> BlockAttentionOp::create(const BlockProblem& p,
                                                           const rt::Context* ctx) {
  auto impl = std::make_unique<Impl>(p, ctx);
  impl->m.generated = codegen::emit_block_attention(impl->m.spec, impl->m.plan);
  return std::unique_ptr<BlockAttentionOp>(new BlockAttentionOp(std::move(impl)));
}

const BlockProblem& BlockAttentionOp::problem() const { return impl_->m.problem; }
const std::string& BlockAttentionOp::source() const { return impl_->m.generated.source; }
std::string BlockAttentionOp::plan_text() const { return impl_->m.program; }
const std::string& BlockAttentionOp::content_key() const { return impl_->m.module.key; }
std::string BlockAttentionOp::launch_info() const {
  const Impl& i = *impl_;
  if (!i.kernel) return "not loaded";
  return i.m.describe("attention", *i.kernel);
}
bool BlockAttentionOp::built() const { return !impl_->m.module.cubin.empty(); }
const std::vector<char>& BlockAttentionOp::cubin() const { return impl_->m.module.cubin; }
backend::CompileRequest BlockAttentionOp::compile_request() const {
  return impl_->m.compile_request();
}

void BlockAttentionOp::build(rt::CubinCache& cache, const backend::Backend& be) {
  Impl& i = *impl_;
  if (i.m.build(cache, be))
    i.kernel = i.m.load(codegen::kBlockAttentionEntry, int(i.m.plan.attention_smem));
}

void BlockAttentionOp::execute(const TensorView& q, const TensorView& k, const TensorView& v,
                               const TensorView& offsets, const TensorView& indices,
                               const TensorView& out, CUstream stream) const {
  const Impl& m = *impl_;
  const BlockProblem& p = m.m.problem;
  const int device = m.m.ctx ? m.m.ctx->info().ordinal : 0;
  const int64_t L = validate_block_inputs(p, device, q, k, &v);
  validate_block_index(p, device, L, offsets, indices);
  TensorRules r("out", out);
  r.basics(DType::BF16, device, 3, "[L, heads, head_dim]");
  r.dim(0, L, "L");
  r.dim(1, p.heads, "heads");
  r.dim(2, p.head_dim, "head_dim");
  r.stride(0, int64_t(p.heads) * p.head_dim, "out must be contiguous");
  r.stride(1, p.head_dim, "out must be contiguous");
  r.stride(2, 1, "out must be contiguous");
  if (!m.kernel) throw_not_built(built());
  m.m.ctx->bind();
  BlockAttentionParams a{};
  a.q = static_cast<const unsigned short*>(q.data);
  a.k = static_cast<const unsigned short*>(k.data);
  a.v = static_cast<const unsigned short*>(v.data);
  a.offsets = static_cast<const int*>(offsets.data);
  a.indices = static_cast<const int*>(indices.data);
  a.out = static_cast<unsigned short*>(out.data);
  a.seq_len = int(L);
  a.blocks = int(block_count(L));
  a.scale_log2 = float(1.4426950408889634 / std::sqrt(double(p.head_dim)));
  void* args[] = {&a};
  m.kernel->launch(unsigned(p.heads * a.blocks), 1, unsigned(m.m.plan.threads), stream, args);
}

}  // namespace winnow::ops

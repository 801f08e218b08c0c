#include "ops/block_attention.h"

#include <cmath>

#include "compiler/codegen/emit_block.h"
#include "ops/jit_module.h"
#include "ops/tensor_rules.h"

namespace winnow::ops {

struct BlockAttentionOp::Impl {
  BlockProblem problem;
  const rt::Context* ctx = nullptr;
  plan::BlockSpec spec;
  plan::BlockPlan plan;
  codegen::GeneratedKernel generated;
  CompiledModule module;
  std::shared_ptr<const rt::LoadedKernel> kernel;
};

BlockAttentionOp::BlockAttentionOp(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
BlockAttentionOp::~BlockAttentionOp() = default;

std::unique_ptr<BlockAttentionOp> BlockAttentionOp::create(const BlockProblem& p,
                                                           const rt::Context* ctx) {
  validate_block_problem(p);
  auto impl = std::make_unique<Impl>();
  impl->problem = p;
  impl->ctx = ctx;
  impl->spec = block_spec(p);
  impl->plan = block_plan(impl->spec, ctx ? ctx->info().max_smem_optin : kDefaultSmemLimit);
  impl->generated = codegen::emit_block_attention(impl->spec, impl->plan);
  return std::unique_ptr<BlockAttentionOp>(new BlockAttentionOp(std::move(impl)));
}

const BlockProblem& BlockAttentionOp::problem() const { return impl_->problem; }
const std::string& BlockAttentionOp::source() const { return impl_->generated.source; }
const std::string& BlockAttentionOp::content_key() const { return impl_->module.key; }
bool BlockAttentionOp::built() const { return !impl_->module.cubin.empty(); }
const std::vector<char>& BlockAttentionOp::cubin() const { return impl_->module.cubin; }

backend::CompileRequest BlockAttentionOp::compile_request() const {
  return make_compile_request(impl_->generated, impl_->problem.arch, "winnow_block_attention");
}

void BlockAttentionOp::build(rt::CubinCache& cache, const backend::Backend& be) {
  Impl& m = *impl_;
  m.module = compile_cached(cache, be, compile_request(), "winnow_block_attention",
                            plan::describe(m.spec, m.plan), "block-sparse attention");
  if (!m.ctx) return;
  m.kernel = load_entry(*m.ctx, m.module, codegen::kBlockAttentionEntry,
                        int(m.plan.attention_smem));
}

void BlockAttentionOp::execute(const TensorView& q, const TensorView& k, const TensorView& v,
                               const TensorView& offsets, const TensorView& indices,
                               const TensorView& out, CUstream stream) const {
  const Impl& m = *impl_;
  const BlockProblem& p = m.problem;
  const int device = m.ctx ? m.ctx->info().ordinal : 0;
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
  if (!m.kernel) {
    throw NotBuilt(m.module.cubin.empty() ? "the op is not built: call build first"
                                          : "the op was compiled without a device and cannot run");
  }
  m.ctx->bind();
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
  m.kernel->launch(unsigned(p.heads * a.blocks), 1, unsigned(m.plan.threads), stream, args);
}

}  // namespace winnow::ops

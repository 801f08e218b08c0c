#include "ops/block/block_attention.h"

#include <cmath>
#include <cstring>

#include "compiler/codegen/emit_block.h"
#include "ops/common/key_tensor_map.h"
#include "ops/common/tensor_rules.h"

namespace winnow::ops {

BlockAttentionOp::BlockAttentionOp(const BlockProblem& p, const rt::Context* ctx)
    : BlockOp(p, ctx, "winnow_block_attention") {
  m_.use_wgmma(p.attention_wgmma, "WINNOW_BLOCK_ATTENTION_WGMMA", true, plan::use_wgmma_attention);
  m_.generated = codegen::emit_block_attention(m_.spec, m_.plan);
}

std::unique_ptr<BlockAttentionOp> BlockAttentionOp::create(const BlockProblem& p,
                                                           const rt::Context* ctx) {
  return std::unique_ptr<BlockAttentionOp>(new BlockAttentionOp(p, ctx));
}

void BlockAttentionOp::load() {
  kernel_ = m_.load(codegen::kBlockAttentionEntry, int(m_.plan.attention_smem));
}

std::string BlockAttentionOp::launch_info() const {
  if (!kernel_) return "not loaded";
  return m_.plan.attention_wgmma
             ? m_.describe("attention (wgmma)", *kernel_, kWgmmaAttentionThreads)
             : m_.describe("attention", *kernel_);
}

void BlockAttentionOp::execute(const TensorView& q, const TensorView& k, const TensorView& v,
                               const TensorView& offsets, const TensorView& indices,
                               const TensorView& out, CUstream stream) const {
  const BlockProblem& p = m_.problem;
  const int device = m_.ctx ? m_.ctx->info().ordinal : 0;
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
  if (!kernel_) throw_not_built(built());
  m_.ctx->bind();
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
  if (m_.plan.attention_wgmma) {
    // K and V as bytes [L][kv_heads * d * 2], boxes of 128 bytes x one block of keys.
    BlockAttentionWgmmaParams w{};
    w.a = a;
    const int row_bytes = p.kv_heads * p.head_dim * 2;
    const CUtensorMap km = key_tensor_map(k, L, row_bytes, kBlockTokens);
    const CUtensorMap vm = key_tensor_map(v, L, row_bytes, kBlockTokens);
    static_assert(sizeof(CUtensorMap) == sizeof(TmaMap), "the opaque bytes");
    std::memcpy(&w.k_map, &km, sizeof km);
    std::memcpy(&w.v_map, &vm, sizeof vm);
    void* args[] = {&w};
    kernel_->launch(unsigned(p.heads * a.blocks), 1, unsigned(kWgmmaAttentionThreads), stream, args);
    return;
  }
  void* args[] = {&a};
  kernel_->launch(unsigned(p.heads * a.blocks), 1, unsigned(m_.plan.threads), stream, args);
}

}  // namespace winnow::ops

// The block-sparse attention op: causal flash attention (bf16, GQA, block 128) that walks
// the CSR block index of block-select directly, visiting only the kept key blocks.
#pragma once
#include <cuda.h>

#include <memory>
#include <string>
#include <vector>

#include "compiler/backend/backend.h"
#include "ops/block/block_module.h"
#include "ops/block/block_problem.h"
#include "runtime/cuda_driver.h"
#include "runtime/kernel_cache.h"

namespace winnow::ops {

class BlockAttentionOp final : public BlockOp {
 public:
  // Validates the problem and generates the kernel's source. ctx may be null (compile only).
  static std::unique_ptr<BlockAttentionOp> create(const BlockProblem& p, const rt::Context* ctx);

  std::string launch_info() const override;
  // out [L, heads, d] bf16 = attention of q over the keys of the listed blocks (causal on
  // the diagonal block). Every row's list must hold its diagonal block last (block-select's
  // index always does). One launch on `stream`; no workspace.
  void execute(const TensorView& q, const TensorView& k, const TensorView& v,
               const TensorView& offsets, const TensorView& indices, const TensorView& out,
               CUstream stream) const;

 private:
  BlockAttentionOp(const BlockProblem& p, const rt::Context* ctx);
  void load() override;
  std::shared_ptr<const rt::LoadedKernel> kernel_;
};

}  // namespace winnow::ops

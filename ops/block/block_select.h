// The block-select op: the FlashPrefill block score (a winnow score program over pooled
// keys) and threshold(alpha) (a select rule), fused in one pass with no score matrix in
// device memory, written as a CSR block index (ops/block/block_problem.h states the semantics).
#pragma once
#include <cuda.h>

#include <memory>
#include <string>
#include <vector>

#include "compiler/backend/backend.h"
#include "compiler/ir/ir.h"
#include "ops/block/block_module.h"
#include "ops/block/block_problem.h"
#include "runtime/cuda_driver.h"
#include "runtime/kernel_cache.h"

namespace winnow::ops {

// The block score program: dot(0) * (1 / sqrt(head_dim)), canonical.
ir::Expr block_score_program(int head_dim);

class BlockSelectOp final : public BlockOp {
 public:
  // Validates the problem and generates the kernels' source. ctx may be null (compile only).
  static std::unique_ptr<BlockSelectOp> create(const BlockProblem& p, const rt::Context* ctx);

  std::string launch_info() const override;
  // Device workspace of one call of seq_len tokens: pooled keys, staged rows, counts.
  size_t workspace_bytes(int64_t seq_len) const;
  // Pools the keys, scores and selects, and writes the CSR index (and, when out_scores is
  // given, the fp32 block scores S(h, I, J) at h * nb (nb + 1) / 2 + I (I + 1) / 2 + J).
  // Four launches on `stream`; never allocates, synchronises or compiles.
  void execute(const TensorView& q, const TensorView& k, const BlockSelectRule& rule,
               const TensorView& out_offsets, const TensorView& out_indices,
               const TensorView* out_scores, void* workspace, size_t workspace_bytes,
               CUstream stream) const;

 private:
  BlockSelectOp(const BlockProblem& p, const rt::Context* ctx);
  void load() override;
  ir::Expr score_;
  std::shared_ptr<const rt::LoadedKernel> pool_, select_, offsets_, compact_;
};

}  // namespace winnow::ops

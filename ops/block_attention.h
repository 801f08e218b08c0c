// The block-sparse attention op: causal flash attention (bf16, GQA, block 128) that walks
// the CSR block index of block-select directly, visiting only the kept key blocks.
#pragma once
#include <cuda.h>

#include <memory>
#include <string>
#include <vector>

#include "compiler/backend/backend.h"
#include "ops/block_problem.h"
#include "runtime/cuda_driver.h"
#include "runtime/kernel_cache.h"

namespace winnow::ops {

class BlockAttentionOp {
 public:
  static std::unique_ptr<BlockAttentionOp> create(const BlockProblem& p, const rt::Context* ctx);
  ~BlockAttentionOp();

  const BlockProblem& problem() const;
  const std::string& source() const;
  std::string plan_text() const;  // the kernels' spec and plan
  backend::CompileRequest compile_request() const;
  const std::string& content_key() const;
  void build(rt::CubinCache& cache, const backend::Backend& be);
  bool built() const;
  // Occupancy, registers and shared memory of the main kernel (after build on a device).
  std::string launch_info() const;
  const std::vector<char>& cubin() const;

  // out [L, heads, d] bf16 = attention of q over the keys of the listed blocks (causal on
  // the diagonal block). Every row's list must hold its diagonal block last (block-select's
  // index always does). One launch on `stream`; no workspace.
  void execute(const TensorView& q, const TensorView& k, const TensorView& v,
               const TensorView& offsets, const TensorView& indices, const TensorView& out,
               CUstream stream) const;

 private:
  struct Impl;
  explicit BlockAttentionOp(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace winnow::ops

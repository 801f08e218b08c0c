// The paged decode op: the fused indexer top-k over the engines' paged fp8 key
// cache, as vLLM and SGLang call fp8_paged_mqa_logits + a top-k every decode step.
// Layout and visibility: templates/paged/paged_cache.cuh.
//
// Inputs: q fp8 e4m3 [B, next_n, H, 128] (B <= max_batch), cache uint8
// [num_blocks, 64, 1, 132], block_table int32 [B, >= max_blocks_per_seq], context_lens
// int32 [B] or [B, next_n], weights fp32 [B * next_n, H] (when the program reads w).
// Output: int32 [B * next_n, k], row b * next_n + j: the k best token positions in
// [0, visible) of query j of request b under the program (relu_mh by default), in the
// order of docs/semantics.md (Order), -1 padded; rows of a bad request (see
// templates/paged/paged_gather_kernel.cuh) are all -1 and counted as bad windows.
//
// How: three launches, none sized by a length. paged_windows and
// paged_gather copy the touched pages into a packed contiguous key buffer in the workspace
// (request after request, no padding), then the fused top-k kernel (ops/common/topk_op.h) runs
// with per-row windows over it: its sample, filter, exact select, key splits and merge,
// unchanged. The copy costs one more read and write of the touched cache; a paged loader
// in the key ring (no copy) is the stream path's (ops/paged/paged_stream.h).
#pragma once
#include <cuda.h>

#include <memory>
#include <string>

#include "compiler/backend/arch.h"
#include "compiler/backend/backend.h"
#include "compiler/ir/ir.h"
#include "ops/common/tensor.h"
#include "ops/common/topk_op.h"
#include "runtime/cuda_driver.h"
#include "runtime/kernel_cache.h"

namespace winnow::ops {

inline constexpr int kMaxNextN = 4;

struct PagedProblem {
  ir::Expr score;          // null: relu_mh with the key scale
  std::string expression;  // the text `score` was parsed from (empty: built)
  int heads = 64;
  int k = 2048;
  int next_n = 1;              // queries per request, 1..kMaxNextN
  int max_batch = 1;           // requests per call at most (the captured batch)
  int max_blocks_per_seq = 0;  // block table entries a request may use (max length / 64)
  // Keys the packed buffer holds, summed over a call's requests (0: max_batch *
  // max_blocks_per_seq * 64). Requests past it get bad windows.
  int64_t max_total_keys = 0;
  bool sorted = false;
  backend::Arch arch;
  int key_splits = 0;  // as TopkProblem::key_splits
  // Asks for the stream path (ops/paged/paged_stream.h: per-row sample, threshold, filter stream
  // over the cache in place, exact select; 64 heads, sm_90a, head-sum programs) and refuses
  // a problem it cannot run. false: the stream path wherever it runs unless
  // WINNOW_PAGED_STREAM=0 (paged_stream_chosen), else the gathered path.
  bool stream = false;
};

struct PagedInputs {
  TensorView q, cache, block_table, context_lens, weights;
  // Optional: the previous step's selection, int32 [B * next_n, k] token positions (-1
  // padded), e.g. the last call's out_indices, which it may be. The stream path scores its
  // keys first and filters from their k-th best (templates/paged/paged_stream_hint.cuh),
  // without the sample pass; the answer is exact whatever it holds. The gathered path
  // validates it and reads nothing of it.
  TensorView hint;
};

// The fused top-k problem the op runs over the packed keys (ranges windows, relative
// indices): what the CPU reference scores too (testing/paged_reference.h).
TopkProblem paged_topk_problem(const PagedProblem& p);

// Refuses a bad problem with a message (InvalidArgument / NotSupported).
void validate_paged_problem(const PagedProblem& p);
// Refuses bad tensors of one call; returns B.
int64_t validate_paged_call(const PagedProblem& p, int device, const PagedInputs& in,
                            const TensorView* out_indices);

class PagedTopkOp {
 public:
  // Validates the problem and generates both modules' source. ctx may be null (compile only).
  static std::unique_ptr<PagedTopkOp> create(const PagedProblem& p, const rt::Context* ctx);
  ~PagedTopkOp();

  const PagedProblem& problem() const;
  // Whether this op takes the stream path (ops::paged_stream_chosen at create): then it has
  // no top-k op and no gather module (topk() throws NotSupported).
  bool stream() const;
  const std::string& stream_source() const;  // the stream module's stub ("" otherwise)
  const std::vector<char>& stream_cubin() const;
  std::string launch_info() const;           // the stream path's launches, after build
  const TopkOp& topk() const;                // the fused top-k over the packed keys
  const std::string& gather_source() const;  // the gather module's stub
  const std::vector<char>& gather_cubin() const;
  int64_t capacity() const;                  // keys of the packed buffer
  // Compiles (or loads from the cache) both modules and, with a context, loads them.
  void build(rt::CubinCache& cache, const backend::Backend& be);
  bool built() const;
  size_t workspace_bytes() const;  // needs build() with a context
  size_t counter_offset() const;   // two uint32: fallback rows, bad windows (bad requests' rows)
                                   // (both paths; the stream path's are its first words)
  // Validates, then launches on `stream`. Never allocates, synchronises or compiles, and
  // reads no length on the host: capture it at max_batch and replay it for any lengths.
  void execute(const PagedInputs& in, const TensorView& out_indices, void* workspace,
               size_t workspace_bytes, CUstream stream) const;

 private:
  struct Impl;
  explicit PagedTopkOp(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace winnow::ops

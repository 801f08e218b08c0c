// The retrieval mode of the topk op: one-head scores (ip, l2, cosine or any
// one-head program) over a dense window, fp16 / bf16 on sm_90a. Per pass of up to 64
// queries: a sample pass over a strided subset of the corpus tiles sets each query's first
// threshold; one stream of the corpus on wgmma appends the keys at or above it to the
// query's CandidateList; one exact select per query, with counted fallback rounds
// (templates/knn/knn_select.cuh). Memory O(64 x capacity) whatever the batch.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "compiler/backend/backend.h"
#include "compiler/plan/kernel_plan.h"
#include "ops/common/topk_op.h"
#include "ops/common/validate.h"

namespace winnow::ops {

class KnnRetrieval {
 public:
  // Why the problem cannot take the retrieval mode ("" when it can), the switch
  // WINNOW_KNN_RETRIEVAL=0 included.
  static std::string unsuited(const TopkProblem& p, const plan::KernelSpec& spec);
  // Plans and generates the kernels; throws NotSupported when none fits the shared memory.
  KnnRetrieval(const TopkProblem& p, const plan::KernelSpec& spec, const rt::Context* ctx);
  ~KnnRetrieval();

  const std::string& source() const;
  std::string plan_text() const;
  backend::CompileRequest compile_request() const;
  // The content key and cubin (after build); loads the three entries with a context.
  void build(rt::CubinCache& cache, const backend::Backend& be, std::string* key,
             std::vector<char>* cubin);
  size_t workspace_bytes() const;
  int64_t hint_limit() const;  // sample hint entries accepted (and ignored): the capacity
  int grid() const;  // CTAs of the persistent stream (after build on a device)
  std::string launch_info() const;
  // The launches of every pass of 64 queries on `stream` (shape validated by the caller).
  void execute(const TopkInputs& in, const CallShape& shape, const TensorView* out_indices,
               const TensorView* out_scores, void* workspace, CUstream stream,
               const CallOptions& options) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace winnow::ops

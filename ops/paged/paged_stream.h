// The paged decode op's stream path (templates/paged/paged_stream_params.cuh): the
// retrieval mode's sample -> threshold -> filter stream -> exact select per query row, over
// the paged cache read in place (no gathered copy), with a grid that never depends on the
// lengths. The op's path wherever it can run (64 heads, sm_90a, a head-sum score) unless
// WINNOW_PAGED_STREAM=0; PagedProblem::stream asks for it (and refuses other problems).
// Launches per call (paged_stream_steps; each after the first may start while the one
// before it ends: programmatic dependent launch): prepare (1 CTA), the sample pass, the
// thresholds (a CTA per row), then round 0 and the kKnnRadixRounds radix rounds, each a
// stream and a select (a round with nothing to rerun ends at once). A plan whose longest
// window fits the candidate list needs no sample and no fallback round (prepare, stream,
// select), and one whose longest window fits in k unsorted scores nothing (prepare,
// select): the plan's maximum length decides, never the call's lengths. A call with a hint
// (PagedInputs::hint) launches the hint kernel in place of the sample pass and the
// thresholds (templates/paged/paged_stream_hint.cuh); the smaller lists take no hint.
#pragma once
#include <cuda.h>

#include <memory>
#include <string>
#include <vector>

#include "compiler/backend/backend.h"
#include "ops/paged/paged_topk.h"
#include "runtime/cuda_driver.h"
#include "runtime/kernel_cache.h"
#include "paged/paged_stream_params.cuh"

namespace winnow::ops {

// Why the stream path cannot run p ("" when it can): 64 heads, sm_90a, a head-sum score.
std::string paged_stream_unsuited(const PagedProblem& p);
// Whether the op takes the stream path: p.stream (then an unsuited problem is refused), else
// wherever the problem suits it unless WINNOW_PAGED_STREAM=0 (the gathered path; "1" or unset:
// the stream path where it suits; any other value is an InvalidArgument).
bool paged_stream_chosen(const PagedProblem& p);
// Refuses a problem the stream path cannot run (NotSupported, saying why).
void validate_paged_stream_problem(const PagedProblem& p);

// The kernels' arguments for one call (tensors validated; B requests) over `workspace` of
// paged_stream_workspace_bytes(p): the op's own setup, which the CPU emulation of the
// kernels (tests/test_paged_stream_emulated.cpp) runs with host memory too.
// select_stage: the per-row kernels' staging bytes (knn_select_stage_bytes); stream_ctas:
// the stream's grid.
winnow::PagedStreamParams paged_stream_params(const PagedProblem& p, const PagedInputs& in,
                                              int64_t B, const TensorView& out_indices,
                                              void* workspace, long select_stage, int stream_ctas);

// One launch of a call: which kernel, and the sample pass / round it runs.
struct PagedStreamStep {
  enum Kernel { Prepare, Stream, Threshold, Hint, Select } kernel;
  bool sample = false;  // Stream: the sample pass
  int round = 0;        // Stream (not the sample pass) and Select: knn.round
};
// The launches of every call of plan p, with or without a hint, in order (the op's execute
// and the CPU emulation run the same list).
std::vector<PagedStreamStep> paged_stream_steps(const PagedProblem& p, bool hint = false);
size_t paged_stream_workspace_bytes(const PagedProblem& p);

class PagedStream {
 public:
  PagedStream(const PagedProblem& p, const rt::Context* ctx);
  ~PagedStream();

  const std::string& source() const;
  backend::CompileRequest compile_request() const;
  const std::vector<char>& cubin() const;
  void build(rt::CubinCache& cache, const backend::Backend& be);
  bool built() const;
  size_t workspace_bytes() const;
  std::string launch_info() const;  // after build on a device
  // The call (its tensors and workspace validated by the caller; B requests).
  void execute(const PagedInputs& in, int64_t B, const TensorView& out_indices, void* workspace,
               CUstream stream) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace winnow::ops

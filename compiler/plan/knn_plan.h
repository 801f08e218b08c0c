// KnnPlan: the retrieval mode's tiling: passes of 64 queries, 128-key tiles in
// chunks of 128 bytes of d through a ring of stages, one CandidateList per query. Plain
// struct, printed into the cache key beside the canonical IR.
#pragma once
#include <string>

#include "compiler/plan/kernel_plan.h"

namespace winnow::plan {

struct KnnPlan {
  int dim = 768;
  ElemType elem = ElemType::F16;  // q and k (fp16 or bf16)
  int k = 128;
  bool materialize = false, sorted = false;
  int stages = 4;          // key-chunk ring stages
  int capacity = 4096;     // CandidateList entries per query
  int sample_cap = 0;      // sample slots per query
  int sample_keys = 0;     // keys sampled (0: the rule's, winnow::knn_sample)
  int ctas_per_sm = 1;     // CTAs of the persistent stream per SM (at most as fit)
  int rounds = 3;          // fallback rounds after the first filter
  bool radix = false;      // the rounds refine by histograms (winnow::kKnnRadixRounds of them)
  long stream_smem = 0, select_smem = 0;  // dynamic shared memory of the kernels
  long select_stage = 0;  // of select_smem, the staging (knn_select_stage_bytes)
  long long workspace_bytes() const;
};

// Why the spec cannot take the retrieval mode ("" when it can): one head, a dense window,
// fp16 or bf16 q and k of one type, d a multiple of 64 up to 1024, sm_90a, tensor cores
// allowed.
std::string knn_unsuited(const KernelSpec& spec, int window);

// A tuned point's knobs (0: the heuristic's): ring stages; list capacity per query (never
// below the default winnow::knn_capacity(k); rounded up to a multiple of 1024); keys
// sampled at least (never fewer than the rule's; whole 128-key tiles, at most
// winnow::kKnnMaxSampleCap); CTAs of the stream per SM (the stages are then chosen to fit
// that many in the SM's shared memory). The first two only add margin to the first
// threshold and the fallback rounds, which a smaller list or sample would take away.
struct KnnKnobs {
  int stages = 0, capacity = 0, sample_keys = 0, ctas_per_sm = 0;
};

// The plan for the spec within `smem_limit` bytes of shared memory per block; false (and
// `why`) when none fits. knobs.stages > 0: exactly that many ring stages, or false when
// they do not fit; 0: the most that fit.
bool choose_knn_plan(const KernelSpec& spec, long smem_limit, KnnPlan* out, std::string* why,
                     const KnnKnobs& knobs = {});

std::string describe(const KnnPlan& plan);

}  // namespace winnow::plan

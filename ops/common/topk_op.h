// The topk op: one fused score + exact top-k kernel for any score IR, and the
// materialize mode (write the fp32 score matrix) that is its baseline and self-check.
#pragma once
#include <cuda.h>

#include <cstdint>
#include <memory>
#include <string>

#include "compiler/backend/arch.h"
#include "compiler/backend/backend.h"
#include "compiler/ir/ir.h"
#include "compiler/plan/kernel_plan.h"
#include "ops/common/errors.h"
#include "ops/common/tensor.h"
#include "runtime/cuda_driver.h"
#include "runtime/kernel_cache.h"

namespace winnow::ops {

enum class Mode { TopK, Materialize };
enum class WindowKind { Dense, Ranges, Causal };
const char* window_name(WindowKind w);  // "dense", "ranges", "causal"

inline constexpr int kMaxK = 8192;
inline constexpr int kMaxHeads = 128;
inline constexpr int kMaxHeadDim = 1024;

struct TopkProblem {
  ir::Expr score;  // verified and canonicalised by TopkOp::create
  std::string expression;  // the text `score` was parsed from (empty: built), for messages
  int heads = 64;
  int head_dim = 128;
  DType q_dtype = DType::E4M3;
  DType k_dtype = DType::E4M3;
  Mode mode = Mode::TopK;
  int k = 2048;
  bool sorted = false;
  bool absolute_indices = false;
  // Top-k outputs report -score (the C API's WINNOW_OUTPUT_DISTANCE for l2: the squared
  // distance, padding +inf); the selection is unchanged.
  bool negate_scores = false;
  WindowKind window = WindowKind::Dense;
  int causal_ratio = 1;
  int64_t causal_offset = 0;
  backend::Arch arch;          // the target; ops::device_arch() gives the device's
  // Per row; 0: default. The retrieval mode (ops/common/knn_retrieval.h) reads both as lower
  // bounds of its own (its list's capacity, rounded up to a multiple of 1024, and the keys
  // it samples, never below its defaults), and sample_size 0 keeps a problem out of it.
  int candidate_capacity = 0;
  int sample_size = -1;        // -1: default (max(2048, k)), 0: none
  bool allow_tensor_cores = true;  // false: CUDA-core dots (tests cover both paths)
  // Parts each row's window is cut into, scored by different CTAs and merged exactly:
  // 0 chooses per call (enough parts to fill the GPU when there are few rows), 1 never
  // splits, n splits in at most n parts.
  int key_splits = 0;
  // An upper bound on the workspace (0: none). The plan then keeps fewer CTAs resident
  // (each takes more row blocks in turn); build() fails if one CTA does not fit.
  size_t max_workspace_bytes = 0;
  // A tuned point's fixed rows per CTA, key tile and bins (0: the heuristic's), and a cap
  // on resident CTAs per SM (0: as many as fit; the retrieval mode's persistent stream:
  // 0 is one per SM, n is n where they fit). ops/topk/topk_space.h lists the valid ones.
  plan::PlanKnobs plan_knobs;
  int max_ctas_per_sm = 0;
  // Sharded keys (ops/shard/shard_merge.h): K's rows are the global keys
  // [shard_key_offset, shard_key_offset + K's rows) of total_keys. Windows (ranges, causal)
  // are then in global key numbers, and the outputs are too (absolute: the global key;
  // relative: from the window's global start), so that the ranks' lists merge exactly.
  // total_keys 0: not sharded (the offset must be 0 too).
  int64_t shard_key_offset = 0;
  int64_t total_keys = 0;
  bool sharded() const { return total_keys > 0; }
};

// How many CTAs a workspace of `bound` bytes (0: no bound) holds, given `resident` CTAs
// the device could run at once, `per_cta` bytes each and `fixed` bytes besides. 0 when
// not even one fits.
int ctas_within_workspace(size_t bound, int resident, size_t per_cta, size_t fixed);

// Inputs of one call, indexed like winnowInput_t.
struct TopkInputs {
  TensorView q, k, weights, key_scale, window_start, window_end;
  // Optional int32 [n] candidate keys scored first as part of every row's sample (e.g.
  // the previous chunk's selection, ascending as unsorted outputs are). Exact whatever it
  // holds: entries outside a row's window, negative, >= num_keys or not above every
  // earlier entry (duplicates, unsorted parts) are ignored; n may not exceed
  // TopkOp::max_sample_hint (the smaller of the candidate capacity and 2 next_pow2(k)).
  TensorView sample_hint;
  // Optional fp32 [num_keys]: |k|^2 of every key, for score programs that read ksq (l2,
  // cosine). Given, the kernels read it instead of summing the squares of each key tile
  // (that sum makes l2 markedly slower than ip); its values are used as
  // they are (a wrong norm gives the scores of that norm, NaN and inf included).
  TensorView key_norms;
};

// Per-call settings beside the tensors (the streaming driver changes them per chunk).
struct CallOptions {
  int64_t causal_offset = -1;        // position of row 0 for causal windows; -1: the problem's
  bool accumulate_counters = false;  // keep adding to the fallback / bad-window counters
                                     // (the caller cleared them) instead of clearing them
  // Keys an average window holds, for choosing the key splits (-1: from the problem and
  // the shapes; the paged decode op gives its per-request maximum, which the host knows
  // while the windows themselves are on the device).
  int64_t window_keys = -1;
};

class TopkOp {
 public:
  // Validates the problem (throws InvalidArgument / NotSupported with a message that
  // names the field and the limit) and generates the kernel source. ctx may be null
  // (compile only).
  static std::unique_ptr<TopkOp> create(const TopkProblem& p, const rt::Context* ctx);
  ~TopkOp();

  const TopkProblem& problem() const;
  const std::string& source() const;        // the generated .cu stub
  // True when the op runs the retrieval mode (ops/common/knn_retrieval.h) instead of the topk
  // kernel: one head, dense window, fp16 / bf16 on sm_90a, unless WINNOW_KNN_RETRIEVAL=0.
  bool retrieval_mode() const;
  std::string plan_text() const;            // the kernel spec and plan, one line each
  const std::string& content_key() const;   // SHA-256 cache key (after build)
  // What the topk kernel's cache key covers besides the request (the canonical IR and the
  // plan text): build()'s program, for module_id (meaningless in the retrieval mode).
  std::string cache_program() const;
  // What build() hands the backend (also for `winnow compile --emit ptx`).
  backend::CompileRequest compile_request() const;
  // Compiles (or loads from the cache) and, when there is a context, loads the module.
  void build(rt::CubinCache& cache, const backend::Backend& be);
  bool built() const;
  const std::vector<char>& cubin() const;
  size_t workspace_bytes() const;  // needs build() with a context
  size_t counter_offset() const;   // two uint32 counters (fallback rows, bad windows)
  // Entries a sample hint may hold: min(candidate capacity, 2 next_pow2(k)).
  int64_t max_sample_hint() const;
  // "N CTAs/SM x M SMs, R registers, S bytes of shared memory" (after build on a device).
  std::string launch_info() const;
  // The key splits execute will use for `rows` rows whose windows hold `window_keys`
  // keys on average (the key count for dense windows).
  int key_splits_for(int64_t rows, int64_t window_keys) const;
  int max_ctas() const;  // resident CTAs of the persistent grid (after build on a device)
  int rows_per_cta() const;
  // The topk kernel's plan (meaningless in the retrieval mode).
  const plan::KernelPlan& kernel_plan() const;
  // "full": build() compiles the whole kernel before it returns (the two-tier build was
  // removed, docs/decisions/0041), so execute always launches the full build.
  std::string build_state() const;
  // Kept for winnowPlanFinishBuild: nothing is left to finish after build(); true.
  bool finish_build();
  // Validates the tensors against the problem, then launches on `stream`. Never
  // allocates, synchronises or compiles.
  void execute(const TopkInputs& in, const TensorView* out_indices,
               const TensorView* out_scores, void* workspace, size_t workspace_bytes,
               CUstream stream, const CallOptions& options = {}) const;

 private:
  struct Impl;
  explicit TopkOp(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The arch of the context's device ("sm_90a" for 9.0, "sm_100a" for 10.0, ...).
backend::Arch device_arch(const rt::Context& ctx);

}  // namespace winnow::ops

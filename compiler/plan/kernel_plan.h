// KernelSpec: what a generated kernel is specialised on (shape, types, select rule).
// KernelPlan: how it is tiled and launched. Plain structs; both are printed into the
// cache key beside the canonical IR.
#pragma once
#include <string>

namespace winnow::plan {

// Matches the kElem* codes of templates/common/element_decode.cuh.
enum class ElemType { F32 = 0, F16 = 1, BF16 = 2, E4M3 = 3 };
const char* elem_name(ElemType t);

enum class WindowCode { Dense = 0, Ranges = 1, Causal = 2 };

struct KernelSpec {
  int heads = 64;
  int head_dim = 128;
  ElemType q_type = ElemType::E4M3;
  ElemType k_type = ElemType::E4M3;
  bool materialize = false;
  int k = 2048;
  WindowCode window = WindowCode::Dense;
  bool sorted = false;
  bool absolute = false;
  bool reads_norms = false;        // qsq / ksq: computed from the fp32 tiles
  bool allow_tensor_cores = true;  // false: CUDA-core dots even where mma.sync could run
  bool head_sum_form = false;      // post(sum_h term(dot(h), w[h])): codegen::head_sum_node
  bool wgmma_target = false;       // the target runs warpgroup MMA (sm_90a)
};

// Fixed choices that replace choose_plan's heuristics (a tuned point, ops/topk/topk_space.h);
// 0 keeps the heuristic. A knob that cannot be met makes choose_plan fail with a reason.
struct PlanKnobs {
  int rows_per_cta = 0;  // 1..16
  int key_tile = 0;      // 16, 32, 64 or 128 (128 needs tensor cores)
  int bins = 0;          // a multiple of 32, 32..2048
  // Key-chunk ring stages of the retrieval mode (compiler/plan/knn_plan.h), 2..8; the topk
  // kernel's stages are fixed by its configuration (SmemLayout::k_stages).
  int stages = 0;
  // 1: the pipelined form of the wgmma path where the plan has one (KernelPlan::pipelined);
  // 0: the heuristic's.
  int pipeline = 0;
  bool operator==(const PlanKnobs&) const = default;
};

struct KernelPlan {
  int rows_per_cta = 1;   // query rows sharing each key tile
  int key_tile = 64;      // keys scored per tile (a multiple of 4)
  // Threads per CTA: 256 of math, plus on the wgmma path one producer warp (TMA loads
  // into the key-tile ring, templates/topk/topk_kernel.cuh), a producer warpgroup when pipelined.
  int threads = 256;
  int math_threads() const;
  int bins = 2048;        // ThresholdBins per row (a multiple of 32; choose_plan: 512 or 2048)
  int capacity = 8192;    // CandidateBuffer entries per row
  int sample = 2048;      // keys scored first for the initial threshold (0: none)
  // Element type the tensor cores read (mma.sync), as its ElemType code; 0: CUDA cores.
  int mma = 0;
  // Heads summed next to the mma accumulators (needs mma, head_sum_form, heads % 16 == 0).
  bool head_sums = false;
  // Head sums on warpgroup MMA (sm_90a wgmma): keys as the 64-row A operand, the block's
  // (row, head) pairs as one 128-column B operand, both 128-byte swizzled in shared memory.
  bool wgmma = false;
  // The wgmma path's pipelined form: one CTA of 384 threads per SM (a producer warpgroup
  // whose first warp loads), setmaxnreg moving registers to the two math warpgroups for the
  // tile loops, each with two accumulator sets (tile t + 1's MMAs under tile t's head sums)
  // and the row block's weights in registers (templates/topk/key_tile_loop.cuh).
  bool pipelined = false;
  long smem_bytes() const;  // from templates/common/smem_layout.cuh
  int k = 2048;           // copy of the spec's k (the workspace depends on it)
 private:
  long smem_ = 0;
  friend bool choose_plan(const KernelSpec&, long, int, int, KernelPlan*, std::string*,
                          const PlanKnobs&);
};

// Chooses a plan for the spec that fits `smem_limit` bytes of shared memory per block.
// candidate_capacity / sample_size: the caller's overrides (0 / -1: defaults).
// knobs: fixed rows per CTA, key tile or bins instead of the heuristic's (default: none).
// Returns false (and leaves `why`) when no plan fits.
bool choose_plan(const KernelSpec& spec, long smem_limit, int candidate_capacity,
                 int sample_size, KernelPlan* out, std::string* why,
                 const PlanKnobs& knobs = {});

// Canonical text of spec + plan, for the cache key and `winnow compile --emit ir`.
std::string describe(const KernelSpec& spec, const KernelPlan& plan);

}  // namespace winnow::plan

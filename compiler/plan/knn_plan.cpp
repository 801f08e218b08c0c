#include "compiler/plan/knn_plan.h"

#include <fmt/format.h>

#include <algorithm>

#include "knn/knn_workspace.cuh"

namespace winnow::plan {

long long KnnPlan::workspace_bytes() const {
  return winnow::KnnWorkspace{capacity, sample_cap}.bytes();
}

std::string knn_unsuited(const KernelSpec& s, int window) {
  if (s.heads != 1) return fmt::format("{} heads (the retrieval mode scores one)", s.heads);
  if (window != int(WindowCode::Dense)) return "a window other than dense";
  if (s.q_type != s.k_type || (s.k_type != ElemType::F16 && s.k_type != ElemType::BF16))
    return "q and k not both fp16 or both bf16";
  if (s.head_dim % 64 != 0 || s.head_dim > 1024) return "d not a multiple of 64 up to 1024";
  if (!s.wgmma_target) return "a target without wgmma (sm_90a)";
  if (!s.allow_tensor_cores) return "tensor cores not allowed";
  return "";
}

bool choose_knn_plan(const KernelSpec& s, long smem_limit, KnnPlan* out, std::string* why,
                     const KnnKnobs& knobs) {
  const int stages = knobs.stages;
  KnnPlan p;
  p.dim = s.head_dim;
  p.elem = s.k_type;
  p.k = s.materialize ? 1 : s.k;
  p.materialize = s.materialize;
  p.sorted = s.sorted;
  p.capacity = winnow::knn_capacity(p.k);
  // Never fewer entries than the default: the fallback rounds converge by the ratio of
  // the capacity to k (knn_select.cuh), so a smaller list is less exact-safe, not faster.
  if (knobs.capacity > p.capacity) p.capacity = (knobs.capacity + 1023) / 1024 * 1024;
  p.sample_cap = winnow::kKnnMaxSampleCap;
  if (knobs.sample_keys > 0) {
    const int tile = winnow::kKnnKeyTile;
    p.sample_keys = std::min((knobs.sample_keys + tile - 1) / tile * tile, p.sample_cap);
  }
  p.select_stage = winnow::knn_select_stage_bytes(p.k, smem_limit);
  p.select_smem = winnow::knn_select_smem_bytes(p.k) + p.select_stage;
  // Top-k's fallback rounds refine by radix histograms (knn_select.cuh): every row is
  // answered exactly whatever the order of the keys (docs/decisions/0045).
  if (!p.materialize) {
    if (p.select_stage < long(winnow::kKnnDigits) * 4) {
      *why = fmt::format("the retrieval mode's radix fallback stages {} bytes of histogram; the "
                         "select kernel has {} to spare", winnow::kKnnDigits * 4, p.select_stage);
      return false;
    }
    p.radix = true;
    p.rounds = winnow::kKnnRadixRounds;
  }
  p.ctas_per_sm = std::max(knobs.ctas_per_sm, 1);
  if (p.ctas_per_sm > 1) {
    // That many stream CTAs share the SM's shared memory (the per-block limit plus the
    // 1 KB the driver reserves per block is the SM's).
    smem_limit = std::min(smem_limit, (smem_limit + 1024) / p.ctas_per_sm - 1024);
  }
  if (stages > 0 && (stages < 2 || stages > winnow::kKnnMaxStages)) {
    *why = fmt::format("stages = {} is outside 2..{}", stages, winnow::kKnnMaxStages);
    return false;
  }
  for (int st = stages > 0 ? stages : winnow::kKnnMaxStages; st >= (stages > 0 ? stages : 2);
       --st) {
    const long bytes = winnow::KnnStreamSmem{p.dim * 2, st}.bytes();
    if (bytes <= smem_limit) {
      p.stages = st;
      p.stream_smem = bytes;
      *out = p;
      return true;
    }
  }
  const int least = stages > 0 ? stages : 2;
  *why = fmt::format("d = {} with {} stages needs {} bytes of shared memory for the retrieval "
                     "mode, more than the {} the target allows{}",
                     s.head_dim, least, winnow::KnnStreamSmem{p.dim * 2, least}.bytes(),
                     smem_limit,
                     p.ctas_per_sm > 1 ? fmt::format(" each of {} CTAs per SM", p.ctas_per_sm) : "");
  return false;
}

std::string describe(const KnnPlan& p) {
  return fmt::format(
      "knn dim={} elem={} topk={} mode={} sorted={} stages={} capacity={} sample_cap={} "
      "sample_keys={} ctas_per_sm={} rounds={} radix={} stream_smem={} select_smem={}\n",
      p.dim, elem_name(p.elem), p.k, p.materialize ? "materialize" : "topk", p.sorted,
      p.stages, p.capacity, p.sample_cap, p.sample_keys, p.ctas_per_sm, p.rounds, p.radix,
      p.stream_smem, p.select_smem);
}

}  // namespace winnow::plan

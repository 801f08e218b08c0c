#include "compiler/plan/kernel_plan.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/smem_layout.cuh"

namespace winnow::plan {

const char* elem_name(ElemType t) {
  switch (t) {
    case ElemType::F32: return "fp32";
    case ElemType::F16: return "fp16";
    case ElemType::BF16: return "bf16";
    case ElemType::E4M3: return "fp8_e4m3";
  }
  return "?";
}

int KernelPlan::math_threads() const {
  return pipelined ? threads - 128 : wgmma ? threads - 32 : threads;
}

long KernelPlan::smem_bytes() const {
  // The spec's heads and dim are not stored here; choose_plan fills smem via layout().
  return smem_;
}

// mma.sync needs q and k of one 8- or 16-bit type, whole 16-row fragments of (row, head)
// and whole k-steps of d; norms are computed from fp32 tiles, so they keep CUDA cores.
static int tensor_core_type(const KernelSpec& s, int rows) {
  if (!s.allow_tensor_cores || s.reads_norms || s.q_type != s.k_type) return 0;
  if (s.q_type == ElemType::F32) return 0;
  if ((rows * s.heads) % 16 != 0) return 0;
  if (s.head_dim % (s.q_type == ElemType::E4M3 ? 32 : 16) != 0) return 0;
  return int(s.q_type);
}

bool choose_plan(const KernelSpec& spec, long smem_limit, int candidate_capacity,
                 int sample_size, KernelPlan* out, std::string* why, const PlanKnobs& knobs) {
  KernelPlan p;
  p.k = spec.k;
  // Few heads: several rows share each key tile, so the CTA has enough dot products; on
  // the tensor cores 128 (row, head) pairs make one 128-row operand, and each key tile
  // read from L2 serves twice the rows.
  p.rows_per_cta = std::clamp(64 / std::max(spec.heads, 1), 1, 8);
  // Up to 16 rows, so that even one head fills a 16-row mma fragment (retrieval).
  const int mma_rows = std::clamp(128 / std::max(spec.heads, 1), 1, 16);
  if (tensor_core_type(spec, mma_rows) != 0) p.rows_per_cta = mma_rows;
  if (knobs.rows_per_cta > 0) p.rows_per_cta = knobs.rows_per_cta;
  p.capacity = candidate_capacity > 0 ? candidate_capacity : std::max(4 * spec.k, 4096);
  // The first threshold is the sample's 2 k ns / n-th best (templates/topk/topk_kernel.cuh).
  p.sample = sample_size >= 0 ? sample_size : std::max(2048, spec.k);
  // A fixed knob is tried alone: a point that does not fit is refused, not replaced.
  const int last_rows = knobs.rows_per_cta > 0 ? p.rows_per_cta : 1;
  for (int rows = p.rows_per_cta; rows >= last_rows; rows /= 2) {
    p.mma = tensor_core_type(spec, rows);
    // q fragments of a 16-head block stay in registers: 256 bytes of d at most.
    const int mma_bytes = p.mma == 0 ? 0 : (p.mma == int(ElemType::E4M3) ? 1 : 2);
    p.head_sums = p.mma != 0 && spec.head_sum_form && spec.heads % 16 == 0 &&
                  spec.head_dim * mma_bytes <= 256;
    // wgmma: two warpgroups of 64 keys each against one 128-column operand of (row, head)
    // pairs, whole 128-byte swizzle rows of d.
    p.threads = 256;
    p.wgmma = p.head_sums && spec.wgmma_target && rows * spec.heads == 128 &&
              (spec.head_dim * mma_bytes) % 128 == 0;
    for (int tile : {128, 64, 32, 16}) {
      if (knobs.key_tile > 0 && tile != knobs.key_tile) continue;
      if (tile == 128 && !p.mma) continue;  // larger tiles only pay off with cheap dots
      if (p.wgmma && tile != 128) p.wgmma = false;  // 64 keys a warpgroup
      p.threads = p.wgmma ? 256 + 32 : 256;            // + the producer warp
      p.pipelined = p.wgmma && knobs.pipeline == 1;
      if (p.pipelined) p.threads = 256 + 128;          // + the producer warpgroup
      // 512 bins above 8 rows (16 rows' histograms of 2048 would fill shared memory), and
      // on the wgmma path with 2 or 4 rows where the buffer is checked every 16 tiles (a
      // quarter of the capacity holds 16 key tiles: dsa's k = 2048): there 512 were 2-6 %
      // faster than 2048 (a gate refresh sums a quarter of the bins; H = 32 gains a fourth
      // stage; docs/decisions/0057). 8 rows (H = 16) keep 2048: not measured, and 512
      // would take them from one CTA per SM to two. Else 2048.
      const bool checks16 = p.capacity / 4 >= 16 * tile;
      p.bins = rows > 8 || (p.wgmma && checks16 && rows <= 4) ? 512 : 2048;
      if (knobs.bins > 0) p.bins = knobs.bins;
      winnow::SmemLayout L{rows, spec.heads, spec.head_dim, tile, p.bins,
                           mma_bytes, p.head_sums, p.wgmma, 0};
      if (L.bytes() <= smem_limit) {
        p.rows_per_cta = rows;
        p.key_tile = tile;
        p.smem_ = L.bytes();
        *out = p;
        return true;
      }
    }
  }
  if (!(knobs == PlanKnobs{})) {
    *why = fmt::format("rows_per_cta = {}, key_tile = {}, bins = {} (0: heuristic) do not fit "
                       "{} bytes of shared memory for heads * head_dim = {} * {}",
                       knobs.rows_per_cta, knobs.key_tile, knobs.bins, smem_limit, spec.heads,
                       spec.head_dim);
    return false;
  }
  winnow::SmemLayout L{1, spec.heads, spec.head_dim, 16, p.bins};
  *why = fmt::format("heads * head_dim = {} * {} needs {} bytes of shared memory per block, "
                     "more than the {} the target allows",
                     spec.heads, spec.head_dim, L.bytes(), smem_limit);
  return false;
}

std::string describe(const KernelSpec& s, const KernelPlan& p) {
  return fmt::format(
      "spec heads={} dim={} q={} k={} mode={} topk={} window={} sorted={} absolute={} "
      "tensor_cores={}\n"
      "plan rows_per_cta={} key_tile={} threads={} bins={} capacity={} sample={} mma={} "
      "head_sums={} wgmma={} pipelined={} smem={}\n",
      s.heads, s.head_dim, elem_name(s.q_type), elem_name(s.k_type),
      s.materialize ? "materialize" : "topk", s.k, int(s.window), s.sorted, s.absolute,
      s.allow_tensor_cores,
      p.rows_per_cta, p.key_tile, p.threads, p.bins, p.capacity, p.sample, p.mma,
      p.head_sums, p.wgmma, p.pipelined, p.smem_bytes());
}

}  // namespace winnow::plan

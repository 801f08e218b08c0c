// Key splits: each CTA stores its part's selection; the last CTA of a row block merges the
// parts exactly and writes the outputs.
#pragma once
#include "ptx/load_cg.cuh"
#include "ptx/mma_sync.cuh"
#include "select/radix_select.cuh"
#include "topk/topk_output.cuh"
#include "topk/topk_params.cuh"
#include "topk/topk_smem.cuh"

namespace winnow {

// Key splits: stores this CTA's per-row selections; the last CTA of the row block to
// finish merges every part's selection exactly (radix select over the RankKeys, which
// are unique) and writes the outputs. Returns after the merge or after storing.
template <class C>
__device__ void store_or_merge_parts(const TopkParams& p, const TopkSmem<C>& s, int block,
                                     int split, u64* ws) {
  constexpr int R = C::kRows, K = C::kTopK, KP = next_pow2(C::kTopK);
  constexpr TopkWorkspace W = workspace_of<C>();
  const int splits = p.key_splits;
  u64* parts = p.partials;
  for (int r = 0; r < R; ++r) {
    const u64* sel = ws + W.selection(r);
    u64* dst = parts + W.partial(block, splits, split, r);
    for (int i = threadIdx.x; i < KP; i += C::kThreads) dst[i] = sel[i];
  }
  __threadfence();  // the parts are visible before the count says so
  __syncthreads();
  u32* last = s.radix + kScratchMergeLast;
  if (threadIdx.x == 0) *last = atomicAdd(&p.block_done[block], 1u) == u32(splits - 1);
  __syncthreads();
  if (!*last) return;
  __threadfence();
  for (int r = 0; r < R; ++r) {
    const int row = block * R + r;
    if (row >= p.rows) break;
    RowState& st = s.rows[r];
    u64* sel = ws + W.selection(r);
    // Other CTAs wrote the parts: read past L1 (ld.global.cg). Zero entries are padding.
    auto scan = [&](auto f) {
      for (int sp = 0; sp < splits; ++sp) {
        const u64* src = parts + W.partial(block, splits, sp, r);
        for (int i = threadIdx.x; i < KP; i += C::kThreads) {
          const u64 v = load_cg(src + i);
          if (v != 0ull) f(v);
        }
      }
    };
    u32* real = s.radix + kScratchMergeReal;
    if (threadIdx.x == 0) *real = 0;
    __syncthreads();
    scan([&](u64) { atomicAdd(real, 1u); });
    __syncthreads();
    gather_best<C>(s, u32(K), *real, scan, sel, KP, &st.selected);
    write_row<C>(p, s, r, row, sel);
  }
}

}  // namespace winnow

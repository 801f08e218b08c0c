// The shared-memory view of the topk kernel: per-row state, the layout constants of a
// config, and the pointers into one CTA's shared memory (templates/common/smem_layout.cuh does
// the arithmetic, for the host too).
#pragma once
#include "common/element_decode.cuh"
#include "select/rank_order.cuh"
#include "common/smem_layout.cuh"
#include "ptx/tma.cuh"
#include "topk/topk_workspace.cuh"

namespace winnow {

// Per-row state in shared memory (16 words, see SmemLayout::rows_off).
struct RowState {
  int start, end;       // the part of the window this CTA scores [start, end)
  int bad;              // the window ran past num_keys: output all -1
  int gate;             // lowest bin still appended to the CandidateBuffer
  u32 count;            // keys appended (may exceed the capacity)
  u32 overflow;         // the buffer dropped a key, or kept fewer than k: exact fallback
  u32 sample_max;       // largest order key in the sample
  u32 selected;         // keys written to the selection list
  ThresholdBins bins;   // 3 words
  int origin;           // the whole window's start, local numbers (relative indices count
                        // from it; negative when it starts in an earlier shard)
  float gate_score;     // gate_edge_score(bins, gate): scores below it are out at once
  int pad[3];
};

// Bytes per element of the tiles the tensor cores read (0: the CUDA-core path).
template <class C>
struct MmaBytes {
  static constexpr int value = C::kMma == 0 ? 0 : (C::kMma == kElemE4M3 ? 1 : 2);
};

// The stage count is chosen here, in a constant expression, and stored: every offset the
// kernel reads then folds to a constant (a choice left to run time made clang emit the
// layout's arithmetic as a call over a local copy: local memory in the llvm backend's PTX).
template <class C>
__host__ __device__ constexpr SmemLayout layout_of() {
  constexpr int kStages = SmemLayout{C::kRows, C::kHeads, C::kDim, C::kKeyTile, C::kBins,
                                     MmaBytes<C>::value, C::kHeadSums, C::kWgmma, 0}
                              .k_stages();
  return SmemLayout{C::kRows, C::kHeads, C::kDim, C::kKeyTile, C::kBins,
                    MmaBytes<C>::value, C::kHeadSums, C::kWgmma, kStages};
}

// The workspace of a config (templates/topk/topk_workspace.cuh).
template <class C>
__host__ __device__ constexpr TopkWorkspace workspace_of() {
  return TopkWorkspace{C::kRows, C::kCapacity, next_pow2(C::kTopK)};
}

template <class C>
struct TopkSmem {
  float* q;       // [R][H][D]
  float* k;       // [KT][D+1]
  float* kscale;  // [KT] (per stage on the tensor-core path)
  float* ksq;     // [KT]
  float* dots;    // [R][KT][H+1]
  float* w;       // [R][H]
  float* qsq;     // [R][H]
  u32* hist;      // [R][bins]
  u32* radix;     // [256] + scratch
  RowState* rows; // [R]
  // The wgmma path's key-tile ring (SmemLayout::barriers_off): full[stage], empty[stage],
  // the key tensor map, and the uses of the ring so far (the same count in every thread:
  // producer and math warps walk the same tiles).
  u64* ring_full;
  u64* ring_empty;
  const TmaMap* kmap = nullptr;
  mutable unsigned ring_pos = 0;
  __device__ explicit TopkSmem(unsigned char* base) {
    constexpr SmemLayout L = layout_of<C>();
    float* f = reinterpret_cast<float*>(base);
    q = f;
    k = f + L.k_off();
    kscale = f + L.kscale_off();
    ksq = f + L.ksq_off();
    dots = f + L.dots_off();
    w = f + L.w_off();
    qsq = f + L.qsq_off();
    hist = reinterpret_cast<u32*>(f + L.hist_off());
    radix = reinterpret_cast<u32*>(f + L.radix_off());
    rows = reinterpret_cast<RowState*>(f + L.rows_off());
    ring_full = reinterpret_cast<u64*>(f + L.barriers_off());
    ring_empty = ring_full + L.k_stages();
  }
};

// threadIdx.x, hidden from the optimizer where it is read: offsets derived from it are
// computed there, not hoisted to the kernel's start and kept in registers across every
// loop of the persistent grid (the filter's wgmma accumulators leave too few registers
// for that, and they spill). The empty asm changes nothing: the value is threadIdx.x.
__device__ __forceinline__ unsigned unhoisted_thread_index() {
  unsigned t = threadIdx.x;
  asm volatile("" : "+r"(t));
  return t;
}

// The shared memory of key-tile stage `stage` (SmemLayout::k_stages() of them).
template <class C>
__device__ __forceinline__ TopkSmem<C> with_stage(const TopkSmem<C>& s, int stage) {
  constexpr SmemLayout L = layout_of<C>();
  TopkSmem<C> t = s;
  t.k = s.k + stage * L.k_stage_words();
  t.kscale = s.kscale + stage * C::kKeyTile;
  return t;
}

}  // namespace winnow

// The loop over key tiles: on the wgmma path a producer warp fills a ring of stages by
// TMA or cp.async gathers (mbarrier full/empty handshakes) and the math warpgroups score
// them; on the other paths cp.async double buffering or plain loads.
#pragma once
#include "ptx/mbarrier.cuh"
#include "ptx/mma_sync.cuh"
#include "common/ring_slot.cuh"
#include "topk/tile_scoring.cuh"
#include "ptx/tma.cuh"
#include "topk/topk_params.cuh"
#include "topk/topk_smem.cuh"
#include "ptx/wgmma_tiles.cuh"

namespace winnow {

// The threads that read the scores and run the filter's steps between tiles (gate
// refreshes, buffer checks, compaction): the math threads (every thread but the wgmma
// path's producer warp or warpgroup).
template <class C>
__host__ __device__ constexpr int visitor_threads() {
  return C::kMathThreads;
}
// This thread's index among them (0 .. visitor_threads() - 1 for one of them).
template <class C>
__device__ __forceinline__ unsigned visitor_index() {
  return threadIdx.x;
}
// Named barriers of the topk kernel (0 is __syncthreads): the math threads' (1), the one
// after which the pipelined form's producer warpgroup takes its registers back (4).
enum : int { kMathBarrier = 1, kRegsReturned = 4 };

// The visitors synchronise among themselves: inside the tile loop the producer warp runs
// ahead of them.
template <class C>
__device__ __forceinline__ void visitor_sync() {
  if constexpr (C::kWgmma) {
    named_barrier_sync<kMathBarrier, C::kMathThreads>();
  } else {
    __syncthreads();
  }
}

// The wgmma path's producer warp: the last warp of the CTA, after the math warpgroups (in
// the pipelined form, C::kPipelined, the first warp of the producer warpgroup, the other
// three idling through the tile loops).
template <class C>
__device__ __forceinline__ bool is_producer_warp() {
  return C::kWgmma && int(threadIdx.x) >= C::kMathThreads;
}

// The pipelined form's register split (one CTA of 384 threads per SM: 168 registers each
// at launch): the producer warpgroup gives 128 back for the tile loops and the two math
// warpgroups take 64 more each (128 x 40 + 256 x 232 = 64512 of the SM's 65536); both
// return to 168 for the CTA-wide steps (sample ranks, select, sort) between.
enum : int { kPipelineLaunchRegs = 168, kPipelineProducerRegs = 40, kPipelineMathRegs = 232 };
// Launch registers of a form that moves registers (0: none).
template <class C>
__host__ __device__ constexpr int launch_regs_of() {
  return C::kPipelined ? kPipelineLaunchRegs : 0;
}

// The pipelined math loop (C::kPipelined): two accumulator sets, so that tile t + 1's MMAs
// run while tile t's head sums and visits do (DeepGEMM's and FlashAttention-3's overlap
// within one warpgroup); the row block's weights in registers for the whole list. Each
// tile's stage is released once its MMAs are complete and its key scales read, before its
// head sums; the ring's order, the visits' order and every score's bits are those of the
// plain loop.
template <class C, class S, class TileKeys, class Visit, class AfterTile>
__device__ void pipelined_math_tiles(const TopkSmem<C>& s, unsigned pos0, int tiles,
                                     TileKeys tile_keys, Visit visit, AfterTile after_tile) {
  constexpr int STAGES = layout_of<C>().k_stages(), H = C::kHeads, R = C::kRows;
  const int t4 = threadIdx.x & 3, key0 = wgmma_first_key<C>();
  float2 wreg[R][H / 8];
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int jj = 0; jj < H / 8; ++jj)
      wreg[r][jj] = *reinterpret_cast<const float2*>(s.w + r * H + jj * 8 + 2 * t4);
  }
  const unsigned full0 = shared_address(s.ring_full), empty0 = shared_address(s.ring_empty);
  RingSlot issued = ring_slot(pos0, STAGES), done = issued;
  float acc0[64], acc1[64];
  auto issue = [&](float (&d)[64]) {
    mbarrier_wait(full0 + 8u * unsigned(issued.stage), issued.parity);
    wgmma_issue_tile<C>(wgmma_stage_descs<C>(with_stage<C>(s, issued.stage)), 0, d);
    issued.advance(STAGES);
  };
  auto finish = [&](float (&d)[64], int t) {
    wgmma_pin(d);  // its reads stay after the wait before this call
    const TopkSmem<C> st = with_stage<C>(s, done.stage);
    float ks0 = C::kUsesKScale ? st.kscale[key0] : 1.0f;
    float ks1 = C::kUsesKScale ? st.kscale[key0 + 8] : 1.0f;
    keep_in_registers(ks0, ks1);
    mbarrier_arrive(empty0 + 8u * unsigned(done.stage));  // after this thread's reads of it
    done.advance(STAGES);
    wgmma_tile_visits<C, S>(d, ks0, ks1, [&](int r, int jj) { return wreg[r][jj]; },
                            tile_keys(t), visit);
    after_tile();
  };
  // Whole pairs in the loop, the last one or two tiles after it: each accumulator set is
  // defined only by its MMAs (no select of old and new values at the loop's edges, which
  // ptxas would answer by serialising the MMAs).
  if (tiles == 0) return;
  issue(acc0);  // tile 0
  int t = 0;
  for (; t + 2 < tiles; t += 2) {
    issue(acc1);  // tile t + 1 under tile t's head sums
    wgmma_wait<1>();
    finish(acc0, t);
    issue(acc0);  // tile t + 2 under tile t + 1's
    wgmma_wait<1>();
    finish(acc1, t + 1);
  }
  if (t + 1 < tiles) {
    issue(acc1);
    wgmma_wait<1>();
    finish(acc0, t);
    wgmma_wait<0>();
    finish(acc1, t + 1);
  } else {
    wgmma_wait<0>();
    finish(acc0, t);
  }
}

// The plain math loop: one accumulator set per math warpgroup, the stage's descriptors and
// key-scale address a constant step from stage 0's (shared-window addresses computed once,
// not per tile). Each tile: wait for its stage, issue its MMAs, read its key scales,
// release it once the MMAs are complete, then sum heads and visit. The weights are read
// from shared memory per tile: at the 96 registers of two CTAs per SM, holding the row
// block's (32 a thread) spills. The ring's order, the visits' order and every score's bits
// are those of the pipelined loop.
template <class C, class S, class TileKeys, class Visit, class AfterTile>
__device__ void plain_math_tiles(const TopkSmem<C>& s, unsigned pos0, int tiles,
                                 TileKeys tile_keys, Visit visit, AfterTile after_tile) {
  constexpr int STAGES = layout_of<C>().k_stages(), H = C::kHeads;
  constexpr int KT = C::kKeyTile;
  const int t4 = threadIdx.x & 3, key0 = wgmma_first_key<C>();
  auto weight = [&](int r, int jj) {
    return *reinterpret_cast<const float2*>(s.w + r * H + jj * 8 + 2 * t4);
  };
  const WgmmaTileDescs descs = wgmma_tile_descs<C>(s);
  const unsigned full0 = shared_address(s.ring_full), empty0 = shared_address(s.ring_empty);
  const unsigned kscale0 = shared_address(s.kscale + key0);
  RingSlot slot = ring_slot(pos0, STAGES);
  for (int t = 0; t < tiles; ++t, slot.advance(STAGES)) {
    const unsigned stage = unsigned(slot.stage);
    mbarrier_wait(full0 + 8u * stage, slot.parity);
    float d[64];
    wgmma_issue_tile<C>(descs, slot.stage, d);
    float ks0 = 1.0f, ks1 = 1.0f;
    if constexpr (C::kUsesKScale) {
      ks0 = ld_shared_f32(kscale0 + stage * unsigned(KT * 4));
      ks1 = ld_shared_f32(kscale0 + stage * unsigned(KT * 4) + 32u);
    }
    keep_in_registers(ks0, ks1);
    wgmma_wait<0>();
    wgmma_pin(d);
    mbarrier_arrive(empty0 + 8u * stage);  // after this thread's reads of the stage
    wgmma_tile_visits<C, S>(d, ks0, ks1, weight, tile_keys(t), visit);
    after_tile();
  }
}

// The producer warp fills ring stage `stage` with the keys key_of(0..KT-1) and signals
// its `full` barrier (33 arrivals: one per lane, one more from lane 0).
// base >= 0: the tile is the contiguous keys base.. (key_of(j) is base + j or -1 past the
// window): one TMA box per 128-byte column of d, swizzled as wgmma reads it, rows past the
// key count zero-filled; the key scales by cp.async (any alignment), each lane arriving
// once its copies land. base < 0: a gathered tile (the sample): cp.async of every 16-byte
// chunk into its swizzled place, then, since wgmma reads through the async proxy, each
// lane waits for its copies and fences before it arrives; it does so for a gathered tile
// after issuing the next one's copies (`gathered`: the stage whose arrivals are still
// owed, -1 none; publish_gathered settles the last).
template <class C>
__device__ __forceinline__ void publish_gathered(const TopkSmem<C>& s, int& gathered, int pending) {
  if (gathered < 0) return;
  if (pending == 0) {
    copies_landed<0>();
  } else {
    copies_landed<1>();
  }
  fence_async_smem();
  mbarrier_arrive(s.ring_full + gathered);
  if ((threadIdx.x & 31) == 0) mbarrier_arrive(s.ring_full + gathered);
  gathered = -1;
}

template <class C, class KeyOf>
__device__ void produce_key_tile(const TopkParams& p, const TopkSmem<C>& s, int stage, int base,
                                 KeyOf key_of, int& gathered) {
  constexpr int D = C::kDim, KT = C::kKeyTile, RB = D * MmaBytes<C>::value, VPR = RB / 16;
  const int lane = threadIdx.x & 31;
  const TopkSmem<C> st = with_stage<C>(s, stage);
  char* dst = reinterpret_cast<char*>(st.k);
  u64* full = s.ring_full + stage;
  // Ordering of the key scales (compute-sanitizer racecheck reports these writes against
  // the math warps' reads of the same stage; by the ring they cannot overlap): this use of
  // the stage is written only after the `empty` wait, i.e. after every math warp arrived
  // once done reading the previous use, and it is read only after the `full` phase, which
  // completes only when each lane's copies have landed (the arrival below is made by the
  // copy engine after them). The [gpu] cases with a random scale per key (the DSA shape,
  // the C API cases) would see a stale scale as a score far off the CPU reference.
  if (C::kUsesKScale) {
    for (int j = lane; j < KT; j += 32) {
      const int key = key_of(j);
      copy_async_4(st.kscale + j, p.kscale + (key >= 0 ? key : 0), key >= 0);
    }
  }
  if (base >= 0) {
    mbarrier_arrive_after_copies(full);
    if (lane == 0) {
      mbarrier_arrive_expect_tx(full, unsigned(KT * RB));
#pragma unroll
      for (int a = 0; a < RB / 128; ++a) {
        tma_load_2d(dst + swizzled_at<KT>(0, a * 128), s.kmap, full, a * 128, base);
      }
    }
  } else {
    // Lane l gathers slots l, l + 32, ...: one key_of (a division for strided keys) per
    // slot, then the slot's VPR chunks.
    for (int j = lane; j < KT; j += 32) {
      const int key = key_of(j);
      const char* row = static_cast<const char*>(p.k) +
                        (key >= 0 ? (long long)key * p.k_row_stride * MmaBytes<C>::value : 0);
#pragma unroll
      for (int v = 0; v < VPR; ++v) copy_async_16(dst + swizzled_chunk<KT>(j, v), row + v * 16, key >= 0);
    }
    copy_async_commit();
    publish_gathered<C>(s, gathered, 1);  // the previous gathered tile, if any
    gathered = stage;
  }
}

// The producer warp's loop over a tile list: each stage refilled once its `empty` phase
// completes (produce_key_tile), the last gathered tile's arrivals settled at the end;
// after_produced(t), by the whole warp, once tile t's loads are issued.
template <class C, class TileKeys, class TileBase, class AfterProduced>
__device__ __forceinline__ void produce_tiles(const TopkParams& p, const TopkSmem<C>& s,
                                              unsigned pos0, int tiles, TileKeys tile_keys,
                                              TileBase tile_base, AfterProduced after_produced) {
  constexpr int STAGES = layout_of<C>().k_stages();
  // Stores of the CTA-wide steps before (the sort, the gathers) reached this region through
  // the generic proxy; the copy engine writes it next.
  fence_async_smem();
  int gathered = -1;
  RingSlot slot = ring_slot(pos0, STAGES);
  for (int t = 0; t < tiles; ++t, slot.advance(STAGES)) {
    mbarrier_wait(s.ring_empty + slot.stage, slot.parity ^ 1u);
    produce_key_tile<C>(p, s, slot.stage, tile_base(t), tile_keys(t), gathered);
    after_produced(t);
  }
  publish_gathered<C>(s, gathered, 0);
}

// Whether the wgmma path's producer warp runs score_tile_list's after_produced steps: in
// the plain form it idles between its loads, while a step run by a math warp holds back
// that warp's whole warpgroup at its next MMA. The pipelined form's producer warpgroup
// runs at 40 registers, so there the steps go to the math warps (after_tile).
template <class C>
__host__ __device__ constexpr bool producer_runs_steps() {
  return C::kWgmma && !C::kPipelined;
}

// Visits the keys of `tiles` tiles, tile t's slot j holding key tile_keys(t)(j) (negative:
// an empty slot), calling after_tile() (by the visitors) after each. tile_base(t) is
// the first key of tile t when its keys are contiguous (key_of(j) = base + j inside the
// window), else -1. Where producer_runs_steps<C>(), the producer warp calls
// after_produced(t) once tile t's loads are issued (as many as STAGES tiles ahead of the
// visitors). On the tensor-core paths the next tiles load while this one is scored.
// Called by the whole CTA; returns after a CTA barrier.
template <class C, class S, class TileKeys, class TileBase, class Visit, class AfterTile,
          class AfterProduced>
__device__ void score_tile_list(const TopkParams& p, const TopkSmem<C>& s, int tiles,
                                TileKeys tile_keys, TileBase tile_base, Visit visit,
                                AfterTile after_tile, AfterProduced after_produced) {
  if constexpr (C::kWgmma) {
    // Warp-specialised: the producer warp fills a ring of k_stages() stages (waiting for
    // each stage's `empty` barrier), the math warpgroups wait for `full`, score, and
    // release the stage (one arrival per thread) as soon as their MMAs have read it, before
    // the head sums and the visits. No CTA barrier per tile: each
    // warpgroup runs as far ahead as the ring allows.
    static_assert(!C::kPipelined || C::kThreads == C::kMathThreads + 128,
                  "the pipelined form: two math warpgroups and a producer warpgroup");
    // The pipelined form's producer warpgroup moves registers; its first warp loads, the
    // other three idle through the tile loops.
    constexpr bool kProducerGroup = C::kPipelined;
    const unsigned pos0 = s.ring_pos;
    s.ring_pos = pos0 + unsigned(tiles);
    if (is_producer_warp<C>()) {
      if constexpr (C::kPipelined) setmaxnreg_dec<kPipelineProducerRegs>();
      if (!kProducerGroup || int(threadIdx.x) < C::kMathThreads + 32) {
        if constexpr (producer_runs_steps<C>()) {
          produce_tiles<C>(p, s, pos0, tiles, tile_keys, tile_base, after_produced);
        } else {
          produce_tiles<C>(p, s, pos0, tiles, tile_keys, tile_base, [](int) {});
        }
      }
      if constexpr (kProducerGroup) {
        // Only once every math warp has given its extra registers back (barrier
        // kRegsReturned): an idle producer warp that asked at once would take back the
        // registers its own decrease had just freed, and math warps still waiting in
        // setmaxnreg_inc would never get theirs (a hang, seen at dsa-prefill T = 64K).
        named_barrier_sync<kRegsReturned, C::kThreads>();
        setmaxnreg_inc<kPipelineLaunchRegs>();
      }
    } else if constexpr (C::kPipelined) {
      setmaxnreg_inc<kPipelineMathRegs>();
      pipelined_math_tiles<C, S>(s, pos0, tiles, tile_keys, visit, after_tile);
      setmaxnreg_dec<kPipelineLaunchRegs>();
      named_barrier_sync<kRegsReturned, C::kThreads>();
    } else {
      // Each math warpgroup issues its MMAs as soon as its stage is ready (a ping-pong of
      // the two, FlashAttention-3's turns on the tensor cores, was slower and removed: two
      // CTAs per SM already interleave four warpgroups).
      plain_math_tiles<C, S>(s, pos0, tiles, tile_keys, visit, after_tile);
    }
    __syncthreads();  // the stages and s.q are read before anyone rewrites them
  } else if (C::kMma) {
    if (tiles > 0) load_key_tile<C>(p, s, 0, tile_keys(0));
    int stage = 0;
    for (int t = 0; t < tiles; ++t, stage ^= 1) {
      if (t + 1 < tiles) {
        load_key_tile<C>(p, s, stage ^ 1, tile_keys(t + 1));
      } else {
        copy_async_commit();  // an empty group: "all but the newest" is still this tile
      }
      copy_async_wait<1>();
      __syncthreads();
      score_loaded_tile<C, S>(p, s, stage, tile_keys(t), visit);
      after_tile();
    }
  } else {
    for (int t = 0; t < tiles; ++t) {
      load_key_tile<C>(p, s, 0, tile_keys(t));
      __syncthreads();
      score_loaded_tile<C, S>(p, s, 0, tile_keys(t), visit);
      after_tile();
    }
  }
}

// Visits every key of [begin, end) in tiles, calling after_tile() after each (and
// after_produced(t) as score_tile_list says).
template <class C, class S, class Visit, class AfterTile, class AfterProduced>
__device__ void score_tiles(const TopkParams& p, const TopkSmem<C>& s, int begin, int end,
                            Visit visit, AfterTile after_tile, AfterProduced after_produced) {
  constexpr int KT = C::kKeyTile;
  const int tiles = end > begin ? (end - begin + KT - 1) / KT : 0;
  score_tile_list<C, S>(
      p, s, tiles,
      [begin, end](int t) {
        const int t0 = begin + t * KT;
        return [t0, end](int j) { return t0 + j < end ? t0 + j : -1; };
      },
      [begin](int t) { return begin + t * KT; }, visit, after_tile, after_produced);
}

// Visits every key of [begin, end) in tiles.
template <class C, class S, class Visit>
__device__ void score_range(const TopkParams& p, const TopkSmem<C>& s, int begin, int end,
                            Visit visit) {
  score_tiles<C, S>(p, s, begin, end, visit, [] {}, [](int) {});
}

}  // namespace winnow

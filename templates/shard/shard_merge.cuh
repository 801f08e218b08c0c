// Sharded top-k: each rank's fused top-k over its shard of the keys gives k
// (global index, score) per row; the ranks' lists are all-gathered and merged here into the
// top-k over every key, exactly: a key of the global top k is in its own shard's top k, and
// the merge ranks by the same RankKeys (rank_order.cuh), so the result equals one GPU's over
// all keys bit for bit (ties to the smaller global index, NaN first, -1 padding).
#pragma once
#include "select/bitonic_sort.cuh"
#include "knn/knn_select.cuh"
#include "select/radix_select.cuh"
#include "select/rank_order.cuh"
#include "shard/shard_merge_params.cuh"

namespace winnow {

#if defined(__CUDA_ARCH__)
// Packs one row of one list per CTA (blockIdx.x = q * rows + row).
__device__ void shard_pack(const ShardMergeParams& p) {
  const int q = blockIdx.x / p.rows, row = blockIdx.x % p.rows;
  const int* idx = p.local_indices + q * p.indices_rank_stride + row * p.indices_row_stride;
  const float* sc = p.local_scores + q * p.scores_rank_stride + row * p.scores_row_stride;
  u64* dst = p.packed + ((long long)q * p.rows + row) * p.k;
  for (int i = threadIdx.x; i < p.k; i += kShardPackThreads) {
    const int index = idx[i];
    if (index < -1) atomicAdd(p.counters + kShardMalformed, 1u);
    dst[i] = shard_candidate(index, sc[i]);
  }
}

// Merges row blockIdx.x of every rank's candidates and writes the row's outputs as the
// topk kernel does (templates/topk/topk_output.cuh): sorted by score or ascending by index,
// -1 and -inf after the chosen.
__device__ void shard_merge(const ShardMergeParams& p, unsigned char* smem) {
  const KnnSelectSmem s(smem);
  const int row = blockIdx.x, kp = next_pow2(p.k);
  const long long rank_stride = (long long)p.rows * p.k;
  const u64* first = p.gathered + (long long)row * p.k;
  auto scan = [&](auto f) {
    for (int q = 0; q < p.ranks; ++q) {
      const u64* list = first + q * rank_stride;
      for (int i = threadIdx.x; i < p.k; i += kKnnSelectThreads) {
        const u64 v = list[i];
        if (v != 0ull) f(v);
      }
    }
  };
  u32* count = s.radix + kScratchMergeReal;
  if (threadIdx.x == 0) *count = 0;
  __syncthreads();
  u32 mine = 0;
  scan([&](u64) { ++mine; });
  atomicAdd(count, mine);
  __syncthreads();
  const u32 real = *count, need = min(real, u32(p.k));
  gather_best<KnnSelectCta>(s, u32(p.k), real, scan, s.sel, kp, s.taken);
  const u32 taken = *s.taken;
  if (threadIdx.x == 0 && taken != need) atomicAdd(p.counters + kShardDuplicateRows, 1u);
  sort_desc<KnnSelectCta>(s.sel, kp, p.sorted == 0);
  const u32 chosen = taken < need ? taken : need;
  for (int i = threadIdx.x; i < p.k; i += kKnnSelectThreads) {
    const bool real_entry = u32(i) < chosen;
    const u64 v = real_entry ? s.sel[i] : 0ull;
    p.out_indices[row * p.out_indices_stride + i] = real_entry ? rank_key_index(v) : -1;
    if (p.out_scores)
      p.out_scores[row * p.out_scores_stride + i] =
          real_entry ? order_key_score(rank_key_order(v)) : -__int_as_float(0x7F800000);
  }
}
#endif

}  // namespace winnow

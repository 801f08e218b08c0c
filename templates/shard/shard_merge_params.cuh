// The shard merge's launch parameters, counters and candidate form
// (templates/shard/shard_merge.cuh), shared by the host (ops/shard/shard_merge.cpp, the CPU reference)
// and the kernels; plain types only.
#pragma once
#include "select/rank_order.cuh"

namespace winnow {

// One entry of a rank's output as a merge candidate: its RankKey, or 0 (none) for padding
// (any negative index). Scores come back from the RankKey unchanged: the kernel's outputs
// are order_key_score(order_key(s)) already, which maps to itself.
WINNOW_HD u64 shard_candidate(int index, float score) {
  return index < 0 ? 0ull : rank_key(order_key(score), index);
}

// Counter words at the start of the merge workspace.
enum : int {
  kShardDuplicateRows = 0,  // rows whose candidates held one key twice: shards overlap
  kShardMalformed = 1,      // entries dropped: index below -1 (no output of winnow)
  kShardCounterWords = 2
};

struct ShardMergeParams {
  // This rank's lists ([rows, k]), or every rank's ([ranks, rows, k]) when one process
  // holds them all (loopback): entry (q, row, i) at q * rank_stride + row * row_stride + i.
  const int* local_indices;
  const float* local_scores;
  long long indices_rank_stride, indices_row_stride;
  long long scores_rank_stride, scores_row_stride;
  int pack_ranks;      // lists to pack: 1, or ranks (loopback)
  int pad0;
  u64* packed;         // [pack_ranks][rows][k] candidates: the send buffer, or `gathered`
  const u64* gathered; // [ranks][rows][k]: what the all-gather wrote
  int* out_indices;
  long long out_indices_stride;
  float* out_scores;   // optional
  long long out_scores_stride;
  unsigned* counters;  // kShardCounterWords words, zero before the launch
  int rows, k, ranks, sorted;
};

inline constexpr int kShardPackThreads = 256;

}  // namespace winnow

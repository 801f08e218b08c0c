// The retrieval mode's launch parameters and per-query state (templates/knn/knn_stream.cuh,
// knn_select.cuh), shared by the host and the kernels.
#pragma once
#include "common/portable.cuh"

namespace winnow {

// One query's state in the workspace across the launches of a pass.
struct KnnRowState {
  u64 threshold;  // RankKeys at or above it are appended to the query's CandidateList
  u32 count;      // keys that passed (may exceed the capacity: then the list overflowed)
  u32 retry;      // the exact fallback runs another round for this query
  u32 fixed;      // the radix refinement's known top bits of the threshold (knn_refine)
  u32 pad[3];
};

// Counter words at the start of the workspace: [0] rows that took the exact fallback and
// [1] bad windows (always 0 here; TopkOp's layout), [2] rows still unresolved after the
// last round (their output is all -1: never silently wrong), [3 + r] rows that round r
// (1..rounds) reruns.
enum : int { kKnnFallbackRows = 0, kKnnUnresolvedRows = 2, kKnnRoundRows = 3 };

struct KnnParams {
  const void* q;  // this pass's first query; [queries][d], fp16 or bf16 as the keys
  long long q_row_stride;  // elements
  const float* w;          // [queries] (row stride w_row_stride) when the score reads w
  long long w_row_stride;
  const float* kscale;     // [num_keys] when the score reads kscale
  const float* ksq;        // [num_keys] |k|^2 given by the caller, or null: summed here
  int* out_indices;        // this pass's first row
  long long out_indices_stride;
  float* out_scores;       // optional (materialize: the [queries][num_keys] matrix)
  long long out_scores_stride;
  unsigned* counters;
  KnnRowState* rows;       // [kKnnQueries]
  u32* hist;               // [kKnnQueries][kKnnDigits] (radix fallback rounds)
  u64* lists;              // [kKnnQueries][capacity] RankKeys
  u32* samples;            // [kKnnQueries][sample_cap] order keys of the sample's scores
  int queries;             // in this pass (<= kKnnQueries)
  int num_keys;
  int key_tiles;           // ceil(num_keys / kKnnKeyTile)
  int sample_pass;         // 1: score the sample tiles into `samples` instead of filtering
  int sample_tiles, sample_stride, sample_valid, sample_rank, sample_cap;
  int capacity;
  int round;               // 0: the first filter; r > 0: fallback round r
  int key_offset;          // sharded keys: added to every index written (0: not sharded)
  int stage_bytes;         // the threshold and select kernels' staging (knn_select_stage_bytes)
  int negate_scores;       // 1: out_scores holds -score (output_score)
};

}  // namespace winnow

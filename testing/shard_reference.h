// The CPU reference of sharded top-k (issue 19): a rank's output as the fused kernel writes
// it, from fp32 scores over its shard, and the exact merge of the ranks' outputs by the
// rule of templates/shard/shard_merge.cuh (the same candidates, shard_candidate, the same order),
// written with a sort instead of a radix select.
#pragma once
#include <cstdint>
#include <vector>

namespace winnow::ops {

// One rank's (or the merged) output: [rows][k] indices (-1 padded) and scores (-inf padded).
struct TopkLists {
  int rows = 0, k = 0;
  std::vector<int> indices;
  std::vector<float> scores;
};

// What the fused top-k writes for scores [rows][total] over the keys [first, first + n)
// with absolute (global) indices: the exact top k by the rank order of
// templates/select/rank_order.cuh, best first (sorted) or ascending by index, the scores as
// order_key_score(order_key(s)) (NaN canonical, -0 as +0).
TopkLists fused_topk_lists(const std::vector<float>& scores, int rows, int64_t total,
                           int64_t first, int64_t n, int k, bool sorted);

// The merge of ranks' lists (each [rows][k], the same rows and k) into the top k.
TopkLists merge_shard_lists(const std::vector<TopkLists>& ranks, bool sorted);

}  // namespace winnow::ops

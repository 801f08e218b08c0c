#include "testing/shard_reference.h"

#include <algorithm>
#include <functional>
#include <stdexcept>

#include "testing/reference.h"
#include "shard/shard_merge_params.cuh"

namespace winnow::ops {
namespace {

// Writes the chosen RankKeys (any order) as one output row.
void write_row(std::vector<u64> chosen, int k, bool sorted, int* indices, float* scores) {
  if (sorted)
    std::sort(chosen.begin(), chosen.end(), std::greater<u64>());
  else
    std::sort(chosen.begin(), chosen.end(), [](u64 a, u64 b) {
      return rank_key_index(a) < rank_key_index(b);
    });
  for (int i = 0; i < k; ++i) {
    const bool real = size_t(i) < chosen.size();
    indices[i] = real ? rank_key_index(chosen[i]) : -1;
    scores[i] = real ? order_key_score(rank_key_order(chosen[i])) : -bits_float(0x7F800000u);
  }
}

}  // namespace

TopkLists fused_topk_lists(const std::vector<float>& scores, int rows, int64_t total,
                           int64_t first, int64_t n, int k, bool sorted) {
  TopkLists out{rows, k, std::vector<int>(size_t(rows) * k), std::vector<float>(size_t(rows) * k)};
  for (int r = 0; r < rows; ++r) {
    const float* row = scores.data() + size_t(r) * total;
    std::vector<u64> chosen;
    for (int64_t key : select_topk_row(row, first, first + n, k))
      chosen.push_back(rank_key(order_key(row[key]), int(key)));
    write_row(chosen, k, sorted, out.indices.data() + size_t(r) * k,
              out.scores.data() + size_t(r) * k);
  }
  return out;
}

TopkLists merge_shard_lists(const std::vector<TopkLists>& ranks, bool sorted) {
  if (ranks.empty()) throw std::invalid_argument("merge_shard_lists: no ranks");
  const int rows = ranks[0].rows, k = ranks[0].k;
  TopkLists out{rows, k, std::vector<int>(size_t(rows) * k), std::vector<float>(size_t(rows) * k)};
  for (int r = 0; r < rows; ++r) {
    std::vector<u64> all;
    for (const TopkLists& l : ranks) {
      if (l.rows != rows || l.k != k)
        throw std::invalid_argument("merge_shard_lists: ranks differ in rows or k");
      for (int i = 0; i < k; ++i) {
        const size_t at = size_t(r) * k + i;
        const u64 c = shard_candidate(l.indices[at], l.scores[at]);
        if (c != 0) all.push_back(c);
      }
    }
    std::sort(all.begin(), all.end(), std::greater<u64>());
    if (all.size() > size_t(k)) all.resize(size_t(k));
    write_row(all, k, sorted, out.indices.data() + size_t(r) * k,
              out.scores.data() + size_t(r) * k);
  }
  return out;
}

}  // namespace winnow::ops

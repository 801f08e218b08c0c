// The CPU reference of block-select and block-sparse attention (ops/block/block_problem.h
// states the semantics): block scores in double from the decoded inputs, the select
// rule on any row of scores, the CSR index, and attention restricted to an index.
#pragma once
#include <cstdint>
#include <vector>

#include "ops/block/block_problem.h"

namespace winnow::ops {

// Decoded (exact fp32) copies of q [L][heads][d], k and v [L][kv_heads][d].
struct BlockHostInputs {
  int64_t seq_len = 0;
  std::vector<float> q, k, v;
};

// kbar [kv_heads][nb][d]: fp32 sums in key order, x 1/128, rounded to bf16 (as the device).
std::vector<float> reference_pooled_keys(const BlockProblem& p, const BlockHostInputs& in);

// S(h, I, J) in double, at h * triangle(nb) + triangle(I) + J.
std::vector<double> reference_block_scores(const BlockProblem& p, const BlockHostInputs& in);

// The kept blocks of query block I (ascending) under `rule`, from the row's scores
// S(I, 0..I). The threshold is alpha * max in the scores' own type, as the device does
// in fp32.
template <class Score>
std::vector<int> select_blocks(const Score* row, int I, int blocks, const BlockSelectRule& rule);

struct BlockIndex {
  std::vector<int> offsets;  // [heads * nb + 1]
  std::vector<int> indices;
  int64_t kept() const { return offsets.empty() ? 0 : offsets.back(); }
  // Kept blocks over visible blocks.
  double density(int heads, int64_t blocks) const;
};
// The CSR index of every (head, query block) from scores laid out as above.
template <class Score>
BlockIndex build_block_index(const BlockProblem& p, int64_t blocks, const Score* scores,
                             const BlockSelectRule& rule);

// out [L][heads][d] (fp32) = causal attention of each row over the keys of its listed blocks,
// in double. Rows [row_begin, row_end) only (others are left 0).
std::vector<float> reference_block_attention(const BlockProblem& p, const BlockHostInputs& in,
                                             const BlockIndex& index, int64_t row_begin,
                                             int64_t row_end);

}  // namespace winnow::ops

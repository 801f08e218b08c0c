// Inputs of block-select as PERF.md defines them: `random` (q, k, v ~ N(0, 1), bf16) and
// `structured` (each KV head g has a unit vector u_g; its queries get q += 8 u_g; the sink
// block and about 1/16 of the key blocks get k += b u_g over the whole block, with logit
// gain 8 b / sqrt(d) of 8 for the sink and U(2, 8) for each stripe). Generated in parallel
// at memory speed (the bench needs 3 GB at 256K), reproducible from the seed.
#pragma once
#include <cstdint>
#include <vector>

#include "testing/block_reference.h"

namespace winnow::ops {

enum class BlockInput { Random, Structured };
const char* block_input_name(BlockInput t);  // "random", "structured"

struct BlockData {
  int64_t seq_len = 0;
  std::vector<uint16_t> q, k, v;  // bf16 codes, [L][heads][d] and [L][kv_heads][d]
  std::vector<int> stripes;       // structured: [kv_heads][nb] 1 where k got the boost
  BlockHostInputs decoded() const;
};

// bf16 codes -> their fp32 values.
std::vector<float> decode_bf16_codes(const std::vector<uint16_t>& codes);

BlockData make_block_data(const BlockProblem& p, int64_t seq_len, BlockInput kind,
                          uint64_t seed);

}  // namespace winnow::ops

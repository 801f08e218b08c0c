// The problem shared by block-select and block-sparse attention (FlashPrefill-style
// long-context prefill), its select rule with the defaults in one place, and their checks.
//
// Semantics (one definition; testing/block_reference.cpp implements it on the CPU):
//   L tokens in nb = L / 128 blocks; H query heads share Hkv KV heads (GQA: query head h
//   reads KV head h / (H / Hkv)); d the head dim; q [L, H, d], k and v [L, Hkv, d], bf16.
//   Pooled keys:  kbar[g][J] = bf16( (k[128 J][g] + ... + k[128 J + 127][g]) * (1/128) ),
//                 summed in fp32 in key order.
//   Block score program (winnow score IR over one pooled key): s(i, J) = (q[i][h] . kbar[g][J])
//                 * (1 / sqrt(d)), for the key blocks J <= I of query i in block I
//                 (causal at block granularity, the diagonal included).
//   Per query row: m_i = max_J s(i, J), p(i, J) = exp(s(i, J) - m_i) / sum_J' exp(s(i, J') - m_i).
//   Block score:  S(h, I, J) = sum over the 128 rows i of block I of p(i, J)  (in [0, 128]).
//   Select rule threshold(alpha): keep J iff S(h, I, J) >= alpha * max_J' S(h, I, J'), or J is
//                 a must-keep block: a sink (J < sink_blocks), in the local window
//                 (J > I - local_blocks: always the diagonal), or I is one of the last
//                 `last_blocks` query blocks (those attend densely). Then, while fewer than
//                 min(min_blocks, I + 1) blocks are kept, the best remaining block is added
//                 (higher S first, ties to the smaller J).
//   Output: a CSR index, row r = h * nb + I: offsets [H nb + 1], indices [offsets[H nb]]
//   holding the kept J of each row in ascending order. Density = offsets[H nb] / (H nb (nb + 1) / 2).
//   alpha = 0 keeps every visible block (dense causal attention); alpha = 1 keeps the maxima
//   (all of them on ties) and the must-keep blocks.
//   Attention: out[i][h] = softmax over the keys t of the kept blocks of row (h, I), t <= i,
//   of (q[i][h] . k[t][g]) / sqrt(d), times v[t][g].
#pragma once
#include <cstdint>

#include "compiler/backend/arch.h"
#include "compiler/plan/block_plan.h"
#include "ops/common/errors.h"
#include "ops/common/tensor.h"
#include "block/block_params.cuh"

namespace winnow::ops {

inline constexpr int kBlockSize = winnow::kBlockTokens;

struct BlockProblem {
  int heads = 32;
  int kv_heads = 8;
  int head_dim = 128;
  int64_t max_seq_len = 262144;  // sizes the on-chip score row (4 bytes per block)
  backend::Arch arch;
  // Block attention on the sm_90a wgmma kernel (templates/block/block_attention_wgmma.cuh): 1 on,
  // 0 off (the mma.sync kernel), -1: as WINNOW_BLOCK_ATTENTION_WGMMA says, on where it is
  // unset (the default: much faster than the mma.sync kernel); on any
  // other arch, and for a shape the wgmma plan cannot hold, the mma.sync kernel runs.
  int attention_wgmma = -1;
  // block-select's score pass on the sm_90a wgmma kernel (templates/block/block_score_wgmma.cuh:
  // the same rule, scores equal to fp32 rounding): 1 on, 0 off (the mma.sync kernel), -1: as
  // WINNOW_BLOCK_SCORE_WGMMA says, on where it is unset (the default); on
  // any other arch, and for a shape the wgmma plan cannot hold, the mma.sync kernel runs.
  int score_wgmma = -1;
};

// The select rule of one call (a run-time argument: no recompilation per alpha). The
// defaults are FlashPrefill's: alpha 0.1, one sink block, the diagonal and one block
// before it, no dense tail, at least 4 blocks.
struct BlockSelectRule {
  float alpha = 0.1f;
  int sink_blocks = 1;
  int local_blocks = 2;  // >= 1: the diagonal block is always kept
  int last_blocks = 0;
  int min_blocks = 4;
};

// heads % kv_heads == 0, head_dim in {64, 128} (16-byte rows, register budget),
// 128 <= max_seq_len, a multiple of 128, whose CSR index (index_capacity) fits the int32
// offsets, arch sm_90a or sm_100a. `op` names the op in messages.
void validate_block_problem(const BlockProblem& p, const char* op = "block-select");
// A sequence length the plan takes: a positive multiple of 128 (else NotSupported) up to
// max_seq_len (else InvalidArgument). `name` is how messages call it ("q: L", "seq_len").
void validate_seq_len(const BlockProblem& p, int64_t seq_len, const char* name);
// alpha in [0, 1], sink_blocks, last_blocks, min_blocks >= 0, local_blocks >= 1.
void validate_block_rule(const BlockSelectRule& r);
// q [L, H, d] and k (and v when given) [L, Hkv, d], bf16, contiguous, on `device`,
// L a positive multiple of 128 up to max_seq_len. Returns L.
int64_t validate_block_inputs(const BlockProblem& p, int device, const TensorView& q,
                              const TensorView& k, const TensorView* v);
// offsets [H nb + 1] int32 and indices [>= capacity] int32, contiguous.
void validate_block_index(const BlockProblem& p, int device, int64_t seq_len,
                          const TensorView& offsets, const TensorView& indices);

// Blocks of a sequence, and the CSR capacity every rule fits (all visible blocks); for
// lengths validate_seq_len accepts (so it cannot overflow).
inline int64_t block_count(int64_t seq_len) { return seq_len / kBlockSize; }
inline int64_t index_capacity(const BlockProblem& p, int64_t seq_len) {
  return int64_t(p.heads) * winnow::triangle(block_count(seq_len));
}

// The kernels' spec and plan for the problem (throws NotSupported when they do not fit).
plan::BlockSpec block_spec(const BlockProblem& p);
plan::BlockPlan block_plan(const plan::BlockSpec& s, long smem_limit);

}  // namespace winnow::ops

// The tunable space of block-select's whole call (the index, then block-sparse attention):
// which kernel each step runs.
//
//   knob              values   meaning
//   score_wgmma       0, 1     the index's score pass: mma.sync, or the sm_90a wgmma pass
//                              (BlockProblem::score_wgmma)
//   attention_wgmma   0, 1     the attention: mma.sync, or the sm_90a wgmma kernel
//                              (BlockProblem::attention_wgmma)
// A wgmma point exists on sm_90a only, where the shape fits the device's shared memory
// (the plans' own checks, plan::use_wgmma_score / use_wgmma_attention); elsewhere the
// space is the baseline alone. Block size (128 tokens, FlashPrefill's) and the kernels'
// tiles are fixed by the kernels. The cost model ranks points only (the tuner times them
// all): FLOP of the two index passes and of the causal attention over every block at each
// kernel's rate (block_space.cpp's constants), attention x the expected density.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "ops/block/block_problem.h"

namespace winnow::rt {
class Context;
}

namespace winnow::ops {

// One point: 1 / 0 per knob (-1: the problem's own choice, the heuristic's).
struct BlockPoint {
  int score_wgmma = -1;
  int attention_wgmma = -1;
  // "score_wgmma=1 attention_wgmma=1": what the tuning database records.
  std::string text() const;
  bool operator==(const BlockPoint&) const = default;
};
std::optional<BlockPoint> parse_block_point(const std::string& text);

BlockPoint point_of(const BlockProblem& p);                     // the problem's own knobs
BlockProblem with_point(BlockProblem p, const BlockPoint& point);  // its knobs in place

struct BlockCandidate {
  BlockPoint point;  // as chosen: each knob 0 or 1, the baseline's included
  double predicted_us = 0;
  bool baseline = false;  // the problem's own point (the heuristic plan)
  std::string plan_text;  // the two ops' plan texts
};

struct BlockSpace {
  std::vector<BlockCandidate> candidates;  // the baseline first, then the other points
  std::size_t considered = 0, pruned = 0, duplicates = 0;
  std::string first_pruned_reason;
};

// Why `point` cannot run for `p` on ctx's device (null: the problem's arch, the default
// shared-memory limit); "" when it can.
std::string block_point_refusal(const BlockProblem& p, const BlockPoint& point,
                                const rt::Context* ctx);

// The points for sequences of `seq_len` tokens, pruned, deduplicated (the same kernels
// as an earlier point) and costed.
BlockSpace block_space(const BlockProblem& p, const rt::Context* ctx, int64_t seq_len);

}  // namespace winnow::ops

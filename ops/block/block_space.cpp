#include "ops/block/block_space.h"

#include <fmt/format.h>

#include <set>

#include "ops/block/block_attention.h"
#include "ops/block/block_select.h"
#include "runtime/knob_text.h"

namespace winnow::ops {

std::string BlockPoint::text() const {
  return fmt::format("score_wgmma={} attention_wgmma={}", score_wgmma, attention_wgmma);
}

std::optional<BlockPoint> parse_block_point(const std::string& text) {
  const auto knobs = rt::parse_knob_text(text);
  if (!knobs || knobs->size() != 2 || !knobs->count("score_wgmma") || !knobs->count("attention_wgmma"))
    return std::nullopt;
  BlockPoint p{knobs->at("score_wgmma"), knobs->at("attention_wgmma")};
  if (p.score_wgmma < -1 || p.score_wgmma > 1 || p.attention_wgmma < -1 || p.attention_wgmma > 1)
    return std::nullopt;
  return p;
}

BlockPoint point_of(const BlockProblem& p) { return BlockPoint{p.score_wgmma, p.attention_wgmma}; }

BlockProblem with_point(BlockProblem p, const BlockPoint& point) {
  p.score_wgmma = point.score_wgmma;
  p.attention_wgmma = point.attention_wgmma;
  return p;
}

namespace {

// The two ops of a point (throws what their creation throws: NotSupported where a wgmma
// kernel is asked for and the shape does not fit).
struct PointOps {
  std::unique_ptr<BlockSelectOp> select;
  std::unique_ptr<BlockAttentionOp> attention;
};
PointOps ops_of(const BlockProblem& p, const BlockPoint& point, const rt::Context* ctx) {
  const BlockProblem q = with_point(p, point);
  return {BlockSelectOp::create(q, ctx), BlockAttentionOp::create(q, ctx)};
}

bool marks(const std::string& plan_text, const char* mark) {
  return plan_text.find(mark) != std::string::npos;
}

// The cost model's rates (TFLOP/s; they rank points, the tuner times them): the index
// passes on wgmma and on mma.sync, the attention over every block (cuDNN's speed on wgmma,
// 0.4x of it on mma.sync); a structured prompt keeps ~3 % of the blocks.
constexpr double kScoreWgmmaTflops = 320, kScoreMmaTflops = 145;
constexpr double kAttentionWgmmaTflops = 580, kAttentionMmaTflops = 230;
constexpr double kExpectedDensity = 0.03;

double cost_us(const BlockProblem& p, bool score_wgmma, bool attention_wgmma, int64_t seq_len) {
  const double nb = double(block_count(seq_len)), pairs = nb * (nb + 1) / 2;
  const double rows = double(p.heads) * kBlockSize;
  const double index_flop = 2.0 * 2.0 * rows * pairs * double(p.head_dim);  // two passes
  const double attention_flop =
      4.0 * double(p.heads) * pairs * kBlockSize * kBlockSize * double(p.head_dim) * kExpectedDensity;
  return index_flop / ((score_wgmma ? kScoreWgmmaTflops : kScoreMmaTflops) * 1e6) +
         attention_flop / ((attention_wgmma ? kAttentionWgmmaTflops : kAttentionMmaTflops) * 1e6);
}

}  // namespace

std::string block_point_refusal(const BlockProblem& p, const BlockPoint& point,
                                const rt::Context* ctx) {
  try {
    ops_of(p, point, ctx);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

BlockSpace block_space(const BlockProblem& p, const rt::Context* ctx, int64_t seq_len) {
  BlockSpace space;
  std::set<std::string> seen;
  auto add = [&](const BlockPoint& point, bool baseline) {
    ++space.considered;
    PointOps o;
    try {
      o = ops_of(p, point, ctx);
    } catch (const std::exception& e) {
      ++space.pruned;
      if (space.first_pruned_reason.empty()) space.first_pruned_reason = e.what();
      return;
    }
    BlockCandidate c;
    c.plan_text = o.select->plan_text() + o.attention->plan_text();
    if (!seen.insert(c.plan_text).second) {
      ++space.duplicates;
      return;
    }
    // The point as the plans chose it (a -1 knob resolved, a wgmma knob the arch cannot
    // take back to 0).
    c.point.score_wgmma = marks(o.select->plan_text(), "score_wgmma=1") ? 1 : 0;
    c.point.attention_wgmma = marks(o.attention->plan_text(), "attention_wgmma=1") ? 1 : 0;
    c.baseline = baseline;
    c.predicted_us = cost_us(p, c.point.score_wgmma == 1, c.point.attention_wgmma == 1, seq_len);
    space.candidates.push_back(std::move(c));
  };
  add(point_of(p), true);
  for (int score : {1, 0})
    for (int attention : {1, 0}) add(BlockPoint{score, attention}, false);
  return space;
}

}  // namespace winnow::ops

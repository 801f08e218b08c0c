#include "ops/block/block_tuning.h"

#include <fmt/format.h>

#include "compiler/ir/ir.h"
#include "ops/block/block_attention.h"
#include "ops/block/block_select.h"
#include "ops/common/tuning_lookup.h"
#include "runtime/sha256.h"

namespace winnow::ops {

rt::TuningKey block_tuning_key(const BlockProblem& p, const rt::Context* ctx,
                               const backend::Backend& be, int64_t seq_len) {
  rt::TuningKey k = device_tuning_key("block-select", p.arch, ctx, be);
  k.score_hash = rt::sha256_hex(ir::print(block_score_program(p.head_dim)));
  k.dtypes = "q=bf16 k=bf16 v=bf16";
  k.window = "causal";
  // Query heads and head dim, rows = keys = L by bucket, then the KV heads.
  k.shape = rt::shape_bucket(p.heads, p.head_dim, seq_len, seq_len) + fmt::format(".g{}", p.kv_heads);
  k.k_bucket = 0;
  return k;
}

std::optional<TunedBlockPoint> find_tuned_block_point(const rt::TuningDb& db, const rt::TuningKey& key,
                                                      const BlockProblem& p, const rt::Context* ctx) {
  const auto found = find_tuned<BlockPoint>(
      db, key, "block-select plan", parse_block_point,
      [&](const BlockPoint& point) { return block_point_refusal(p, point, ctx); });
  if (!found) return std::nullopt;
  return TunedBlockPoint{found->first, found->second};
}

void BlockCandidateCompiler::compile(std::size_t i) {
  const BlockProblem q = with_point(problem_, candidates_[i].point);
  BlockSelectOp::create(q, nullptr)->build(cache_, be_);
  BlockAttentionOp::create(q, nullptr)->build(cache_, be_);
}

BlockTuneResult tune_block(const BlockSpace& space, rt::tune::CandidateCompiler& compiler,
                           rt::tune::Timer& timer, const rt::tune::Settings& settings,
                           const rt::TuningDb* db, const rt::TuningKey& key) {
  BlockTuneResult out;
  out.space = space;
  std::vector<rt::tune::Candidate> all;
  // One family per point: every point is timed before the budget goes to repeats.
  for (const BlockCandidate& c : out.space.candidates)
    all.push_back({c.point.text(), c.predicted_us, c.baseline, c.point.text()});
  out.tuned = rt::tune::tune_and_store(all, compiler, timer, settings, db, key);
  if (out.tuned.best >= 0) out.best = out.space.candidates[std::size_t(out.tuned.best)].point;
  return out;
}

}  // namespace winnow::ops

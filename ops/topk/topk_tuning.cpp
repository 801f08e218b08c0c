#include "ops/topk/topk_tuning.h"

#include <fmt/format.h>

#include "compiler/ir/ir.h"
#include "ops/common/names.h"
#include "ops/common/tuning_lookup.h"
#include "ops/topk/topk_device_timer.h"
#include "runtime/sha256.h"
#include "runtime/tuned_run.h"

namespace winnow::ops {

rt::TuningKey topk_tuning_key(const TopkProblem& p, const rt::Context* ctx,
                              const backend::Backend& be, const TopkShape& shape) {
  rt::TuningKey k = device_tuning_key("topk", p.arch, ctx, be);
  // The canonical program (as the op lowers it), so equal programs share plans.
  k.score_hash = rt::sha256_hex(ir::print(p.score));
  k.dtypes = fmt::format("q={} k={}", dtype_name(p.q_dtype), dtype_name(p.k_dtype));
  k.window = p.window == WindowKind::Causal ? fmt::format("causal/{}", p.causal_ratio)
                                            : window_name(p.window);
  k.shape = rt::shape_bucket(p.heads, p.head_dim, shape.rows, shape.num_keys);
  k.k_bucket = rt::k_bucket(p.k);
  return k;
}

std::optional<TunedPoint> find_tuned_point(const rt::TuningDb& db, const rt::TuningKey& key,
                                           const TopkProblem& p, const rt::Context* ctx) {
  const auto found = find_tuned<TopkPoint>(
      db, key, "plan", parse_topk_point,
      [&](const TopkPoint& point) { return topk_point_refusal(p, point, ctx); });
  if (!found) return std::nullopt;
  return TunedPoint{found->first, found->second};
}

void TopkCandidateCompiler::compile(std::size_t i) {
  // Compile only (no context): the cubin lands in the cache for the timer's build.
  std::unique_ptr<TopkOp> op = TopkOp::create(with_point(problem_, candidates_[i].point), nullptr);
  op->build(cache_, be_);
}

TopkTuneResult tune_topk(const TopkSpace& space, rt::tune::CandidateCompiler& compiler,
                         rt::tune::Timer& timer, const rt::tune::Settings& settings,
                         const rt::TuningDb* db, const rt::TuningKey& key) {
  TopkTuneResult out;
  out.space = space;
  std::vector<rt::tune::Candidate> all;
  for (const TopkCandidate& c : out.space.candidates)
    all.push_back({c.point.text(), c.predicted_us, c.baseline, c.family});
  rt::tune::TunedRun t = rt::tune::tune_and_store(all, compiler, timer, settings, db, key);
  out.run = std::move(t.run);
  out.baseline_us = t.baseline_us;
  out.timings = std::move(t.timings);
  if (t.best < 0) return out;
  out.best = out.space.candidates[std::size_t(t.best)].point;
  out.best_us = t.best_us;
  out.stored = t.stored;
  return out;
}

TopkTuneResult tune_topk_on_device(const TopkProblem& p, const rt::Context& ctx,
                                   rt::CubinCache& cache, const backend::Backend& be,
                                   const TopkShape& shape, const rt::tune::Settings& settings,
                                   const rt::TuningDb* db) {
  const TopkSpace space = topk_space(p, &ctx, shape);
  TopkCandidateCompiler compiler(p, space.candidates, cache, be);
  TopkDeviceTimer timer(p, space.candidates, ctx, cache, be, shape);
  return tune_topk(space, compiler, timer, settings, db, topk_tuning_key(p, &ctx, be, shape));
}

}  // namespace winnow::ops

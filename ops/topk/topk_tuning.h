// Tuning the topk op: its database key, the lookup at plan build, and one tuning run
// (ops/topk/topk_space.h's candidates through runtime/tuner.h, the winner stored). Plan build
// and `winnow tune` call these; execute never does.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "ops/topk/topk_space.h"
#include "runtime/tuner.h"
#include "runtime/tuning_db.h"

namespace winnow::ops {

// The database key of a problem at a shape, on ctx's device (null: "none", a
// compile-only context), compiled by `be`.
rt::TuningKey topk_tuning_key(const TopkProblem& p, const rt::Context* ctx,
                              const backend::Backend& be, const TopkShape& shape);

// The database's point for the key, when it has one that is still valid for the problem
// on this device; a stored point that is not (unparsable, or it breaks a limit now) is a
// miss with a warning.
struct TunedPoint {
  TopkPoint point;
  rt::TunedRecord record;
};
std::optional<TunedPoint> find_tuned_point(const rt::TuningDb& db, const rt::TuningKey& key,
                                           const TopkProblem& p, const rt::Context* ctx);

// Compiles candidate points in parallel (each through the cubin cache, so the timing
// step's build is a cache hit).
class TopkCandidateCompiler : public rt::tune::CandidateCompiler {
 public:
  TopkCandidateCompiler(const TopkProblem& p, const std::vector<TopkCandidate>& candidates,
                        rt::CubinCache& cache, const backend::Backend& be)
      : problem_(p), candidates_(candidates), cache_(cache), be_(be) {}
  void compile(std::size_t i) override;
 private:
  const TopkProblem& problem_;
  const std::vector<TopkCandidate>& candidates_;
  rt::CubinCache& cache_;
  const backend::Backend& be_;
};

struct TopkTuneResult {
  TopkSpace space;
  rt::tune::Result run;
  std::optional<TopkPoint> best;  // the winner, when one was timed
  double best_us = 0, baseline_us = 0;
  bool stored = false;  // written to the database
  std::string timings;  // every measurement, one line per candidate (the database's text)
};

// Tunes over `space` (topk_space of the problem at the shape): its cheapest
// settings.top_n points and the baseline compiled in parallel by `compiler` and timed by
// `timer` (both indexed by the space's candidates: TopkCandidateCompiler and
// ops/topk/topk_device_timer.h on a GPU), the winner stored under `key` in `db` (when given).
TopkTuneResult tune_topk(const TopkSpace& space, rt::tune::CandidateCompiler& compiler,
                         rt::tune::Timer& timer, const rt::tune::Settings& settings,
                         const rt::TuningDb* db, const rt::TuningKey& key);

// tune_topk on ctx's device with the CUDA-event timer: the whole of TUNE_ON_MISS.
TopkTuneResult tune_topk_on_device(const TopkProblem& p, const rt::Context& ctx,
                                   rt::CubinCache& cache, const backend::Backend& be,
                                   const TopkShape& shape, const rt::tune::Settings& settings,
                                   const rt::TuningDb* db);

}  // namespace winnow::ops

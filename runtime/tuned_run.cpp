#include "runtime/tuned_run.h"

#include <fmt/format.h>

namespace winnow::rt::tune {

TunedRun tune_and_store(const std::vector<Candidate>& all, CandidateCompiler& compiler,
                        Timer& timer, const Settings& settings, const TuningDb* db,
                        const TuningKey& key) {
  TunedRun out;
  out.run = run_tuner(all, compiler, timer, settings);
  for (const Measurement& m : out.run.tried) {
    std::string times;
    for (double t : m.timings_us) times += fmt::format("{}{:.3f}", times.empty() ? "" : ",", t);
    out.timings += fmt::format("{} | {} | {}{}\n", all[m.candidate].params, outcome_name(m.outcome),
                               times, m.error.empty() ? "" : " | " + m.error);
  }
  if (out.run.baseline >= 0) out.baseline_us = out.run.tried[std::size_t(out.run.baseline)].median_us;
  if (out.run.best < 0) return out;
  const Measurement& best = out.run.tried[std::size_t(out.run.best)];
  out.best = int(best.candidate);
  out.best_us = best.median_us;
  if (db) {
    TunedRecord r;
    r.params = all[best.candidate].params;
    r.time_us = out.best_us;
    r.heuristic_us = out.baseline_us;
    r.timings = out.timings;
    out.stored = db->store(key, r);
  }
  return out;
}

}  // namespace winnow::rt::tune

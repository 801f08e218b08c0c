// One tuning run of an op's candidates and its record in the tuning database: the tuner
// (runtime/tuner.h) over the candidates, every measurement as text, the winner's record
// stored under the op's key. The ops' tuning files (ops/topk/topk_tuning.h, ops/block/block_tuning.h)
// declare what is tuned; this is how every op's run ends.
#pragma once
#include <string>
#include <vector>

#include "runtime/tuner.h"
#include "runtime/tuning_db.h"

namespace winnow::rt::tune {

struct TunedRun {
  Result run;
  int best = -1;  // index into the candidates of the winner; -1: none timed
  double best_us = 0, baseline_us = 0;
  bool stored = false;  // written to the database
  std::string timings;  // every measurement, one line per candidate (the database's text)
};

// run_tuner over `all`, then, when a candidate was timed and `db` is given, the record
// (params: the winner's Candidate::params) stored under `key`.
TunedRun tune_and_store(const std::vector<Candidate>& all, CandidateCompiler& compiler,
                        Timer& timer, const Settings& settings, const TuningDb* db,
                        const TuningKey& key);

}  // namespace winnow::rt::tune

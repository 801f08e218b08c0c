// Tuning block-select's whole call: its database key, the lookup, the compiles of its
// candidates, and one tuning run (ops/block/block_space.h's candidates through runtime/tuner.h,
// the winner stored). `winnow tune block-select` and `winnow bench block-select` call these;
// execute never does.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "ops/block/block_space.h"
#include "runtime/kernel_cache.h"
#include "runtime/tuned_run.h"

namespace winnow::backend {
class Backend;
}

namespace winnow::ops {

// The key of the problem at `seq_len` (bucketed as rows = keys = seq_len) on ctx's device
// (null: "none"), compiled by `be`: op "block-select", the block score program's hash,
// bf16, the causal window.
rt::TuningKey block_tuning_key(const BlockProblem& p, const rt::Context* ctx,
                               const backend::Backend& be, int64_t seq_len);

// The database's point for the key, when it has one that still fits the problem on this
// device; anything else is a miss with a warning.
struct TunedBlockPoint {
  BlockPoint point;
  rt::TunedRecord record;
};
std::optional<TunedBlockPoint> find_tuned_block_point(const rt::TuningDb& db, const rt::TuningKey& key,
                                                      const BlockProblem& p, const rt::Context* ctx);

// Compiles a candidate's two ops through the cubin cache (compile only), in parallel.
class BlockCandidateCompiler : public rt::tune::CandidateCompiler {
 public:
  BlockCandidateCompiler(const BlockProblem& p, const std::vector<BlockCandidate>& candidates,
                         rt::CubinCache& cache, const backend::Backend& be)
      : problem_(p), candidates_(candidates), cache_(cache), be_(be) {}
  void compile(std::size_t i) override;
 private:
  const BlockProblem& problem_;
  const std::vector<BlockCandidate>& candidates_;
  rt::CubinCache& cache_;
  const backend::Backend& be_;
};

struct BlockTuneResult {
  BlockSpace space;
  rt::tune::TunedRun tuned;
  std::optional<BlockPoint> best;  // the winner, when one was timed
};

// Tunes over `space`: every candidate compiled by `compiler` and timed by `timer` (both
// indexed by the space's candidates), the winner stored under `key` in `db` when given.
BlockTuneResult tune_block(const BlockSpace& space, rt::tune::CandidateCompiler& compiler,
                           rt::tune::Timer& timer, const rt::tune::Settings& settings,
                           const rt::TuningDb* db, const rt::TuningKey& key);

}  // namespace winnow::ops

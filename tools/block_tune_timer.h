// The tuner's timing source on a GPU for block-select's whole call: `structured` inputs of
// the problem at one length on the device (generated once), each candidate's two ops built
// from the cubin cache (ops::BlockCandidateCompiler filled it) with its own index buffers,
// and one whole call (the index with FlashPrefill's default rule, then the attention) timed
// with CUDA events after the L2 was flushed.
#pragma once
#include <memory>
#include <vector>

#include "ops/block/block_space.h"
#include "runtime/kernel_cache.h"
#include "runtime/tuner.h"

namespace winnow::backend {
class Backend;
}

namespace winnow::tools {

class BlockTuneTimer : public rt::tune::Timer {
 public:
  BlockTuneTimer(const ops::BlockProblem& p, const std::vector<ops::BlockCandidate>& candidates,
                 const rt::Context& ctx, rt::CubinCache& cache, const backend::Backend& be,
                 int64_t seq_len);
  ~BlockTuneTimer() override;
  void prepare(std::size_t i) override;
  double run_us(std::size_t i) override;
  void release(std::size_t i) override;
  std::string describe(std::size_t i) override;  // the two ops' launch_info

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace winnow::tools

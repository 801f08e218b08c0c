// The tuner's timing source on a GPU for the topk op: inputs of the problem's shape on
// the device (random values, generated once), each candidate built from the cubin cache
// (TopkCandidateCompiler filled it) with its own workspace, and one run timed with CUDA
// events after the L2 was flushed (a write over twice its size, outside the events).
#pragma once
#include <memory>
#include <vector>

#include "ops/topk/topk_space.h"
#include "runtime/tuner.h"

namespace winnow::ops {

class TopkDeviceTimer : public rt::tune::Timer {
 public:
  // The device must hold the inputs (they are allocated here; throws CudaError if not).
  TopkDeviceTimer(const TopkProblem& p, const std::vector<TopkCandidate>& candidates,
                  const rt::Context& ctx, rt::CubinCache& cache, const backend::Backend& be,
                  const TopkShape& shape);
  ~TopkDeviceTimer() override;
  void prepare(std::size_t i) override;
  double run_us(std::size_t i) override;
  void release(std::size_t i) override;
  std::string describe(std::size_t i) override;  // TopkOp::launch_info

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace winnow::ops

#include "tools/block_tune_timer.h"

#include <algorithm>

#include "compiler/backend/backend.h"
#include "runtime/cuda_driver.h"
#include "testing/block_harness.h"
#include "tools/bench_common.h"

namespace winnow::tools {

struct BlockTuneTimer::Impl {
  Impl(const ops::BlockProblem& p, const std::vector<ops::BlockCandidate>& c, const rt::Context& x,
       rt::CubinCache& ca, const backend::Backend& b, int64_t L)
      : problem(p), candidates(c), ctx(x), cache(ca), be(b), seq_len(L) {}
  const ops::BlockProblem& problem;
  const std::vector<ops::BlockCandidate>& candidates;
  const rt::Context& ctx;
  rt::CubinCache& cache;
  const backend::Backend& be;
  int64_t seq_len;
  ops::BlockDeviceInputs inputs;
  rt::DeviceBuffer out, flush;
  CUstream stream = nullptr;
  // The candidate being timed.
  std::unique_ptr<ops::BlockSelectOp> select;
  std::unique_ptr<ops::BlockAttentionOp> attention;
  ops::BlockIndexBuffers index;
};

BlockTuneTimer::BlockTuneTimer(const ops::BlockProblem& p,
                               const std::vector<ops::BlockCandidate>& c, const rt::Context& ctx,
                               rt::CubinCache& cache, const backend::Backend& be, int64_t seq_len)
    : impl_(std::make_unique<Impl>(p, c, ctx, cache, be, seq_len)) {
  Impl& m = *impl_;
  ctx.bind();
  m.inputs = ops::upload_block_inputs(ops::make_block_data(p, seq_len, ops::BlockInput::Structured, 1));
  m.out = ops::make_attention_output(p, seq_len);
  m.flush = rt::DeviceBuffer(2 * size_t(std::max(ctx.info().l2_bytes, 1 << 20)));
  rt::check(rt::driver().cuStreamCreate(&m.stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
}

BlockTuneTimer::~BlockTuneTimer() {
  if (impl_->stream) rt::driver().cuStreamDestroy(impl_->stream);
}

void BlockTuneTimer::prepare(std::size_t i) {
  Impl& m = *impl_;
  m.ctx.bind();
  const ops::BlockProblem q = ops::with_point(m.problem, m.candidates[i].point);
  m.select = ops::BlockSelectOp::create(q, &m.ctx);
  m.select->build(m.cache, m.be);  // cache hits: the compiler built them
  m.attention = ops::BlockAttentionOp::create(q, &m.ctx);
  m.attention->build(m.cache, m.be);
  m.index = ops::make_index_buffers(*m.select, m.seq_len, false);
}

double BlockTuneTimer::run_us(std::size_t i) {
  Impl& m = *impl_;
  const rt::DriverApi& cu = rt::driver();
  rt::check(cu.cuMemsetD32Async(m.flush.ptr(), i & 0xFF, m.flush.size() / 4, m.stream),
            "cuMemsetD32Async (L2 flush)");
  Event start, stop;
  rt::check(cu.cuEventRecord(start.get(), m.stream), "cuEventRecord");
  ops::execute_block_select(*m.select, m.inputs, ops::BlockSelectRule{}, m.index, m.stream);
  ops::execute_block_attention(*m.attention, m.inputs, m.index, m.out, m.stream);
  rt::check(cu.cuEventRecord(stop.get(), m.stream), "cuEventRecord");
  rt::check(cu.cuEventSynchronize(stop.get()), "cuEventSynchronize");
  float ms = 0;
  rt::check(cu.cuEventElapsedTime(&ms, start.get(), stop.get()), "cuEventElapsedTime");
  return double(ms) * 1000.0;
}

std::string BlockTuneTimer::describe(std::size_t) {
  Impl& m = *impl_;
  return m.select && m.attention ? m.select->launch_info() + "; " + m.attention->launch_info() : "";
}

void BlockTuneTimer::release(std::size_t) {
  impl_->select.reset();
  impl_->attention.reset();
  impl_->index = ops::BlockIndexBuffers();
}

}  // namespace winnow::tools

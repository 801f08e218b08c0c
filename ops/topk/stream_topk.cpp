#include "ops/topk/stream_topk.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "ops/common/validate.h"

namespace winnow::ops {

ChunkPlan plan_chunks(int64_t rows, int64_t requested, int rows_per_cta, int ctas) {
  ChunkPlan c;
  if (rows <= 0) return c;
  const int64_t block = std::max(1, rows_per_cta);
  const int64_t most = std::numeric_limits<int32_t>::max() / block * block;  // int32 rows
  int64_t want = requested > 0 ? requested : kChunkWaves * block * std::max(1, ctas);
  want = std::clamp<int64_t>(want, 1, most);
  c.chunks = (rows + want - 1) / want;
  // Even chunks (no short straggler launch), in whole row blocks.
  const int64_t even = (rows + c.chunks - 1) / c.chunks;
  c.chunk_rows = std::min(most, (even + block - 1) / block * block);
  c.chunks = (rows + c.chunk_rows - 1) / c.chunk_rows;
  return c;
}

std::unique_ptr<StreamTopk> StreamTopk::create(const StreamProblem& p, const rt::Context* ctx) {
  if (p.topk.mode != Mode::TopK)
    throw InvalidArgument("the streaming driver runs top-k mode only (materialize writes "
                          "[rows, num_keys] in one launch)");
  if (p.chunk_rows < 0)
    throw InvalidArgument(fmt::format("chunk_rows = {} must be >= 0 (0: chosen)", p.chunk_rows));
  return std::unique_ptr<StreamTopk>(new StreamTopk(p, TopkOp::create(p.topk, ctx)));
}

StreamTopk::StreamTopk(const StreamProblem& p, std::unique_ptr<TopkOp> op)
    : problem_(p), op_(std::move(op)) {}
StreamTopk::~StreamTopk() = default;

const StreamProblem& StreamTopk::problem() const { return problem_; }
const TopkOp& StreamTopk::op() const { return *op_; }
void StreamTopk::build(rt::CubinCache& cache, const backend::Backend& be) { op_->build(cache, be); }
size_t StreamTopk::workspace_bytes() const { return op_->workspace_bytes(); }
size_t StreamTopk::counter_offset() const { return op_->counter_offset(); }

ChunkPlan StreamTopk::chunks_for(int64_t rows) const {
  return plan_chunks(rows, problem_.chunk_rows, op_->rows_per_cta(), op_->max_ctas());
}

void StreamTopk::execute(const TopkInputs& in, const TensorView* out_indices,
                         const TensorView* out_scores, void* workspace, size_t workspace_bytes,
                         CUstream stream) const {
  execute_chunked(*op_, problem_.chunk_rows, problem_.hint, in, out_indices, out_scores,
                  workspace, workspace_bytes, stream);
}

void execute_chunked(const TopkOp& op, int64_t chunk_rows, bool hint, const TopkInputs& in,
                     const TensorView* out_indices, const TensorView* out_scores,
                     void* workspace, size_t workspace_bytes, CUstream stream) {
  const TopkProblem& p = op.problem();
  if (p.mode != Mode::TopK)
    throw InvalidArgument("the streaming driver runs top-k mode only (materialize writes "
                          "[rows, num_keys] in one launch)");
  if (chunk_rows < 0)
    throw InvalidArgument(fmt::format("chunk_rows = {} must be >= 0 (0: chosen)", chunk_rows));
  size_t need = 0;
  bool built = true;
  try {
    need = op.workspace_bytes();
  } catch (const NotBuilt&) {
    built = false;
  }
  // The whole call first, so that a bad tensor fails before any chunk runs.
  const CallShape shape = validate_call(p, in.q.device, in, out_indices, out_scores, workspace,
                                        workspace_bytes, need, p.causal_offset,
                                        op.max_sample_hint());
  if (!built) (void)op.workspace_bytes();  // NotBuilt, now that the arguments are checked
  const rt::DriverApi& cu = rt::driver();
  auto* counters = static_cast<unsigned char*>(workspace) + op.counter_offset();
  rt::check(cu.cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(counters), 0, 2, stream),
            "cuMemsetD32Async (stream counters)");
  const ChunkPlan plan = plan_chunks(shape.rows, chunk_rows, op.rows_per_cta(), op.max_ctas());
  // Relative indices are keys only when every window starts at 0 (dense, causal).
  const bool hint_is_keys = p.absolute_indices || p.window != WindowKind::Ranges;
  const int64_t hint_len = std::min<int64_t>(p.k, op.max_sample_hint());
  for (int64_t c = 0; c < plan.chunks; ++c) {
    const int64_t r0 = c * plan.chunk_rows, n = std::min(plan.chunk_rows, shape.rows - r0);
    TopkInputs part = in;
    part.q = row_slice(in.q, r0, n);
    part.weights = row_slice(in.weights, r0, n);
    part.window_start = row_slice(in.window_start, r0, n);
    part.window_end = row_slice(in.window_end, r0, n);
    if (c > 0) {
      part.sample_hint = {};
      if (hint && hint_is_keys) {
        part.sample_hint = row_slice(row_vector(*out_indices, r0 - 1), 0, hint_len);
      }
    }
    const TensorView oi = row_slice(*out_indices, r0, n);
    TensorView os;
    if (out_scores) os = row_slice(*out_scores, r0, n);
    CallOptions opt;
    opt.causal_offset = p.causal_offset + r0;
    opt.accumulate_counters = true;
    op.execute(part, &oi, out_scores ? &os : nullptr, workspace, workspace_bytes, stream, opt);
  }
}

}  // namespace winnow::ops

// Streaming top-k over a long sequence (StreamIndex; the csa-1m workload): the query rows
// run in chunks, one topk launch per chunk on the caller's stream, each with its own
// causal offset, and each chunk's sample hint is the previous chunk's selection of its
// last row. Exact: every chunk is an exact topk call; the hint only sets the first gate.
//
// Why the last row's selection as the hint (and not a histogram of the whole chunk's
// selections): under a causal window the last row of a chunk sees every key that any
// earlier row saw, so its top k is the best-informed guess of the keys the next rows
// rank high; it is already on the device in index order (the unsorted output), so the
// hint costs no kernel, no temporary and no workspace.
#pragma once
#include <cstdint>
#include <memory>

#include "ops/common/topk_op.h"

namespace winnow::ops {

struct StreamProblem {
  // The per-chunk problem. causal_offset: the position of the sequence's row 0;
  // max_workspace_bytes bounds the driver's whole workspace (0: none).
  TopkProblem topk;
  int64_t chunk_rows = 0;  // rows per launch; 0: chosen by plan_chunks
  bool hint = true;        // pass the previous chunk's last row's selection as the hint
};

// How the rows are cut into launches.
struct ChunkPlan {
  int64_t chunk_rows = 0;  // rows of every chunk but the last (which holds the rest)
  int64_t chunks = 0;
};

// Waves of the persistent grid per chunk by default: enough that the last wave's idle
// CTAs (at most one light work item each) cost about 1 % of a chunk.
inline constexpr int64_t kChunkWaves = 64;

// The chunks for `rows` rows: `requested` rows each (0: kChunkWaves waves of rows_per_cta
// x ctas rows), at most 2^31 - 1, then evened out over the chunk count and rounded up to
// whole row blocks. rows_per_cta and ctas >= 1.
ChunkPlan plan_chunks(int64_t rows, int64_t requested, int rows_per_cta, int ctas);

// The chunk loop over any built top-k op (StreamTopk's, or a C API plan's): rows in chunks
// of chunk_rows (0: chosen by plan_chunks), one launch each with its causal offset, each
// chunk's sample hint (when `hint`) the previous chunk's selection of its last row; the
// counters summed over the chunks. Validates the whole call before the first launch (the
// arguments first, then whether the op is built); never allocates, synchronises or
// compiles.
void execute_chunked(const TopkOp& op, int64_t chunk_rows, bool hint, const TopkInputs& in,
                     const TensorView* out_indices, const TensorView* out_scores,
                     void* workspace, size_t workspace_bytes, CUstream stream);

class StreamTopk {
 public:
  // Validates (as TopkOp::create, and chunk_rows >= 0).
  static std::unique_ptr<StreamTopk> create(const StreamProblem& p, const rt::Context* ctx);
  ~StreamTopk();

  const StreamProblem& problem() const;
  const TopkOp& op() const;
  void build(rt::CubinCache& cache, const backend::Backend& be);
  // The workspace execute needs (the per-chunk op's, reused by every chunk; needs build()
  // with a context), within max_workspace_bytes.
  size_t workspace_bytes() const;
  // Two uint32 counters summed over all chunks: [0] fallback rows, [1] bad windows.
  size_t counter_offset() const;
  ChunkPlan chunks_for(int64_t rows) const;
  // The whole sequence's tensors (as TopkOp::execute; in.sample_hint, optional, is the
  // first chunk's hint). Validates everything before the first launch; never allocates,
  // synchronises or compiles.
  void execute(const TopkInputs& in, const TensorView* out_indices,
               const TensorView* out_scores, void* workspace, size_t workspace_bytes,
               CUstream stream) const;

 private:
  StreamTopk(const StreamProblem& p, std::unique_ptr<TopkOp> op);
  StreamProblem problem_;
  std::unique_ptr<TopkOp> op_;
};

}  // namespace winnow::ops

// Runs the paged decode op on host data: upload, execute, download (tests, benchmark).
#pragma once
#include <cstdint>
#include <vector>

#include "ops/paged/paged_topk.h"
#include "testing/paged_reference.h"

namespace winnow::ops {

struct PagedRunResult {
  std::vector<int> indices;  // [batch * next_n, k]
  uint32_t fallback_rows = 0, bad_windows = 0;
};

PagedRunResult run_paged_on_device(const PagedTopkOp& op, const rt::Context& ctx,
                                   const PagedHostData& d);

// The call captured in a CUDA graph over d's buffers (nothing runs while capturing), then:
// `captured`, the graph launched as captured; the context lengths replaced on the device by
// `replay_lens` (same form as d.context_lens, each at most d's: the block table still
// covers them) and `replayed`, the graph launched again; `eager`, the op executed directly
// with those lengths. A graph that read a length on the host would differ from eager.
struct PagedGraphResult {
  PagedRunResult captured, replayed, eager;
};
PagedGraphResult run_paged_graph_on_device(const PagedTopkOp& op, const rt::Context& ctx,
                                           const PagedHostData& d,
                                           const std::vector<int>& replay_lens);

}  // namespace winnow::ops

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

// The optional hint of a call (PagedInputs::hint): `rows` [batch * next_n, k] in a buffer
// of its own, or, in_place, written into the output buffer, which the call then reads as
// its hint and overwrites.
struct PagedHint {
  bool given = false;
  std::vector<int> rows;
  bool in_place = false;
};

PagedRunResult run_paged_on_device(const PagedTopkOp& op, const rt::Context& ctx,
                                   const PagedHostData& d, const PagedHint& hint = {});

// The call captured in a CUDA graph over d's buffers (nothing runs while capturing), then:
// `captured`, the graph launched as captured; the context lengths replaced on the device by
// `replay_lens` (same form as d.context_lens, each at most d's: the block table still
// covers them) and `replayed`, the graph launched again; `eager`, the op executed directly
// with those lengths. A graph that read a length on the host would differ from eager. A
// hint is given to every launch (in place: the output of the launch before it).
struct PagedGraphResult {
  PagedRunResult captured, replayed, eager;
};
PagedGraphResult run_paged_graph_on_device(const PagedTopkOp& op, const rt::Context& ctx,
                                           const PagedHostData& d,
                                           const std::vector<int>& replay_lens,
                                           const PagedHint& hint = {});

}  // namespace winnow::ops

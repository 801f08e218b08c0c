// Runs the paged decode op on host data: upload, execute, download (tests, benchmark).
#pragma once
#include <cstdint>
#include <vector>

#include "ops/paged_topk.h"
#include "testing/paged_reference.h"

namespace winnow::ops {

struct PagedRunResult {
  std::vector<int> indices;  // [batch * next_n, k]
  uint32_t fallback_rows = 0, bad_windows = 0;
};

PagedRunResult run_paged_on_device(const PagedTopkOp& op, const rt::Context& ctx,
                                   const PagedHostData& d);

}  // namespace winnow::ops

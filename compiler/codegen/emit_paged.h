// Generated stub of the paged decode op's gather module (templates/paged_gather_kernel.cuh):
// two entry points, no plan constants (every size is a run-time argument).
#pragma once
#include "compiler/codegen/emit_cuda.h"

namespace winnow::codegen {

inline constexpr const char* kPagedWindowsEntry = "winnow_paged_windows";
inline constexpr const char* kPagedGatherEntry = "winnow_paged_gather";

// `entry` of the result names the gather kernel.
GeneratedKernel emit_paged_gather();

}  // namespace winnow::codegen

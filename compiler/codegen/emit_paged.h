// Generated stub of the paged decode op's gather module (templates/paged/paged_gather_kernel.cuh):
// two entry points, no plan constants (every size is a run-time argument).
#pragma once
#include "compiler/codegen/emit_cuda.h"

namespace winnow::codegen {

inline constexpr const char* kPagedWindowsEntry = "winnow_paged_windows";
inline constexpr const char* kPagedGatherEntry = "winnow_paged_gather";

// `entry` of the result names the gather kernel.
GeneratedKernel emit_paged_gather();

// The stream path (WINNOW_PAGED_STREAM=1, templates/paged/paged_stream_kernels.cuh): five entry
// points (prepare, page stream, threshold, hint, select) reading one config and the score
// functor printed from the IR (a head-sum program over 64 heads).
inline constexpr const char* kPagedPrepareEntry = "winnow_paged_prepare";
inline constexpr const char* kPagedStreamEntry = "winnow_paged_stream";
inline constexpr const char* kPagedThresholdEntry = "winnow_paged_threshold";
inline constexpr const char* kPagedSelectEntry = "winnow_paged_select";
inline constexpr const char* kPagedHintEntry = "winnow_paged_hint";
// The fallback rounds' gate under graph capture (templates/paged/paged_round_gate.cuh): its
// own module, compiled by NVRTC whatever the op's backend.
inline constexpr const char* kPagedRoundGateEntry = "winnow_paged_round_gate";

// The stream kernel's CTAs an SM: its launch bounds (112 registers) and the op's grid.
inline constexpr int kPagedStreamCtasPerSm = 2;

struct PagedStreamConfig {
  int next_n = 1, k = 2048, stages = 4;
  bool sorted = false;
  bool uses_w = true, uses_kscale = true;
};
// `entry` of the result names the page stream.
GeneratedKernel emit_paged_stream(const ir::Expr& score, const PagedStreamConfig& c);
// The round gate's module (one entry, kPagedRoundGateEntry).
GeneratedKernel emit_paged_round_gate();

}  // namespace winnow::codegen

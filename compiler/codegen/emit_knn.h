// The generated stub of the retrieval mode: one module, three entry points
// (the corpus stream, the first threshold, the select), all reading one config and the
// score functor printed from the IR.
#pragma once
#include "compiler/codegen/emit_cuda.h"
#include "compiler/plan/knn_plan.h"

namespace winnow::codegen {

inline constexpr const char* kKnnStreamEntry = "winnow_knn_stream";
inline constexpr const char* kKnnThresholdEntry = "winnow_knn_threshold";
inline constexpr const char* kKnnSelectEntry = "winnow_knn_select";

// `score`: a one-head program (dot(0), qsq, ksq, w, kscale). `entry` of the result names
// the stream kernel.
GeneratedKernel emit_knn(const ir::Expr& score, const plan::KnnPlan& plan);

}  // namespace winnow::codegen

// Emits the small generated stub for NVRTC: the plan's constants, the score functor
// printed from the IR, and one extern "C" entry point that instantiates the template.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "compiler/ir/ir.h"
#include "compiler/plan/kernel_plan.h"

namespace winnow::codegen {

inline constexpr const char* kTopkEntry = "winnow_topk";

struct GeneratedKernel {
  std::string source;  // the .cu stub
  std::string entry;   // extern "C" kernel name
  std::vector<std::pair<std::string, std::string>> headers;  // the embedded templates
};

// The one head sum of a program of the form post(sum_h(term(dot(h), w[h]))), where post
// reads no dot: the kernel can then sum the terms in registers next to the tensor-core
// accumulators. Null for any other program.
const ir::Node* head_sum_node(const ir::Expr& score);

// The score functor alone: `struct WinnowScore { static float eval(const ScoreArgs&) }`.
std::string emit_score_functor(const ir::Expr& score, int heads);

// Every embedded template as (include name, text), for CompileRequest::headers.
std::vector<std::pair<std::string, std::string>> template_headers();

GeneratedKernel emit_topk(const ir::Expr& score, const plan::KernelSpec& spec,
                          const plan::KernelPlan& plan);

}  // namespace winnow::codegen

// What the two block ops share: the validated problem, the kernels' spec and plan, the
// generated stub and its compiled module (ops/jit_module), and the loading of entries.
#pragma once
#include <memory>
#include <string>

#include "compiler/codegen/emit_cuda.h"
#include "ops/block_problem.h"
#include "ops/jit_module.h"

namespace winnow::ops {

struct BlockModule {
  BlockProblem problem;
  const rt::Context* ctx = nullptr;
  plan::BlockSpec spec;
  plan::BlockPlan plan;
  std::string stem;     // "winnow_block_select": names the source and the cache entry
  std::string program;  // what the cache key covers besides the stub (IR, plan)
  codegen::GeneratedKernel generated;
  CompiledModule module;

  // Validates the problem and chooses the plan (ctx may be null: compile only); the
  // caller then fills `program` and `generated`.
  BlockModule(const BlockProblem& p, const rt::Context* ctx, std::string stem);
  backend::CompileRequest compile_request() const;
  // Compiles or takes the cubin from the cache; true when there is a context to load into.
  bool build(rt::CubinCache& cache, const backend::Backend& be);
  std::shared_ptr<const rt::LoadedKernel> load(const char* entry, int dynamic_smem_bytes) const;
  // "name: N CTAs/SM, R registers, S bytes of shared memory" of a loaded kernel.
  std::string describe(const char* name, const rt::LoadedKernel& k) const;
};

}  // namespace winnow::ops

// What the two block ops share: the validated problem, the kernels' spec and plan, the
// generated stub and its compiled module (ops/jit_module), and the loading of entries.
#pragma once
#include <memory>
#include <string>

#include "compiler/codegen/emit_cuda.h"
#include "ops/block/block_problem.h"
#include "ops/common/jit_module.h"

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
  // Moves the plan to an sm_90a wgmma kernel: `flag` 1 on, 0 off, -1 as the environment
  // variable `var` says ("1" on, "0" off), else `by_default`; other archs
  // keep the mma.sync kernels. `use` is plan::use_wgmma_attention or plan::use_wgmma_score;
  // a plan that does not fit the device's shared memory throws NotSupported with the
  // reason where the kernel was asked for, and keeps the mma.sync kernel where it was the
  // default.
  using WgmmaPlanStep = bool (*)(const plan::BlockSpec&, long, plan::BlockPlan*, std::string*);
  void use_wgmma(int flag, const char* var, bool by_default, WgmmaPlanStep use);
  // "name: N CTAs/SM, R registers, S bytes of shared memory" of a loaded kernel.
  // threads: the kernel's CTA size, for its CTAs per SM (0: the plan's threads).
  std::string describe(const char* name, const rt::LoadedKernel& k, int threads = 0) const;
};

// What every block op offers over its module: the problem, the generated source and plan,
// the compile request, the compiled cubin and its key, and build().
class BlockOp {
 public:
  virtual ~BlockOp() = default;
  BlockOp(const BlockOp&) = delete;
  BlockOp& operator=(const BlockOp&) = delete;

  const BlockProblem& problem() const { return m_.problem; }
  const std::string& source() const { return m_.generated.source; }
  std::string plan_text() const { return m_.program; }  // the spec and plan (and program)
  backend::CompileRequest compile_request() const { return m_.compile_request(); }
  const std::string& content_key() const { return m_.module.key; }
  bool built() const { return !m_.module.cubin.empty(); }
  const std::vector<char>& cubin() const { return m_.module.cubin; }
  // Compiles (or takes from the cache) and, when there is a context, loads the kernels.
  void build(rt::CubinCache& cache, const backend::Backend& be) {
    if (m_.build(cache, be)) load();
  }
  // Occupancy, registers and shared memory of the main kernel (after build on a device).
  virtual std::string launch_info() const = 0;

 protected:
  BlockOp(const BlockProblem& p, const rt::Context* ctx, std::string stem)
      : m_(p, ctx, std::move(stem)) {}
  virtual void load() = 0;
  BlockModule m_;
};

}  // namespace winnow::ops

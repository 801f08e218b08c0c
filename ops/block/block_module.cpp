#include "ops/block/block_module.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "ops/common/errors.h"
#include "runtime/env.h"

namespace winnow::ops {

BlockModule::BlockModule(const BlockProblem& p, const rt::Context* context, std::string name)
    : problem(p), ctx(context), stem(std::move(name)) {
  // "winnow_block_attention" -> "block-attention", the op's name in messages.
  std::string op = stem.substr(stem.find('_') + 1);
  std::replace(op.begin(), op.end(), '_', '-');
  validate_block_problem(p, op.c_str());
  spec = block_spec(p);
  plan = block_plan(spec, ctx ? ctx->info().max_smem_optin : kDefaultSmemLimit);
  program = plan::describe(spec, plan);
}

backend::CompileRequest BlockModule::compile_request() const {
  return make_compile_request(generated, problem.arch, stem);
}

bool BlockModule::build(rt::CubinCache& cache, const backend::Backend& be) {
  module = compile_cached(cache, be, compile_request(), stem, program, stem);
  return ctx != nullptr;
}

std::shared_ptr<const rt::LoadedKernel> BlockModule::load(const char* entry,
                                                          int dynamic_smem_bytes) const {
  return load_entry(*ctx, module, entry, dynamic_smem_bytes);
}

void BlockModule::use_wgmma(int flag, const char* var, bool by_default, WgmmaPlanStep use) {
  bool on = flag == 1, asked = flag == 1;
  if (flag < 0) {  // "1" asks for it, "0" turns it off, anything else keeps the default
    const auto v = rt::env_get(var);
    asked = v && *v == "1";
    on = asked || (by_default && !(v && *v == "0"));
  }
  if (!on || problem.arch.major != 9 || problem.arch.suffix != 'a') return;
  std::string why;
  if (!use(spec, ctx ? ctx->info().max_smem_optin : kDefaultSmemLimit, &plan, &why)) {
    if (asked) throw NotSupported(why);
    return;  // the default only: the mma.sync kernel serves this shape
  }
  program = plan::describe(spec, plan);
}

std::string BlockModule::describe(const char* name, const rt::LoadedKernel& k, int threads) const {
  return fmt::format("{}: {} CTAs/SM, {} registers, {} bytes of shared memory", name,
                     k.max_blocks_per_sm(threads ? threads : plan.threads), k.num_registers(),
                     k.dynamic_smem_bytes());
}

}  // namespace winnow::ops

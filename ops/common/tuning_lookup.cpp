#include "ops/common/tuning_lookup.h"

#include "compiler/backend/backend.h"
#include "runtime/cuda_driver.h"
#include "runtime/env.h"
#include "runtime/sha256.h"

namespace winnow::ops {

rt::TuningKey device_tuning_key(std::string op, const backend::Arch& arch, const rt::Context* ctx,
                                const backend::Backend& be) {
  rt::TuningKey k;
  k.op = std::move(op);
  k.arch = arch.str();
  k.gpu = ctx ? ctx->info().name : "none";
  k.sm_count = ctx ? ctx->info().sm_count : 0;
  k.driver = ctx ? std::to_string(ctx->info().driver_version) : "none";
  k.compiler = be.name() + " " + be.version();
  // Cache-relevant variables (WINNOW_NVRTC_OPTIONS, ...) change the kernels that were timed.
  if (const std::string env = rt::cache_relevant_env(); !env.empty())
    k.compiler += " env=" + rt::sha256_hex(env).substr(0, 16);
  return k;
}

}  // namespace winnow::ops

// The miss path shared by every op: a generated stub -> content key -> kernel cache
// (memory, disk, NVRTC) -> a module loaded once per context.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compiler/backend/backend.h"
#include "compiler/codegen/emit_cuda.h"
#include "runtime/cuda_driver.h"
#include "runtime/kernel_cache.h"

namespace winnow::ops {

// Shared memory a block may use when there is no device to ask (sm_90 and sm_100).
inline constexpr long kDefaultSmemLimit = 227 * 1024;

// "name=sha256\n" per embedded template (part of every content key).
const std::string& template_hashes();
// WINNOW_NVRTC_OPTIONS, split and sorted.
std::vector<std::string> extra_compiler_options();

// What the backend gets for a generated stub: its source and headers, the arch, the
// extra options and WINNOW_DUMP_DIR. `stem` names the source ("winnow_topk").
backend::CompileRequest make_compile_request(const codegen::GeneratedKernel& g,
                                             const backend::Arch& arch, const std::string& stem);

struct CompiledModule {
  std::string key;  // SHA-256 content key
  std::vector<char> cubin;
  // Set when the cubin came from the cache rather than this build's compile: the cubin to
  // load instead when the driver refuses `refused` (CubinCache::replace_refused), or
  // nullopt. Refers to the cache and backend of compile_cached, which outlive the module.
  std::function<std::optional<std::vector<char>>(const std::vector<char>& refused,
                                                 const std::string& why)>
      replace_refused;
};
// The cache entry of a request: its content key over (build id, templates, backend, arch,
// options, `program`: the canonical IR + plan text, and the stub itself).
rt::CubinId module_id(const backend::Backend& be, const backend::CompileRequest& req,
                      const std::string& program);
// Keys the request (module_id), then takes the cubin from the cache or compiles it.
CompiledModule compile_cached(rt::CubinCache& cache, const backend::Backend& be,
                              backend::CompileRequest req, const std::string& stem,
                              const std::string& program, const std::string& description);

// False for the driver errors that say nothing about the cubin (no memory, no context, a
// context broken by an earlier fault): those are not worth evicting it and recompiling.
bool load_error_may_be_the_cubin(CUresult code);

// One entry point of a module, loaded once per (context, key, entry). When the driver
// refuses a cubin that came from the cache, it is evicted and compiled again once, so a
// bad entry costs one compile instead of failing every build.
std::shared_ptr<const rt::LoadedKernel> load_entry(const rt::Context& ctx,
                                                   const CompiledModule& module, const char* entry,
                                                   int dynamic_smem_bytes);

// Execute before build(): NotBuilt, saying whether the op was compiled without a device.
[[noreturn]] void throw_not_built(bool compiled);

}  // namespace winnow::ops
